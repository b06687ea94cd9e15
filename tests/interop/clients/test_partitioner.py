"""Keyed records land where the Java client (and librdkafka's murmur2_random) put them."""

from __future__ import annotations

import pytest

from odradek.client import Producer

confluent_kafka = pytest.importorskip("confluent_kafka")


def test_same_partitions_as_librdkafka_murmur2(peer):
    parts = 4 if peer.name == "mock" else 7
    topic = peer.new_topic(parts)
    keys = [f"user-{i}".encode() for i in range(200)] + [b"", b"\x00\xff\x10", "ключ".encode()]
    theirs = {}

    def report(err, msg):
        assert err is None, err
        theirs[msg.key()] = msg.partition()

    p = confluent_kafka.Producer({"bootstrap.servers": peer.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    for k in keys:
        p.produce(topic, b"v", key=k, on_delivery=report)
    assert p.flush(30) == 0
    with Producer(bootstrap_servers=peer.bootstrap) as ours:
        futs = {k: ours.send(topic, b"v", key=k) for k in keys}
        ours.flush()
        mine = {k: f.result(10).partition for k, f in futs.items()}
    # librdkafka's murmur2_random sends empty keys like null ones (random); compare the rest
    for k in keys:
        if k:
            assert mine[k] == theirs[k], k
    assert len(set(mine.values())) == parts
