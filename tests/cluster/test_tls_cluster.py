"""Three brokers whose inter-broker listener is SSL with mutual TLS (ssl.client.auth=required):
replication, the controller's requests and the group coordinator's writes all go over TLS
(a broker that could not reach the others over it would leave partitions under-replicated and
acks=all produce failing). Clients use a second listener, SSL too; the odradek client
produces with acks=all to an RF 3 topic and a group consumer reads everything back."""

from __future__ import annotations

import time
import uuid

import pytest
from support.broker import free_port
from support.odradek_cluster import OdradekCluster
from support.tls import Pki

pytestmark = pytest.mark.cluster


class TlsCluster(OdradekCluster):
    """Each broker: PLAINTEXT (the harness's own checks), CLIENTS (SSL) and REPLICATION (SSL,
    mutual TLS, inter-broker)."""

    def __init__(self, directory, pki: Pki, **kw) -> None:  # noqa: ANN003
        super().__init__(directory, **kw)
        self.pki = pki
        self.identity = pki.identity("broker", "/O=odradek/CN=broker", hosts=("127.0.0.1", "localhost"))
        self.tls_ports = {i: (free_port(), free_port()) for i in range(1, self.count + 1)}

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        clients, replication = self.tls_ports[i]
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{client},CLIENTS://127.0.0.1:{clients},"
            f"REPLICATION://127.0.0.1:{replication}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SSL,REPLICATION:SSL",
            "inter.broker.listener.name": "REPLICATION",
            **self.pki.broker_settings(self.identity, "CLIENTS"),
            **self.pki.broker_settings(self.identity, "REPLICATION", client_auth="required"),
        }

    @property
    def tls_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{c}" for c, _r in self.tls_ports.values())


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
