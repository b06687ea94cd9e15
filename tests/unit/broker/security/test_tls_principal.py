"""The principal a client certificate gives (broker/security/tls.py): the subject as Java's
X500Principal.getName() prints it (the expected strings below are what Java 17 printed for the
same certificates, see tests/interop/security/test_tls.py), and ssl.principal.mapping.rules
as Kafka's SslPrincipalMapper parses and applies them (its own test's cases)."""

from __future__ import annotations

import ssl

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.security.tls import ListenerTls, NoMatchingRule, PrincipalMapper, TlsConfigError, rfc2253_subject

# openssl -subj "/C=DE/ST=Berlin/L=Mitte/O=odradek, Inc./OU=dev+ops/CN= alice #1
#   /emailAddress=alice@example.com/DC=example/UID=a1" (one line)
ALICE = """-----BEGIN CERTIFICATE-----
MIICOTCCAd+gAwIBAgIUHZSV23e/ktBDklqTA/OM2HvxKOswCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPb2RyYWRlayB0ZXN0IENBMB4XDTI2MTEyNzE1MTQwNVoXDTI2
MTEyOTE1MTQwNVowgaMxCzAJBgNVBAYTAkRFMQ8wDQYDVQQIDAZCZXJsaW4xDjAM
BgNVBAcMBU1pdHRlMRYwFAYDVQQKDA1vZHJhZGVrLCBJbmMuMQwwCgYDVQQLDANk
ZXYxIDAeBgkqhkiG9w0BCQEWEWFsaWNlQGV4YW1wbGUuY29tMRcwFQYKCZImiZPy
LGQBGRYHZXhhbXBsZTESMBAGCgmSJomT8ixkAQEMAmExMFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAE3Jz5BrxZIy4PA3zxdTQncLEwnwgJWhYp7qoRjPhnHQuDySoo
nS+Wmqt9x+/ufB8kPvVrqVc5e/GuuQn5smAC/6N5MHcwCQYDVR0TBAIwADALBgNV
HQ8EBAMCB4AwHQYDVR0lBBYwFAYIKwYBBQUHAwEGCCsGAQUFBwMCMB0GA1UdDgQW
BBRwmEMnwu70OXcYLCQbuMKPRpvMSDAfBgNVHSMEGDAWgBSNariKNh6xpHLw6kEU
uM+vhzN7xzAKBggqhkjOPQQDAgNIADBFAiEAlJhJAoGlWH70fWds8oimxmlvXcuj
f//QGHoeK29OofYCICtLZvFFTkk1ultHHU5eFrNF4dMBdo1qAOTIDxGqHQVs
-----END CERTIFICATE-----
"""
ALICE_JAVA = (
    "UID=a1,DC=example,1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,"
    "OU=dev,O=odradek\\, Inc.,L=Mitte,ST=Berlin,C=DE"
)


def test_subject_as_java_prints_it():
    assert rfc2253_subject(ssl.PEM_cert_to_DER_cert(ALICE)) == ALICE_JAVA


def test_the_principal_is_user_and_the_mapped_name():
    tls = ListenerTls.__new__(ListenerTls)
    object.__setattr__(tls, "mapper", PrincipalMapper("RULE:^UID=([^,]*),.*,C=DE$/$1@de/U,DEFAULT"))
    assert tls.principal(ssl.PEM_cert_to_DER_cert(ALICE)) == "User:A1@DE"
    assert tls.principal(None) == "User:ANONYMOUS"


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
        (
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
            "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US",
            "duke@sme",
        ),
        ("RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U", "cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U", "cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT",
            "OU=JavaSoft,O=Sun Microsystems,C=US",
            "OU=JavaSoft,O=Sun Microsystems,C=US",
        ),
        ("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT", "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz", "Tkac\\, Adam"),
        ("RULE:^CN=(.*)$/$2x/", "CN=a", "$2x"),  # a group past the last is literal
        ("DEFAULT", "CN=a", "CN=a"),
    ],
)
def test_mapping_rules(rules, dn, name):
    assert PrincipalMapper(rules).name(dn) == name


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules_are_refused(rules):
    with pytest.raises(ValueError, match="invalid"):
        PrincipalMapper(rules)


def test_no_matching_rule():
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=x$/y/").name("CN=z")
    assert PrincipalMapper(",,RULE://,,,DEFAULT,,").name("CN=z") == "CN=z"


def test_per_listener_settings_win_key_by_key():
    c = BrokerConfig({"ssl.client.auth": "requested", "listener.name.mtls.ssl.client.auth": "required"})
    assert c.for_listener("MTLS", "ssl.client.auth") == "required"
    assert c.for_listener("SSL", "ssl.client.auth") == "requested"
    with pytest.raises(ValueError, match="unknown setting"):
        BrokerConfig({"listener.name.ssl.no.such.setting": "1"})


def test_a_jks_keystore_is_refused_with_how_to_convert_it(tmp_path):
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    c = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(jks)})
    with pytest.raises(TlsConfigError, match="Java KeyStore.*keytool -importkeystore"):
        ListenerTls.of(c, "SSL")


def test_a_tls_listener_without_a_keystore_is_refused():
    with pytest.raises(TlsConfigError, match="listener SSL: a TLS listener needs a keystore"):
        ListenerTls.of(BrokerConfig({"listeners": "SSL://127.0.0.1:0"}), "SSL")
