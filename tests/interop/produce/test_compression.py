"""Broker-side compression.type against a real broker process, with real clients.

A topic with compression.type set stores every producer batch in its codec whatever the producer
used; clients (confluent-kafka, the odradek client, the Java client) read the records back
unchanged and in order. The stored codec is read from the
segment file's batch headers, where odradek wrote it (and where Kafka's tools would read it)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from support.clients import make_client, unavailable_reason

from odradek.client import Admin, Consumer, Producer, TopicPartition
from odradek.protocol import records as R

pytestmark = pytest.mark.interop

ck = pytest.importorskip("confluent_kafka")

TARGETS = {"uncompressed": R.NONE, "gzip": R.GZIP, "snappy": R.SNAPPY, "lz4": R.LZ4, "zstd": R.ZSTD}
PRODUCER_CODECS = ["none", "gzip", "lz4", "zstd", "snappy"]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _values(n: int, tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [
        (f"key-{i % 7}".encode(), f"{tag}-{i:05d}-".encode() + bytes([i % 251]) * 60, [("seq", str(i).encode())])
        for i in range(n)
    ]


def _stored_batches(broker, topic: str) -> list[R.BatchHeader]:
    """Every batch header in the partition's segment files (partition 0)."""
    out = []
    for seg in sorted(Path(broker.log_dirs, f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        out.extend(R.iter_batches(data))
    return out


def _confluent_produce(bootstrap: str, topic: str, recs, codec: str) -> None:
    p = ck.Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20, "enable.idempotence": True}
    )
    for k, v, h in recs:
        p.produce(topic, v, key=k, partition=0, headers=h)
    assert p.flush(30) == 0


def _confluent_consume(bootstrap: str, topic: str, n: int) -> list[tuple]:
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": _topic("g"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[tuple] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])]))
    finally:
        c.close()
    return got


def _odradek_consume(bootstrap: str, topic: str, n: int) -> list[tuple]:
    got: list[tuple] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for r in c.poll(0.5):
                got.append((r.offset, r.key, r.value, list(r.headers)))
    return got


@pytest.mark.parametrize("target", list(TARGETS))
def test_topic_codec_rewrites_every_producer_codec(broker, target):
    """One topic per target codec; confluent-kafka produces to it with every codec (and none),
    the odradek client with another; both consumers read every record, in order, and every batch
    on disk is in the topic's codec."""
    topic = _topic(f"bc-{target}")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topic(topic, 1, 1, {"compression.type": target})
    sent = []
    for codec in PRODUCER_CODECS:
        recs = _values(300, f"ck-{codec}")
        _confluent_produce(broker.bootstrap, topic, recs, codec)
        sent += recs
    recs = _values(200, "odr")
    with Producer(bootstrap_servers=broker.bootstrap, compression_type="lz4" if target != "lz4" else "gzip") as p:
        for k, v, h in recs:
            p.send(topic, v, key=k, headers=h, partition=0)
        p.flush(30)
    sent += recs
    expected = [(i, k, v, h) for i, (k, v, h) in enumerate(sent)]
    assert _confluent_consume(broker.bootstrap, topic, len(sent)) == expected
    assert _odradek_consume(broker.bootstrap, topic, len(sent)) == expected
    if not unavailable_reason("java"):  # Kafka's own codecs (the Java consumer) read the broker's batches
        got = make_client("java", broker.bootstrap).consume(topic, expected=len(sent), timeout=60, partitions=[0])
        assert sorted((r.offset, r.key, r.value, list(r.headers)) for r in got) == expected
    stored = _stored_batches(broker, topic)
    assert sum(h.record_count for h in stored) == len(sent)
    assert {h.compression for h in stored} == {TARGETS[target]}
    assert all(h.producer_id >= 0 for h in stored)  # idempotent producers: their ids kept


def test_producer_mode_and_dynamic_change(broker):
    """compression.type=producer keeps each batch's codec; changing the topic's config (and the
    broker default) takes effect for the next batches without a restart."""
    topic = _topic("bc-dyn")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topic(topic, 1, 1)
        _confluent_produce(broker.bootstrap, topic, _values(50, "a"), "lz4")
        admin.incremental_alter_configs({("topic", topic): {"compression.type": "zstd"}})
        # (single node: the broker applies a config change before it answers)
        _confluent_produce(broker.bootstrap, topic, _values(50, "b"), "lz4")
        admin.incremental_alter_configs({("topic", topic): {"compression.type": None}})  # back to the broker's
        admin.incremental_alter_configs({("broker", ""): {"compression.type": "gzip"}})
        _confluent_produce(broker.bootstrap, topic, _values(50, "c"), "lz4")
        admin.incremental_alter_configs({("broker", ""): {"compression.type": None}})
        desc = admin.describe_configs([("topic", topic)])[("topic", topic)]
        assert desc["compression.type"] == "producer"
    codecs = [h.compression for h in _stored_batches(broker, topic)]
    assert codecs and codecs[0] == R.LZ4
    seen = []  # batch codecs in order, consecutive repeats folded
    for c in codecs:
        if not seen or seen[-1] != c:
            seen.append(c)
    assert seen == [R.LZ4, R.ZSTD, R.GZIP]
    assert len(_confluent_consume(broker.bootstrap, topic, 150)) == 150


def test_invalid_compression_settings_are_refused(broker):
    from odradek.client import errors

    topic = _topic("bc-bad")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        for configs in ({"compression.type": "GZIP"}, {"compression.gzip.level": "0"}, {"compression.lz4.level": "18"}):
            with pytest.raises(errors.InvalidConfigError):
                admin.create_topic(topic, 1, 1, configs)
        with pytest.raises(errors.InvalidRequestError, match="compression.zstd.level"):
            admin.incremental_alter_configs({("broker", ""): {"compression.zstd.level": "23"}})
        admin.create_topic(topic, 1, 1, {"compression.type": "gzip", "compression.gzip.level": "1"})
        desc = admin.describe_configs([("topic", topic)])[("topic", topic)]
        assert (desc["compression.type"], desc["compression.gzip.level"]) == ("gzip", "1")
