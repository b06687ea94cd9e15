"""Three brokers whose inter-broker listener is SSL with mutual TLS (ssl.client.auth=required):
replication, the controller's requests and the group coordinator's writes all go over TLS
(a broker that could not reach the others over it would leave partitions under-replicated and
acks=all produce failing). Clients use two more listeners, CLIENTS (SSL) and MTLS (SSL,
ssl.client.auth=required): the odradek client produces with acks=all to an RF 3 topic and a
group consumer reads everything back; the six real clients produce, consume and join groups over
SSL and over mutual TLS.

Dynamic passwords (KIP-226, `password.encoder.secret`): Kafka 3.9's own kafka-configs writes a
broker's new PKCS12 keystore and its password to ZooKeeper (--zookeeper, the broker stopped: Kafka
encrypts the password) and the broker serves that certificate once started; while it runs, the
same tool replaces it again over --bootstrap-server (odradek encrypts the password, in Kafka's
format), and the broker keeps it across a restart."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
import uuid

import pytest
from support.apache_kafka import SHORT_JVM, tool_command
from support.apache_kafka import unavailable_reason as kafka_unavailable
from support.broker import free_port
from support.clients import every_client_produces_and_consumes, make_client
from support.odradek_cluster import OdradekCluster
from support.tls import Pki

from odradek.broker.password_encoder import PasswordEncoder
from odradek.cluster.zk_client import connect

# one worker runs the module's tests (xdist --dist loadgroup): its cluster is module-scoped, started once
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("tls_cluster")]

SECRET = "cluster-encoder-S3cret"


class TlsCluster(OdradekCluster):
    """Each broker: PLAINTEXT (the harness's own checks), CLIENTS (SSL) and REPLICATION (SSL,
    mutual TLS, inter-broker)."""

    def __init__(self, directory, pki: Pki, **kw) -> None:  # noqa: ANN003
        super().__init__(directory, **kw)
        self.pki = pki
        self.identity = pki.identity("broker", "/O=odradek/CN=broker", hosts=("127.0.0.1", "localhost"))
        self.client_identity = pki.identity("alice", "/O=odradek/CN=alice")
        self.tls_ports = {i: (free_port(), free_port()) for i in range(1, self.count + 1)}
        self.mtls_ports = {i: free_port() for i in range(1, self.count + 1)}

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        clients, replication = self.tls_ports[i]
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{client},CLIENTS://127.0.0.1:{clients},"
            f"MTLS://127.0.0.1:{self.mtls_ports[i]},REPLICATION://127.0.0.1:{replication}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SSL,MTLS:SSL,REPLICATION:SSL",
            "inter.broker.listener.name": "REPLICATION",
            "password.encoder.secret": SECRET,
            **self.pki.broker_settings(self.identity, "CLIENTS"),
            **self.pki.broker_settings(self.identity, "MTLS", client_auth="required"),
            **self.pki.broker_settings(self.identity, "REPLICATION", client_auth="required"),
        }

    @property
    def tls_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{c}" for c, _r in self.tls_ports.values())

    @property
    def mtls_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.mtls_ports.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pki = Pki.create(tmp_path_factory.mktemp("pki"))
    c = TlsCluster(
        tmp_path_factory.mktemp("tls-cluster"),
        pki,
        brokers=3,
        overrides={"default.replication.factor": 3, "num.partitions": 3, "min.insync.replicas": 2},
    )
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    yield c
    c.stop()


def test_rf3_produce_and_consume_with_an_ssl_inter_broker_listener(cluster):
    from odradek.client import Admin, Consumer, Producer

    tls = cluster.pki.java_client_props(None)
    bootstrap = cluster.tls_bootstrap
    topic = f"tls-rf3-{uuid.uuid4().hex[:8]}"
    with Admin(config={"bootstrap.servers": bootstrap, **tls}) as admin:
        admin.create_topic(topic, 3, 3)
    cluster.wait(
        lambda s: (t := s.topics.get(topic)) is not None and all(len(p.isr) == 3 for p in t.partitions),
        30,
        "every partition with 3 in-sync replicas",
    )
    with Producer(config={"bootstrap.servers": bootstrap, "acks": "all", **tls}) as p:
        for i in range(300):
            p.send(topic, b"v%d" % i, key=b"k%d" % (i % 20))
        p.flush()
    cfg = {"bootstrap.servers": bootstrap, "group.id": "g-tls", "auto.offset.reset": "earliest", **tls}
    got: list = []
    with Consumer(topic, config=cfg) as c:
        deadline = time.monotonic() + 60
        while len(got) < 300 and time.monotonic() < deadline:
            got += c.poll(0.5)
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(300))
    # Followers copied everything over TLS: every replica still in sync after the writes.
    snap = cluster.wait(
        lambda s: all(len(p.isr) == 3 for p in s.topics[topic].partitions), 30, "ISR of 3 after producing"
    )
    assert all(len(p.isr) == 3 for p in snap.topics[topic].partitions)
    logs = cluster.logs(200)
    assert "TLS handshake failed" not in logs.replace("end of stream during the TLS handshake", "")


def all_in_sync(topic: str, n: int = 3):  # noqa: ANN201
    return lambda s: (t := s.topics.get(topic)) is not None and all(len(p.isr) == n for p in t.partitions)


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_six_clients_over_ssl_and_mutual_tls(cluster, listener):
    mutual = listener == "MTLS"
    bootstrap = cluster.mtls_bootstrap if mutual else cluster.tls_bootstrap
    tls = cluster.pki.client_files(cluster.client_identity if mutual else None)
    topic = f"tls-six-{listener.lower()}-{uuid.uuid4().hex[:8]}"
    make_client("confluent", bootstrap, tls=tls).create_topic(topic, 3, replication_factor=3)
    cluster.wait(all_in_sync(topic), 30, "every partition with 3 in-sync replicas")
    every_client_produces_and_consumes(bootstrap, topic, tls=tls)
    cluster.wait(all_in_sync(topic), 30, "ISR of 3 after producing")


def _certificate(port: int, ca) -> bytes:  # noqa: ANN001
    """The certificate a new connection to 127.0.0.1:`port` gets."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname="localhost") as s:
            return s.getpeercert(binary_form=True)


def _der(identity) -> bytes:  # noqa: ANN001
    text = identity.cert.read_text()
    return ssl.PEM_cert_to_DER_cert(text[: text.index("-----END CERTIFICATE-----") + 25])


def _kafka_configs(*args: str) -> None:
    cmd = tool_command("3.9", "kafka.admin.ConfigCommand", *args, jvm=SHORT_JVM)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def _kept(cluster, broker: int) -> dict[str, str]:  # noqa: ANN001
    zk = connect(cluster.zookeeper_connect, 10000, 10000)
    try:
        return json.loads(zk.get(f"/config/brokers/{broker}")[0])["config"]
    finally:
        zk.stop()
        zk.close()


@pytest.mark.skipif(kafka_unavailable("3.9") is not None, reason=f"kafka-configs: {kafka_unavailable('3.9')}")
def test_kafka_configs_replaces_a_pkcs12_keystore_and_its_password(cluster):
    """Last in the module: it stops broker 2 for a while."""
    pki, victim = cluster.pki, 2
    subject, hosts = "/O=odradek/CN=broker", ("127.0.0.1", "localhost")
    renewed, again = (pki.identity(n, subject, hosts=hosts) for n in ("broker-renewed", "broker-again"))
    prefix = "listener.name.clients.ssl.keystore."
    port = cluster.tls_ports[victim][0]

    def keystore(identity, password: str) -> str:  # noqa: ANN001
        location = pki.pkcs12(identity.cert.stem, password)
        return f"{prefix}type=PKCS12,{prefix}location={location},{prefix}password={password}"

    # Kafka's tool with --zookeeper while the broker is down: Kafka 3.9 encrypts the password
    cluster.brokers[victim].stop()
    cluster.wait(lambda s: victim not in {b.node_id for b in s.brokers}, 30, f"broker {victim} unregistered")
    _kafka_configs(
        "--zookeeper", cluster.zookeeper_connect, "--entity-type", "brokers", "--entity-name", str(victim),
        "--alter", "--add-config", f"{keystore(renewed, 'Renewed-pass-1')},password.encoder.secret={SECRET}",
    )  # fmt: skip
    kept = _kept(cluster, victim)[f"{prefix}password"]
    assert "Renewed-pass-1" not in kept and PasswordEncoder(SECRET).decode(kept) == "Renewed-pass-1"
    cluster.brokers[victim].start(timeout=40)
    assert _certificate(port, pki.ca) == _der(renewed)
    assert _certificate(cluster.tls_ports[1][0], pki.ca) == _der(cluster.identity)  # broker 1's: unchanged

    # and over --bootstrap-server while it runs: odradek encrypts the password, in Kafka's format
    _kafka_configs(
        "--bootstrap-server", cluster.brokers[victim].bootstrap, "--entity-type", "brokers",
        "--entity-name", str(victim), "--alter", "--add-config", keystore(again, "Again-pass-2"),
    )  # fmt: skip
    deadline = time.monotonic() + 15
    while _certificate(port, pki.ca) != _der(again) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _certificate(port, pki.ca) == _der(again)
    kept = _kept(cluster, victim)[f"{prefix}password"]
    assert "Again-pass-2" not in kept and PasswordEncoder(SECRET).decode(kept) == "Again-pass-2"

    cluster.brokers[victim].stop()
    cluster.brokers[victim].start(timeout=40)
    assert _certificate(port, pki.ca) == _der(again)
    logs = cluster.logs(400)
    for secret in (SECRET, "Renewed-pass-1", "Again-pass-2"):
        assert secret not in logs
