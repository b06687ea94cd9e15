"""Three brokers whose inter-broker listener is SASL_SSL with SCRAM-SHA-512: the brokers log in
to each other as User:broker (its SCRAM credential created in ZooKeeper before they start, with
Kafka 3.9's own `kafka-configs --zookeeper`, as Kafka's docs do), so replication, the controller's
requests and the coordinators' writes all go over authenticated TLS. A broker that could not
log in to the others would leave partitions under-replicated and acks=all produce failing.

Clients use the same SASL_SSL listener as User:alice: the odradek client produces acks=all to an
RF 3 topic and a group reads it all back; the six real clients produce, consume and join groups;
a broker killed and started again catches up and rejoins every ISR over SASL_SSL. The
registration in ZooKeeper names the listener's real protocol (SASL_SSL)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from support.apache_kafka import tool_command, unavailable_reason
from support.broker import free_port
from support.clients import SaslLogin, every_client_produces_and_consumes, make_client
from support.odradek_cluster import OdradekCluster
from support.tls import Pki

from odradek.cluster.zk_client import connect

# one worker runs the module's tests (xdist --dist loadgroup): its cluster is module-scoped, started once
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.xdist_group("sasl_cluster"),
    pytest.mark.skipif(unavailable_reason("3.9") is not None, reason=f"kafka-configs: {unavailable_reason('3.9')}"),
]

BROKER = SaslLogin("SCRAM-SHA-512", "broker", "broker-Secret-512")
ALICE = SaslLogin("SCRAM-SHA-512", "alice", "alice-Secret-512")
MECHANISM = "SCRAM-SHA-512"


def scram_jaas(login: SaslLogin | None = None) -> str:
    options = f' username="{login.username}" password="{login.password}"' if login else ""
    return f"org.apache.kafka.common.security.scram.ScramLoginModule required{options};"


def add_scram_user_in_zookeeper(zookeeper_connect: str, login: SaslLogin) -> None:
    """Kafka 3.9's kafka-configs with --zookeeper (what Kafka's docs do for the inter-broker
    user before the brokers start)."""
    cmd = tool_command(
        "3.9", "kafka.admin.ConfigCommand", "--zookeeper", zookeeper_connect, "--alter",
        "--add-config", f"{login.mechanism}=[iterations=4096,password={login.password}]",
        "--entity-type", "users", "--entity-name", login.username,
    )  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


class SaslSslCluster(OdradekCluster):
    """Each broker: PLAINTEXT (the harness's own checks) and SECURE (SASL_SSL, SCRAM-SHA-512,
    inter-broker and clients)."""

    def __init__(self, directory, pki: Pki, **kw) -> None:  # noqa: ANN001, ANN003
        super().__init__(directory, **kw)
        self.pki = pki
        self.identity = pki.identity("broker", "/O=odradek/CN=broker", hosts=("127.0.0.1", "localhost"))
        self.secure_ports = {i: free_port() for i in range(1, self.count + 1)}

    def start(self, timeout: float = 40) -> SaslSslCluster:
        self.zookeeper.start()
        for login in (BROKER, ALICE):
            add_scram_user_in_zookeeper(self.zookeeper.connect, login)
        super().start(timeout)
        return self

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{client},SECURE://127.0.0.1:{self.secure_ports[i]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
            "inter.broker.listener.name": "SECURE",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.secure.scram-sha-512.sasl.jaas.config": scram_jaas(BROKER),
            **self.pki.broker_settings(self.identity, "SECURE"),
        }

    @property
    def secure_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.secure_ports.values())

    def odradek_client(self, **extra: object) -> dict:
        return {
            "bootstrap.servers": self.secure_bootstrap,
            **self.pki.java_client_props(None),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": ALICE.username,
            "sasl.password": ALICE.password,
            **extra,
        }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pki = Pki.create(tmp_path_factory.mktemp("pki"))
    c = SaslSslCluster(
        tmp_path_factory.mktemp("sasl-cluster"),
        pki,
        brokers=3,
        overrides={"default.replication.factor": 3, "num.partitions": 3, "min.insync.replicas": 2},
    )
    try:
        c.start()
    except Exception:
        print(c.logs(80))
        c.stop()
        raise
    yield c
    c.stop()


def all_in_sync(topic: str, n: int = 3):  # noqa: ANN201
    return lambda s: (t := s.topics.get(topic)) is not None and all(len(p.isr) == n for p in t.partitions)


def test_registration_names_the_sasl_ssl_listener(cluster):
    zk = connect(cluster.zookeeper_connect, 10000, 10000)
    try:
        doc = json.loads(zk.get("/brokers/ids/1")[0])
    finally:
        zk.stop()
        zk.close()
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SECURE": "SASL_SSL"}
    assert doc["endpoints"][1] == f"SECURE://127.0.0.1:{cluster.secure_ports[1]}"


def test_rf3_produce_and_consume_with_a_sasl_ssl_inter_broker_listener(cluster):
    from odradek.client import Admin, Consumer, Producer

    topic = f"sasl-rf3-{uuid.uuid4().hex[:8]}"
    with Admin(config=cluster.odradek_client()) as admin:
        admin.create_topic(topic, 3, 3)
    cluster.wait(all_in_sync(topic), 30, "every partition with 3 in-sync replicas")
    with Producer(config=cluster.odradek_client(acks="all")) as p:
        for i in range(300):
            p.send(topic, b"v%d" % i, key=b"k%d" % (i % 20))
        p.flush()
    got: list = []
    cfg = cluster.odradek_client(**{"group.id": "g-sasl", "auto.offset.reset": "earliest"})
    with Consumer(topic, config=cfg) as c:
        deadline = time.monotonic() + 60
        while len(got) < 300 and time.monotonic() < deadline:
            got += c.poll(0.5)
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(300))
    # followers copied everything over SASL_SSL: every replica still in sync after the writes
    cluster.wait(all_in_sync(topic), 30, "ISR of 3 after producing")
    logs = cluster.logs(300)
    assert "failed authentication" not in logs and "re-authentication" not in logs


def test_six_clients_over_sasl_ssl(cluster):
    topic = f"sasl-six-{uuid.uuid4().hex[:8]}"
    first = make_client("confluent", cluster.secure_bootstrap, tls=cluster.pki.client_files(), sasl=ALICE)
    first.create_topic(topic, 3, replication_factor=3)
    cluster.wait(all_in_sync(topic), 30, "every partition with 3 in-sync replicas")
    every_client_produces_and_consumes(cluster.secure_bootstrap, topic, tls=cluster.pki.client_files(), sasl=ALICE)


def test_a_restarted_broker_rejoins_the_isr_over_sasl_ssl(cluster):
    from odradek.client import Admin, Producer

    topic = f"sasl-restart-{uuid.uuid4().hex[:8]}"
    with Admin(config=cluster.odradek_client()) as admin:
        admin.create_topic(topic, 3, 3)
    cluster.wait(all_in_sync(topic), 30, "every partition with 3 in-sync replicas")
    victim = 3
    cluster.brokers[victim].kill()
    cluster.wait(all_in_sync(topic, 2), 30, f"broker {victim} out of every ISR")
    bootstrap = ",".join(f"127.0.0.1:{p}" for i, p in cluster.secure_ports.items() if i != victim)
    with Producer(config=cluster.odradek_client(acks="all", **{"bootstrap.servers": bootstrap})) as p:
        for i in range(200):
            p.send(topic, b"w%d" % i, key=b"k%d" % (i % 10))
        p.flush()
    cluster.brokers[victim].start(timeout=40)
    # it fetches what it missed from the leaders over SASL_SSL, then the controller takes it back
    snap = cluster.wait(all_in_sync(topic), 60, f"broker {victim} back in every ISR")
    assert all(victim in p.isr for p in snap.topics[topic].partitions)
    assert "failed authentication" not in cluster.logs(300)
