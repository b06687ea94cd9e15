"""Differential: the broker registration `/brokers/ids/<id>` odradek writes in ZooKeeper against
the one Apache Kafka 3.9 (ZooKeeper mode) writes for the same listeners, field by field: three
listeners of three security protocols (PLAINTEXT, SASL_PLAINTEXT, SSL), each named in
`listener_security_protocol_map` and `endpoints` with its own protocol (odradek recorded every
listener as PLAINTEXT before), and "host"/"port" those of the first listener whose protocol
is PLAINTEXT, whether it is named PLAINTEXT or not (the second case)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.apache_kafka import ApacheKafka, unavailable_reason
from support.broker import free_port
from support.odradek_cluster import OdradekCluster

from odradek.cluster.zk_client import connect

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

CERTS = Path(__file__).resolve().parents[1] / "support" / "tls_certs"
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-Secret-0";'
#: odradek's own fields (cluster/zk_layout.py), which Kafka's decoder ignores
ODRADEK_ONLY = {"directory_ids", "may_lack_unflushed"}


def settings(ports: dict[str, int], plaintext_name: str) -> dict[str, str]:
    names = [plaintext_name, "SECURE", "TLS"]
    return {
        "listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in names),
        "advertised.listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in names),
        "listener.security.protocol.map": f"{plaintext_name}:PLAINTEXT,SECURE:SASL_PLAINTEXT,TLS:SSL",
        "inter.broker.listener.name": plaintext_name,
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.secure.plain.sasl.jaas.config": JAAS,
        "listener.name.tls.ssl.keystore.type": "PEM",
        "listener.name.tls.ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
    }


def registration(zk_connect: str, broker_id: int) -> dict:
    zk = connect(zk_connect, 10000, 10000)
    try:
        data, _stat = zk.get(f"/brokers/ids/{broker_id}")
    finally:
        zk.stop()
        zk.close()
    return json.loads(data)


def normalized(doc: dict, ports: dict[str, int]) -> dict:
    """Ports by listener name (each broker has its own), the timestamp by its type."""
    by_port = {str(p): n for n, p in ports.items()}
    out = {k: v for k, v in doc.items() if k not in ODRADEK_ONLY}
    out["endpoints"] = [e.rsplit(":", 1)[0] + ":" + by_port.get(e.rsplit(":", 1)[1], "?") for e in doc["endpoints"]]
    out["port"] = by_port.get(str(doc["port"]), doc["port"])
    out["timestamp"] = type(doc["timestamp"]).__name__
    return out


class _Odradek(OdradekCluster):
    def __init__(self, directory, plaintext_name: str) -> None:  # noqa: ANN001
        super().__init__(directory, brokers=1)
        self.plaintext_name = plaintext_name
        self.ports: dict[str, int] = {}

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        # the harness checks readiness on `client`: it is the PLAINTEXT-protocol listener's port
        self.ports = {self.plaintext_name: client, "SECURE": free_port(), "TLS": free_port()}
        return settings(self.ports, self.plaintext_name)


@pytest.mark.skipif(unavailable_reason("3.9") is not None, reason=str(unavailable_reason("3.9")))
@pytest.mark.parametrize("plaintext_name", ["PLAINTEXT", "INTERNAL"])
def test_registration_matches_kafka_39(tmp_path, plaintext_name):
    kafka = ApacheKafka(tmp_path / "kafka", line="3.9", zookeeper=True)
    node = kafka.nodes[0]
    kafka_ports = {plaintext_name: node.port, "SECURE": free_port(), "TLS": free_port()}
    node.configure({**node.properties, **settings(kafka_ports, plaintext_name)})
    odradek = _Odradek(tmp_path / "odradek", plaintext_name)
    try:
        kafka.start(timeout=90)
        assert kafka.zookeeper is not None
        theirs = registration(kafka.zookeeper.connect, 1)
        odradek.start()
        ours = registration(odradek.zookeeper_connect, 1)
    finally:
        kafka.stop()
        odradek.stop()
    assert set(ours) - set(theirs) <= ODRADEK_ONLY
    assert normalized(ours, odradek.ports) == normalized(theirs, kafka_ports)
    assert theirs["listener_security_protocol_map"] == {
        plaintext_name: "PLAINTEXT",
        "SECURE": "SASL_PLAINTEXT",
        "TLS": "SSL",
    }
