"""/brokers/ids/<id> as Kafka 3.9 writes it: each listener with its own security protocol, host
and port those of the listener named PLAINTEXT (null and -1 without one). Compared with what
Kafka 3.9 itself writes in tests/reference/test_diff_broker_registration.py."""

from __future__ import annotations

import json

from odradek.cluster import zk_layout as L
from odradek.cluster.metadata import BrokerInfo

SECURE = (("CLIENTS", "h1", 9093), ("REPLICATION", "h1", 9094))


def test_each_listener_is_registered_with_its_security_protocol():
    info = BrokerInfo(1, "h1", 9094, None, SECURE)
    doc = json.loads(L.encode_broker(info, "REPLICATION", {"CLIENTS": "SASL_SSL", "REPLICATION": "SSL", "X": "SSL"}))
    assert doc["listener_security_protocol_map"] == {"CLIENTS": "SASL_SSL", "REPLICATION": "SSL"}
    assert doc["endpoints"] == ["CLIENTS://h1:9093", "REPLICATION://h1:9094"]
    # no PLAINTEXT listener: Kafka writes host null and port -1
    assert doc["host"] is None and doc["port"] == -1
    assert doc["version"] == 5 and doc["jmx_port"] == -1 and isinstance(doc["timestamp"], str)
    # read back on the inter-broker listener all the same
    back = L.decode_broker(1, L.encode_broker(info, "REPLICATION", {"CLIENTS": "SASL_SSL"}), "REPLICATION")
    assert (back.host, back.port, back.endpoints) == ("h1", 9094, SECURE)


def test_host_and_port_are_the_first_plaintext_listeners():
    info = BrokerInfo(2, "h2", 9094, None, (("REPLICATION", "h2", 9094), ("INTERNAL", "p2", 9092), ("B", "p3", 1)))
    protocols = {"INTERNAL": "PLAINTEXT", "REPLICATION": "SASL_SSL", "B": "PLAINTEXT"}
    doc = json.loads(L.encode_broker(info, "REPLICATION", protocols))
    assert (doc["host"], doc["port"]) == ("p2", 9092)
    assert doc["listener_security_protocol_map"] == protocols
