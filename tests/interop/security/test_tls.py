"""SSL listeners with real clients: a broker process with three TLS listeners (certificates made
by support/tls.py with the openssl command):

* ``SSL``  PEM keystore, no client authentication;
* ``MTLS`` (security protocol SSL) ``ssl.client.auth=required`` and a principal mapping rule
  that accepts only certificates of organization "odradek" (any other is refused, as Kafka
  fails the authentication when no rule maps the name);
* ``P12``  (SSL) a PKCS12 keystore; ``INLINE`` (SSL) KIP-651's inline PEM key and chain.

The six clients produce, consume and join a group over SSL and over mutual TLS; a client
without a certificate is refused on MTLS. Bad input (garbage, a truncated handshake, a
plaintext request, a handshake never finished) closes that connection only.
"""

from __future__ import annotations

import socket
import ssl
import time
import uuid

import pytest
from support.broker import BrokerProcess, free_port
from support.clients import ClientError, keyed_records
from support.raw import RawConnection
from support.tls import PASSWORD, Pki

pytestmark = pytest.mark.interop

IDLE_MS = 4000  # connections.max.idle.ms: also the handshake's time limit


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def identities(pki):
    return {
        "broker": pki.identity("broker", "/CN=localhost", hosts=("127.0.0.1", "localhost")),
        "alice": pki.identity("alice", "/O=odradek/CN=alice"),
        "mallory": pki.identity("mallory", "/O=elsewhere/CN=mallory"),
    }


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki, identities):
    ports = {name: free_port() for name in ("SSL", "MTLS", "P12", "INLINE")}
    broker = identities["broker"]
    overrides = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "SSL:SSL,MTLS:SSL,P12:SSL,INLINE:SSL",
        "inter.broker.listener.name": "SSL",
        "connections.max.idle.ms": str(IDLE_MS),
        "num.partitions": "3",
        **pki.broker_settings(broker, "SSL"),
        **pki.broker_settings(broker, "MTLS", client_auth="required"),
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=(.*?),O=odradek$/$1/L",
        "listener.name.p12.ssl.keystore.type": "PKCS12",
        "listener.name.p12.ssl.keystore.location": str(broker.p12),
        "listener.name.p12.ssl.keystore.password": PASSWORD,
        "listener.name.inline.ssl.keystore.type": "PEM",
        "listener.name.inline.ssl.keystore.key": broker.key.read_text(),
        "listener.name.inline.ssl.keystore.certificate.chain": broker.cert.read_text(),
    }
    b = BrokerProcess(tmp_path_factory.mktemp("tls-broker"), overrides, port=ports["SSL"])
    b.start(timeout=30)
    b.ports = ports  # type: ignore[attr-defined]
    yield b
    b.stop()


def _addr(b, listener: str) -> str:
    return f"127.0.0.1:{b.ports[listener]}"


def _context(pki: Pki, identity=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if identity is not None:
        ctx.load_cert_chain(str(identity.cert), str(identity.key))
    return ctx


def _api_versions_ok(bootstrap: str, ctx: ssl.SSLContext) -> None:
    with RawConnection(bootstrap, timeout=10, tls=ctx) as conn:
        assert conn.call(18, 3, client_software_name="t", client_software_version="1").error_code == 0


def _round_trip(c, label: str) -> None:
    topic = f"{label}-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 3)
    sent = keyed_records(300, seq_header=not c.headers_per_run)
    assert len(c.produce(topic, sent)) == len(sent)
    got = c.consume(topic, expected=len(sent), timeout=60, group=f"g-{uuid.uuid4().hex[:6]}")
    assert sorted(r.content() for r in got) == sorted(r.content() for r in sent)


def test_produce_consume_and_group_over_ssl(tls_broker, pki, client):
    _round_trip(client(_addr(tls_broker, "SSL"), tls=pki.client_files()), "ssl")


def test_produce_consume_and_group_over_mutual_tls(tls_broker, pki, identities, client):
    _round_trip(client(_addr(tls_broker, "MTLS"), tls=pki.client_files(identities["alice"])), "mtls")


def test_mutual_tls_refuses_a_client_without_a_certificate(tls_broker, pki, client):
    c = client(_addr(tls_broker, "MTLS"), tls=pki.client_files(), timeout=5)
    with pytest.raises(ClientError):
        c.list_topics()
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _api_versions_ok(_addr(tls_broker, "MTLS"), _context(pki))


def test_a_name_no_mapping_rule_matches_is_refused(tls_broker, pki, identities):
    _api_versions_ok(_addr(tls_broker, "MTLS"), _context(pki, identities["alice"]))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _api_versions_ok(_addr(tls_broker, "MTLS"), _context(pki, identities["mallory"]))
    assert "no ssl.principal.mapping.rules rule applies to CN=mallory,O=elsewhere" in tls_broker.log_tail(200)


@pytest.mark.parametrize("listener", ["P12", "INLINE"])
def test_pkcs12_and_inline_pem_keystores(tls_broker, pki, listener):
    _api_versions_ok(_addr(tls_broker, listener), _context(pki))


def _closed_soon(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"\x00\x01garbage\xff" * 200, id="garbage"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="truncated-client-hello"),
        pytest.param(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00", id="plaintext-request"),
    ],
)
def test_bad_handshakes_close_that_connection_only(tls_broker, pki, bad):
    healthy = RawConnection(_addr(tls_broker, "SSL"), timeout=10, tls=_context(pki))
    try:
        with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"])) as s:
            s.sendall(bad)
            if bad.startswith(b"\x16"):  # truncated: the client goes away mid-handshake
                s.shutdown(socket.SHUT_WR)
            assert _closed_soon(s, IDLE_MS / 1000 + 5), "the broker kept a bad handshake's connection"
        assert healthy.call(18, 3, client_software_name="t", client_software_version="1").error_code == 0
    finally:
        healthy.close()
    assert tls_broker.running


def test_a_handshake_never_finished_is_closed(tls_broker, pki):
    with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"])) as s:
        started = time.monotonic()
        assert _closed_soon(s, IDLE_MS / 1000 + 10)
        assert time.monotonic() - started >= IDLE_MS / 1000 - 0.5
    _api_versions_ok(_addr(tls_broker, "SSL"), _context(pki))


def test_large_fetch_over_tls(tls_broker, pki):
    """Record bytes past INLINE_REGION_BYTES go through the file-region path (pread in pieces)."""
    from support.clients import make_client

    c = make_client("confluent", _addr(tls_broker, "SSL"), tls=pki.client_files())
    topic = f"big-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 1)
    value = bytes(range(256)) * (900 * 1024 // 256)
    c.produce(topic, [type(keyed_records(1)[0])(key=str(i).encode(), value=value) for i in range(4)])
    got = c.consume(topic, expected=4, timeout=30)
    assert [r.value for r in got] == [value] * 4


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_odradek_client_over_tls(tls_broker, pki, identities, listener):
    """The odradek client (sync producer and group consumer, asyncio admin) with the Java
    client's settings: security.protocol=SSL, a PEM truststore and, for mutual TLS, keystore."""
    import asyncio

    from odradek.client import Admin, Consumer, Producer
    from odradek.client.aio import AIOAdmin

    tls = pki.java_client_props(identities["alice"] if listener == "MTLS" else None)
    bootstrap = _addr(tls_broker, listener)
    topic = f"odr-{uuid.uuid4().hex[:8]}"
    with Admin(config={"bootstrap.servers": bootstrap, **tls}) as admin:
        admin.create_topic(topic, 3, 1)
    with Producer(config={"bootstrap.servers": bootstrap, **tls}) as p:
        for i in range(50):
            p.send(topic, b"v%d" % i, key=b"k%d" % i)
        p.flush()
    group = f"g-{uuid.uuid4().hex[:6]}"
    cfg = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **tls}
    with Consumer(topic, config=cfg) as c:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += c.poll(0.5)
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(50))

    async def describe() -> dict:
        async with AIOAdmin(config={"bootstrap.servers": bootstrap, **tls}) as a:
            return await a.describe_cluster()

    assert [port for _id, _h, port, _r in asyncio.run(describe())["brokers"]] == [tls_broker.ports[listener]]


def test_subject_names_as_java_prints_them(pki, tmp_path):
    """rfc2253_subject against Java's X500Principal.getName() (what Kafka's principal builder
    maps) for subjects with escapes, a multi-valued RDN and attributes Java prints as OIDs."""
    import subprocess

    from odradek.broker.security.tls import rfc2253_subject

    subjects = [
        "/CN=plain",
        "/C=DE/ST=Berlin/L=Mitte/O=odradek, Inc./OU=dev/CN= alice #1 /emailAddress=a@example.com/DC=example/UID=a1",
        '/O=a\\+b;c<d>e"f=g#h/OU=x+CN= bob  /serialNumber=42/title=T/CN=x',
    ]
    certs = [pki.identity(f"dn{i}", s).cert.with_suffix(".crt") for i, s in enumerate(subjects)]
    java = tmp_path / "Dn.java"
    java.write_text(
        "import java.io.FileInputStream; import java.security.cert.*;\n"
        "public class Dn { public static void main(String[] a) throws Exception { for (String f : a) {\n"
        '  X509Certificate c = (X509Certificate) CertificateFactory.getInstance("X.509")'
        ".generateCertificate(new FileInputStream(f));\n"
        "  System.out.println(c.getSubjectX500Principal().getName()); } } }\n"
    )
    out = subprocess.run(["java", str(java), *map(str, certs)], capture_output=True, text=True, check=True).stdout
    ours = [rfc2253_subject(ssl.PEM_cert_to_DER_cert(c.read_text())) for c in certs]
    assert ours == out.splitlines()


def test_no_secret_on_the_command_line_or_in_the_log(tls_broker, identities):
    """The inline key, the PKCS12 password: in the broker's private properties file, not on its
    command line (the test log and `ps` show it), and nowhere in the broker's own log."""
    key = identities["broker"].key.read_text().splitlines()[1]  # a line of the key's base64
    command = " ".join(tls_broker.command())
    assert "ssl.keystore.key" not in command and key not in command and PASSWORD not in command
    log_text = tls_broker.log_path.read_text()
    assert "started" in log_text
    assert key not in log_text and PASSWORD not in log_text
