"""TLS settings: keystore, truststore, client authentication, protocols and principal mapping
(Kafka's SslConfigs and BrokerSecurityConfigs). Each may be given per listener as
`listener.name.<lower-case listener name>.<setting>`, which wins over the unprefixed one for
that listener, key by key, as Kafka's `valuesWithPrefixOverride` resolves them
(broker/config.py `for_listener`). They are read by broker/security/tls.py, for the
listeners whose security protocol is SSL or SASL_SSL and for this broker's connections to
the inter-broker listener."""

from __future__ import annotations

from odradek.broker.settings.setting import Setting, one_of

S = Setting

_STORE_TYPES = ("JKS", "PKCS12", "PEM")
_PROTOCOLS = ("TLSv1.2", "TLSv1.3")


def _protocols(v: list[str]) -> str | None:
    bad = [p for p in v if p not in _PROTOCOLS]
    if bad:
        return f"{', '.join(bad)}: odradek serves {' and '.join(_PROTOCOLS)} only"
    return None if v else "needs at least one protocol"


# The names of the settings that may be given per listener (listener.name.<l>.<name>).
SSL: tuple[Setting, ...] = (
    S(
        "ssl.keystore.type",
        "string",
        "JKS",
        "Format of ssl.keystore.location: PKCS12 or PEM (a JKS file is refused with a message saying how to "
        "convert it; with the default JKS type a PKCS12 file is read as PKCS12, as Java's keystore does).",
        validate=one_of(*_STORE_TYPES),
    ),
    S("ssl.keystore.location", "string", "", "The keystore file: this broker's private key and certificate chain."),
    S("ssl.keystore.password", "password", "", "Password of a PKCS12 keystore (not with PEM: use ssl.key.password)."),
    S("ssl.key.password", "password", "", "Password of the private key (an encrypted PEM key, or a PKCS12 key)."),
    S(
        "ssl.keystore.certificate.chain",
        "password",
        "",
        "The certificate chain in PEM, inline (KIP-651; with ssl.keystore.type=PEM and ssl.keystore.key).",
    ),
    S(
        "ssl.keystore.key",
        "password",
        "",
        "The private key in PEM (PKCS#8), inline (KIP-651; with ssl.keystore.type=PEM).",
    ),
    S(
        "ssl.truststore.type",
        "string",
        "JKS",
        "Format of ssl.truststore.location: PKCS12 or PEM (JKS files are refused).",
        validate=one_of(*_STORE_TYPES),
    ),
    S(
        "ssl.truststore.location",
        "string",
        "",
        "The certificates of the authorities trusted to sign peers' certificates; empty: the system's.",
    ),
    S("ssl.truststore.password", "password", "", "Password of a PKCS12 truststore."),
    S(
        "ssl.truststore.certificates",
        "password",
        "",
        "Trusted certificates in PEM, inline (KIP-651; with ssl.truststore.type=PEM).",
    ),
    S(
        "ssl.client.auth",
        "string",
        "none",
        "Mutual TLS: 'required' refuses clients without a trusted certificate, 'requested' asks for one "
        "(a client without gets User:ANONYMOUS), 'none' does not ask.",
        validate=one_of("none", "requested", "required"),
    ),
    S(
        "ssl.enabled.protocols",
        "list",
        list(_PROTOCOLS),
        "TLS versions a connection may use.",
        validate=_protocols,
    ),
    S(
        "ssl.protocol",
        "string",
        "TLSv1.3",
        "The highest TLS version offered (TLSv1.2 or TLSv1.3), within ssl.enabled.protocols.",
        validate=one_of("TLSv1.2", "TLSv1.3", "TLS"),
    ),
    S(
        "ssl.cipher.suites",
        "list",
        [],
        "TLS 1.2 cipher suites allowed, by their IANA names as Java's (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); "
        "empty: OpenSSL's defaults. TLS 1.3 suites cannot be restricted (Python's ssl): naming only some "
        "of them is refused.",
    ),
    S(
        "ssl.endpoint.identification.algorithm",
        "string",
        "https",
        "'https': this broker checks that another broker's certificate names the host it connects to "
        "(inter-broker TLS); empty: it does not.",
        validate=one_of("https", ""),
    ),
    S(
        "ssl.allow.dn.changes",
        "bool",
        False,
        "Whether a dynamic keystore update may change the certificate's distinguished name.",
    ),
    S(
        "ssl.allow.san.changes",
        "bool",
        False,
        "Whether a dynamic keystore update may drop subject alternative names of the certificate in use.",
    ),
    S(
        "ssl.principal.mapping.rules",
        "string",
        "DEFAULT",
        "How a client certificate's distinguished name (RFC 2253, as Java prints it) becomes the principal "
        "User:<name>: comma-separated RULE:pattern/replacement/[LU] tried in order, DEFAULT the name "
        "unchanged; a name no rule matches is refused.",
    ),
)

SSL_NAMES = frozenset(s.name for s in SSL)

# The stores a TLS listener takes again without a restart (Kafka's SslConfigs.RECONFIGURABLE_CONFIGS),
# as this broker's own dynamic settings, listener.name.<l>.<name> only (KIP-226;
# broker/security/tls_reload.py).
RECONFIGURABLE: frozenset[str] = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)
