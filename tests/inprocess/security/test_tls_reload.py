"""A TLS listener's keystore replaced without a restart (KIP-226), on a broker in this process:
IncrementalAlterConfigs of `listener.name.ssl.ssl.keystore.location` for this broker changes the
certificate new connections get while an open connection goes on; the same path set again after
the file was rewritten reloads it; what Kafka refuses (another distinguished name, fewer subject
alternative names, a store that does not load, the unprefixed name, every broker at once, a
password without password.encoder.secret) is answered as Kafka 3.9 answers it (INVALID_REQUEST and
its message) and changes nothing."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import struct
from pathlib import Path

import pytest
from support.inprocess import InProcessBroker
from support.raw import nested
from support.tls import Pki

from odradek.broker.password_encoder import PasswordEncoder

API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)
LOCATION = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def certs(pki: Pki) -> dict[str, Path]:
    hosts = ("127.0.0.1", "localhost")
    return {
        "first": pki.identity("first", "/CN=localhost", hosts=hosts).keystore,
        "second": pki.identity("second", "/CN=localhost", hosts=hosts).keystore,
        "third": pki.identity("third", "/CN=localhost", hosts=hosts).keystore,
        "other-dn": pki.identity("other-dn", "/CN=elsewhere", hosts=hosts).keystore,
        "fewer-sans": pki.identity("fewer-sans", "/CN=localhost", hosts=("localhost",)).keystore,
    }


def _der(keystore: Path) -> bytes:
    text = keystore.read_text()
    start = text.index("-----BEGIN CERTIFICATE-----")
    end = text.index("-----END CERTIFICATE-----", start) + len("-----END CERTIFICATE-----")
    return ssl.PEM_cert_to_DER_cert(text[start:end])


async def _alter(b: InProcessBroker, configs: dict[str, str | None], entity: str = "1", validate_only=False):
    ops = tuple(
        nested(44, 1, "AlterableConfig", name=k, config_operation=0 if v is not None else 1, value=v)
        for k, v in configs.items()
    )
    res = nested(44, 1, "AlterConfigsResource", resource_type=4, resource_name=entity, configs=ops)
    r = (await b.call(44, 1, resources=(res,), validate_only=validate_only)).responses[0]
    return r.error_code, r.error_message


async def _described(b: InProcessBroker) -> dict[str, tuple[str | None, int, bool]]:
    res = nested(32, 4, "DescribeConfigsResource", resource_type=4, resource_name="1", configuration_keys=None)
    r = await b.call(32, 4, resources=(res,), include_synonyms=False, include_documentation=False)
    return {
        e.name: (e.value, e.config_source, e.is_sensitive)
        for e in r.results[0].configs
        if e.name.startswith("listener.name.")
    }


class _Tls:
    """Connections to the broker's SSL listener: the certificate each new one gets."""

    def __init__(self, b: InProcessBroker, ca: Path) -> None:
        names = [n for n, _h, _p in b.config.listeners]
        self.port = b.broker.bound[names.index("SSL")][1]
        self.ctx = ssl.create_default_context(cafile=str(ca))

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.ctx, server_hostname="localhost")

    async def certificate(self) -> bytes:
        reader, writer = await self.open()
        try:
            assert await _api_versions(reader, writer)
            return writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()


async def _api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(API_VERSIONS_V0)
    await writer.drain()
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return len(await reader.readexactly(size)) == size


def _broker(tmp_path: Path, pki: Pki, keystore: Path, **extra: str) -> InProcessBroker:
    overrides = {
        **extra,
        "node.id": "1",
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        LOCATION: str(keystore),
    }
    return InProcessBroker(tmp_path / "data", overrides)


def test_new_connections_get_the_new_certificate_open_ones_go_on(tmp_path, pki, certs):
    live = tmp_path / "live.keystore.pem"
    shutil.copy(certs["second"], live)

    async def main() -> None:
        async with _broker(tmp_path, pki, certs["first"]) as b:
            tls = _Tls(b, pki.ca)
            assert await tls.certificate() == _der(certs["first"])
            reader, writer = await tls.open()  # open across the update
            assert await _api_versions(reader, writer)

            assert await _alter(b, {LOCATION: str(live)}, validate_only=True) == (0, None)
            assert await tls.certificate() == _der(certs["first"])  # validate only: nothing changes
            assert await _alter(b, {LOCATION: str(live)}) == (0, None)
            assert await tls.certificate() == _der(certs["second"])
            assert await _api_versions(reader, writer)  # the open connection goes on
            assert writer.get_extra_info("ssl_object").getpeercert(binary_form=True) == _der(certs["first"])
            writer.close()

            shutil.copy(certs["third"], live)  # rewritten in place: the same path set again reloads it
            assert await tls.certificate() == _der(certs["second"])
            assert await _alter(b, {LOCATION: str(live)}) == (0, None)
            assert await tls.certificate() == _der(certs["third"])

            # DescribeConfigs lists the listener-scoped settings as Kafka 3.9 does: the dynamic one DYNAMIC_BROKER
            assert await _described(b) == {
                LOCATION: (str(live), 2, False),
                "listener.name.ssl.ssl.keystore.type": ("PEM", 4, False),
            }

            assert await _alter(b, {LOCATION: None}) == (0, None)  # deleted: the static keystore again
            assert await tls.certificate() == _der(certs["first"])

    asyncio.run(main())


PKCS12_PASSWORD = "listener.name.ssl.ssl.keystore.password"
DYNAMIC = " for configuration Invalid dynamic configuration"  # Kafka 3.9's ConfigException wording


@pytest.mark.parametrize(
    ("configs", "entity", "code", "why"),
    [
        (
            {LOCATION: "other-dn"},
            "1",
            42,
            "Invalid value Validation of dynamic config update of SSLFactory failed: Keystore DistinguishedName "
            "does not match: existing={DN=CN=localhost}, new={DN=CN=elsewhere}" + DYNAMIC,
        ),
        (
            {LOCATION: "fewer-sans"},
            "1",
            42,
            "Invalid value Validation of dynamic config update of SSLFactory failed: Keystore SubjectAltNames do "
            "not match: existing={SAN=[[2, localhost], [7, 127.0.0.1]]}, new={SAN=[[2, localhost]]}" + DYNAMIC,
        ),
        ({LOCATION: "/nonexistent/keystore.pem"}, "1", 42, "cannot read /nonexistent/keystore.pem"),
        (
            {"ssl.keystore.location": "second"},
            "1",
            42,
            "These security configs can be dynamically updated only per-listener using the listener prefix: "
            "HashSet(ssl.keystore.location)",
        ),
        (
            {LOCATION: "second"},
            "",
            42,
            f"Cannot update these configs at default cluster level, broker id must be specified: Set({LOCATION})",
        ),
        ({LOCATION: "second"}, "2", 42, "Unexpected broker id, expected 1, but received 2"),
        (
            {LOCATION: "second", "listener.name.ssl.ssl.keystore.type": "PKCS12", PKCS12_PASSWORD: "changeit"},
            "1",
            40,
            "Invalid config value for resource ConfigResource(type=BROKER, name='1'): "
            "Password encoder secret not configured",
        ),
        ({"listener.name.plaintext.ssl.keystore.location": "second"}, "1", 40, "has no TLS listener plaintext"),
    ],
)
def test_refused_updates_change_nothing(tmp_path, pki, certs, configs, entity, code, why):
    configs = {k: str(certs.get(v, v)) for k, v in configs.items()}
    if PKCS12_PASSWORD in configs:  # the same certificate as PKCS12, its password changeit
        configs[LOCATION] = str(certs["second"].with_name("second.p12"))

    async def main() -> None:
        async with _broker(tmp_path, pki, certs["first"]) as b:
            tls = _Tls(b, pki.ca)
            got = await _alter(b, configs, entity)
            assert got[0] == code and why in got[1], got
            assert await tls.certificate() == _der(certs["first"])
            assert b.broker.config.dynamic_listener == {}

    asyncio.run(main())


def test_ssl_allow_dn_changes_lets_another_name_in(tmp_path, pki, certs):
    async def main() -> None:
        async with _broker(tmp_path, pki, certs["first"], **{"listener.name.ssl.ssl.allow.dn.changes": "true"}) as b:
            tls = _Tls(b, pki.ca)
            assert await _alter(b, {LOCATION: str(certs["fewer-sans"])}) == (42, _alter_sans_refused(certs))
            assert await _alter(b, {LOCATION: str(certs["other-dn"])}) == (0, None)
            assert await tls.certificate() == _der(certs["other-dn"])

    asyncio.run(main())


def _alter_sans_refused(certs) -> str:
    return (
        "Invalid value Validation of dynamic config update of SSLFactory failed: Keystore SubjectAltNames do not "
        "match: existing={SAN=[[2, localhost], [7, 127.0.0.1]]}, new={SAN=[[2, localhost]]}" + DYNAMIC
    )


def test_the_update_is_kept_and_in_effect_from_the_first_connection_after_a_restart(tmp_path, pki, certs):
    async def main() -> None:
        async with _broker(tmp_path, pki, certs["first"]) as b:
            assert await _alter(b, {LOCATION: str(certs["second"])}) == (0, None)
        async with _broker(tmp_path, pki, certs["first"]) as b:
            assert await _Tls(b, pki.ca).certificate() == _der(certs["second"])

    asyncio.run(main())


def test_a_new_truststore_decides_which_clients_get_in(tmp_path, pki, certs, tmp_path_factory):
    """Mutual TLS: the truststore replaced by another authority's certificate; clients signed by
    the old authority are refused from then on, the new authority's get in."""
    other_ca = Pki.create(tmp_path_factory.mktemp("other-ca"))
    old_client = pki.identity("client-old", "/CN=client")
    new_client = other_ca.identity("client-new", "/CN=client")
    truststore = "listener.name.ssl.ssl.truststore.location"

    async def gets_in(b: InProcessBroker, client) -> bool:
        tls = _Tls(b, pki.ca)
        tls.ctx.load_cert_chain(str(client.keystore))
        try:
            reader, writer = await tls.open()
        except (ssl.SSLError, ConnectionError):
            return False
        try:
            return await _api_versions(reader, writer)
        except (asyncio.IncompleteReadError, ssl.SSLError, ConnectionError):
            return False
        finally:
            writer.close()

    async def main() -> None:
        extra = {truststore: str(pki.ca), "listener.name.ssl.ssl.truststore.type": "PEM"}
        extra["listener.name.ssl.ssl.client.auth"] = "required"
        async with _broker(tmp_path, pki, certs["first"], **extra) as b:
            assert await gets_in(b, old_client) and not await gets_in(b, new_client)
            assert await _alter(b, {truststore: str(other_ca.ca)}) == (0, None)
            assert await gets_in(b, new_client) and not await gets_in(b, old_client)

    asyncio.run(main())


def _kept(b: InProcessBroker) -> dict[str, str]:
    return dict(b.services.metadata.snapshot.broker_configs.get("1", {}))


def test_a_pkcs12_keystore_replaced_with_its_new_password_kept_encrypted(tmp_path, pki, certs, caplog):
    """With password.encoder.secret, a PKCS12 keystore and its password are replaced at runtime;
    the password is kept encrypted as Kafka's PasswordEncoder keeps it (never in clear in the
    metadata, never in DescribeConfigs or the log), decoded again after a restart; the old
    secret decodes it once the secret changed; a wrong secret leaves it unused, saying which
    setting and not its value."""
    secret = {"password.encoder.secret": "enc-s3cret"}
    second, third = pki.pkcs12("second", "s3cond-pass"), pki.pkcs12("third", "th1rd-pass")
    keystore = {"listener.name.ssl.ssl.keystore.type": "PKCS12"}

    async def main() -> None:
        async with _broker(tmp_path, pki, certs["first"], **secret) as b:
            tls = _Tls(b, pki.ca)
            assert await _alter(b, {LOCATION: str(second), **keystore, PKCS12_PASSWORD: "s3cond-pass"}) == (0, None)
            assert await tls.certificate() == _der(certs["second"])
            kept = _kept(b)[PKCS12_PASSWORD]
            assert "s3cond-pass" not in kept and PasswordEncoder("enc-s3cret").decode(kept) == "s3cond-pass"
            assert (await _described(b))[PKCS12_PASSWORD] == (None, 2, True)
            # a wrong password for the new store is refused and changes nothing
            got = await _alter(b, {LOCATION: str(third), **keystore, PKCS12_PASSWORD: "wrong-pass"})
            assert got[0] == 42 and "wrong-pass" not in got[1], got
            assert await tls.certificate() == _der(certs["second"])
            # the next renewal comes with another password
            assert await _alter(b, {LOCATION: str(third), **keystore, PKCS12_PASSWORD: "th1rd-pass"}) == (0, None)
            assert await tls.certificate() == _der(certs["third"])
            # an incremental change of another setting keeps the password (decoded, encrypted again)
            assert await _alter(b, {"compression.zstd.level": "5"}) == (0, None)
            assert PasswordEncoder("enc-s3cret").decode(_kept(b)[PKCS12_PASSWORD]) == "th1rd-pass"
        async with _broker(tmp_path, pki, certs["first"], **secret) as b:
            assert await _Tls(b, pki.ca).certificate() == _der(certs["third"])
        rotated = {"password.encoder.secret": "n3w-secret", "password.encoder.old.secret": "enc-s3cret"}
        async with _broker(tmp_path, pki, certs["first"], **rotated) as b:
            assert await _Tls(b, pki.ca).certificate() == _der(certs["third"])
            # encrypted again with the new secret when the broker started, as Kafka does
            assert PasswordEncoder("n3w-secret").decode(_kept(b)[PKCS12_PASSWORD]) == "th1rd-pass"
        async with _broker(tmp_path, pki, certs["first"], **{"password.encoder.secret": "n3w-secret"}) as b:
            assert await _Tls(b, pki.ca).certificate() == _der(certs["third"])
        caplog.clear()
        async with _broker(tmp_path, pki, certs["first"], **{"password.encoder.secret": "wrong"}) as b:
            assert f"Dynamic password config {PKCS12_PASSWORD} could not be decoded" in caplog.text
            assert await _Tls(b, pki.ca).certificate() != _der(certs["third"])
        for text in ("enc-s3cret", "n3w-secret", "s3cond-pass", "th1rd-pass", "wrong-pass"):
            assert text not in caplog.text

    asyncio.run(main())
