"""TLS on the broker: each listener's context, and the principal a client certificate gives.

`ListenerTls.of(config, listener)` builds the server context of a listener whose security
protocol is SSL or SASL_SSL from its `ssl.*` settings (the `listener.name.<l>.ssl.*` ones
first, broker/config.py `for_listener`); `client_context(config)` is this broker's context
for its connections to other brokers' inter-broker listener. Both through client/tls.py.

The principal (Kafka's DefaultKafkaPrincipalBuilder with SslPrincipalMapper): with a client
certificate, `User:` + the certificate's subject as Java's `X500Principal.getName()` prints it
(RFC 2253: the RDNs last first, CN, C, L, ST, O, OU, STREET, DC and UID by keyword, every
other attribute as its OID and `#` + the hex of its DER value), mapped by
`ssl.principal.mapping.rules`; without one, `User:ANONYMOUS`. A name no rule maps is refused
(the connection is closed, as Kafka fails its authentication).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.broker.connection_state import ANONYMOUS
from odradek.broker.settings.ssl import SSL_NAMES
from odradek.client.tls import TlsConfigError, keystore_certificate, ssl_context

__all__ = [
    "ListenerTls",
    "NoMatchingRule",
    "PrincipalMapper",
    "TlsConfigError",
    "client_context",
    "rfc2253_subject",
    "java_alt_names",
    "subject_alt_names",
]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")


class NoMatchingRule(ValueError):
    """No ssl.principal.mapping.rules rule maps this distinguished name."""


@dataclass(frozen=True)
class ListenerTls:
    """A TLS listener's server context and how it names the clients it authenticates."""

    context: ssl.SSLContext
    mapper: PrincipalMapper
    certificate: bytes | None = None  # the keystore's own certificate (DER): a dynamic update compares it
    has_truststore: bool = False

    @classmethod
    def of(cls, config: Any, listener: str) -> ListenerTls:
        settings = {name: config.for_listener(listener, name) for name in SSL_NAMES}
        try:
            context = ssl_context(settings, server=True)
            mapper = PrincipalMapper(settings["ssl.principal.mapping.rules"])
            certificate = keystore_certificate(settings)
        except (TlsConfigError, ValueError) as e:
            raise TlsConfigError(f"listener {listener}: {e}") from None
        truststore = bool(settings["ssl.truststore.location"] or settings["ssl.truststore.certificates"])
        return cls(context, mapper, certificate, truststore)

    def principal(self, peer_der: bytes | None) -> str:
        """The principal of a connection whose client sent certificate `peer_der` (None: none).
        Raises NoMatchingRule."""
        if not peer_der:
            return ANONYMOUS
        return "User:" + self.mapper.name(rfc2253_subject(peer_der))


def client_context(config: Any) -> ssl.SSLContext:
    """This broker's context for connecting to the inter-broker listener of the others."""
    listener = config.inter_broker_listener
    settings = {name: config.for_listener(listener, name) for name in SSL_NAMES}
    # the listener's keystore is this broker's identity as a client too (mutual TLS between brokers)
    try:
        return ssl_context(settings, server=False)
    except TlsConfigError as e:
        raise TlsConfigError(f"inter-broker listener {listener}: {e}") from None


# --------------------------------------------------------------------------- principal mapping

# Kafka's SslPrincipalMapper grammar: DEFAULT, or RULE:pattern/replacement/ with an optional L or U.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class PrincipalMapper:
    """ssl.principal.mapping.rules: the first rule whose pattern matches the whole name gives it."""

    def __init__(self, rules: str) -> None:
        self.rules: list[Callable[[str], str | None]] = []
        for text in (m.group(1) for m in _SPLITTER.finditer((rules or "DEFAULT").strip())):
            m = _PARSER.match(text)
            if m is None or m.end() != len(text):
                raise ValueError(f"invalid ssl.principal.mapping.rules rule: {text!r}")
            if m.group(1):
                self.rules.append(lambda dn: dn)
            elif m.group(2) is not None:
                self.rules.append(_rule(m.group(2), m.group(4), m.group(6)))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            out = rule(dn)
            if out is not None:
                return out
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn}")


def _rule(pattern: str, replacement: str, case: str) -> Callable[[str], str | None]:
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise ValueError(f"invalid pattern {pattern!r} in ssl.principal.mapping.rules: {e}") from None
    template = _java_replacement(replacement, rx.groups)

    def apply(dn: str) -> str | None:
        if rx.fullmatch(dn) is None:
            return None
        out = rx.sub(lambda m: "".join(p if isinstance(p, str) else (m.group(p) or "") for p in template), dn)
        return out.lower() if case == "L" else out.upper() if case == "U" else out

    return apply


def _java_replacement(text: str, groups: int) -> list[str | int]:
    """Java's Matcher replacement syntax: `$n` a group (digits taken while the number names a
    group; `$n` past the last group is literal, as Kafka escapes it), `\\c` the character c."""
    out: list[str | int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit() and int(text[i + 1]) <= groups:
            ref = int(text[i + 1])
            i += 2
            while i < len(text) and text[i].isdigit() and ref * 10 + int(text[i]) <= groups:
                ref = ref * 10 + int(text[i])
                i += 1
            out.append(ref)
        else:
            out.append(c)
            i += 1
    return out


# --------------------------------------------------------------------------- the subject's name

# Attributes Java prints by keyword in RFC 2253 form (X500Principal.RFC2253)
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string types Java prints as text: PrintableString, T61String, IA5String, GeneralString,
# BMPString, UTF8String
_STRING_TAGS = {0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1B: "latin-1", 0x1E: "utf-16-be", 0x0C: "utf-8"}
_ESCAPED = set(',=+<>#;"\\')


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at pos."""
    tag = der[pos]
    length = der[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(der[pos : pos + n], "big")
        pos += n
    if pos + length > len(der):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements inside [start, end): (tag, value start, value end, element start)."""
    out = []
    while start < end:
        tag, vs, ve = _tlv(der, start)
        out.append((tag, vs, ve, start))
        start = ve
    return out


def _oid(data: bytes) -> str:
    first = data[0]
    parts = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    value = 0
    for b in data[1:]:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def _tbs_fields(cert_der: bytes) -> list[tuple[int, int, int, int]]:
    """The TBSCertificate's fields after the version: serialNumber, signature, issuer, validity,
    subject, subjectPublicKeyInfo, then the optional [1], [2] and [3] extensions."""
    _t, cs, _ce = _tlv(cert_der, 0)  # Certificate
    _t, ts, te = _tlv(cert_der, cs)  # TBSCertificate
    fields = _children(cert_der, ts, te)
    return fields[1:] if fields and fields[0][0] == 0xA0 else fields  # [0] version


_SUBJECT_ALT_NAME = "2.5.29.17"


def subject_alt_names(cert_der: bytes) -> frozenset[tuple[int, str]]:
    """The subject alternative names of a DER certificate as Java's getSubjectAlternativeNames
    gives them: (kind, value), kind 1 rfc822Name, 2 dNSName, 6 URI, 7 iPAddress (its text
    form); other kinds with their DER value in hex."""
    out: set[tuple[int, str]] = set()
    for tag, es, ee, _s in _tbs_fields(cert_der)[6:]:
        if tag != 0xA3:  # [3] extensions
            continue
        (_t, ss, se, _x), *_ = _children(cert_der, es, ee)
        for _tag, xs, xe, _x in _children(cert_der, ss, se):  # each Extension
            parts = _children(cert_der, xs, xe)
            if _oid(cert_der[parts[0][1] : parts[0][2]]) != _SUBJECT_ALT_NAME:
                continue
            _ot, vs, ve, _x = parts[-1]  # the OCTET STRING holding GeneralNames
            _gt, gs, ge = _tlv(cert_der, vs)
            for ntag, ns, ne, start in _children(cert_der, gs, ge):
                kind, value = ntag & 0x1F, cert_der[ns:ne]
                if kind in (1, 2, 6):
                    out.add((kind, value.decode("latin-1")))
                elif kind == 7 and len(value) in (4, 16):
                    out.add((kind, str(ipaddress.ip_address(value))))
                else:
                    out.add((kind, cert_der[start:ne].hex()))
    return frozenset(out)


def java_alt_names(names: frozenset[tuple[int, str]]) -> str:
    """Subject alternative names as Kafka's messages print them: [[2, localhost], [7, 127.0.0.1]]."""
    return "[" + ", ".join(f"[{k}, {v}]" for k, v in sorted(names)) + "]"


def rfc2253_subject(cert_der: bytes) -> str:
    """The subject of a DER certificate as Java's X500Principal.getName() (RFC 2253) gives it."""
    fields = _tbs_fields(cert_der)
    _tag, ns, ne, _s = fields[4]
    rdns = []
    for _tag, ss, se, _s in _children(cert_der, ns, ne):  # each RDN: a SET of AttributeTypeAndValue
        avas = []
        for _tag, as_, ae, _s in _children(cert_der, ss, se):
            (_ot, os_, oe, _x), (vtag, vs, ve, vstart) = _children(cert_der, as_, ae)[:2]
            oid = _oid(cert_der[os_:oe])
            keyword = _KEYWORDS.get(oid, oid)
            if keyword == oid or vtag not in _STRING_TAGS:
                avas.append(f"{keyword}=#{cert_der[vstart:ve].hex()}")
            else:
                avas.append(f"{keyword}={_escape(cert_der[vs:ve].decode(_STRING_TAGS[vtag], errors='replace'))}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _escape(value: str) -> str:
    """Java's RFC 2253 escaping: the special characters, NUL as \\00, and spaces (and CR) at
    either end."""
    text = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in value)
    lead = 0
    while lead < len(text) and text[lead] in " \r":
        lead += 1
    trail = len(text) - 1
    while trail >= 0 and text[trail] in " \r":
        trail -= 1
    return "".join("\\" + c if (i < lead or i > trail) else c for i, c in enumerate(text))
