"""Per-topic configs from a KRaft metadata log (cluster/kafka_metadata_log.py), on records built
here in Kafka's metadata record encoding; tests/reference/test_disk_format.py reads a log that
Kafka 3.9 wrote."""

from __future__ import annotations

import uuid

from odradek.cluster.kafka_metadata_log import topic_configs
from odradek.protocol.records import Record, build_batch


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(s: str | None) -> bytes:
    return uvarint(0) if s is None else uvarint(len(s.encode()) + 1) + s.encode()


def frame(key: int, body: bytes) -> bytes:
    return uvarint(1) + uvarint(key) + uvarint(0) + body + uvarint(0)  # frame v1, key, version 0, ..., no tags


def topic(name: str, tid: uuid.UUID) -> bytes:
    return frame(2, string(name) + tid.bytes)


def config(name: str, key: str, value: str | None, resource_type: int = 2) -> bytes:
    return frame(4, bytes([resource_type]) + string(name) + string(key) + string(value))


def remove(tid: uuid.UUID) -> bytes:
    return frame(9, tid.bytes)


def write(path, values: list[bytes], base: int) -> None:
    recs = [Record(offset=base + i, timestamp=0, value=v) for i, v in enumerate(values)]
    path.write_bytes(build_batch(recs[:2], base_offset=base) + build_batch(recs[2:], base_offset=base + 2))


def test_configs_replayed_from_snapshot_and_log(tmp_path):
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    snapshot = [
        topic("a", a),
        config("a", "cleanup.policy", "compact"),
        config("a", "retention.ms", "5"),
        topic("b", b),
        config("b", "segment.bytes", "1024"),
        config("1", "log.retention.ms", "7", resource_type=4),  # a broker config: not a topic's
    ]
    write(d / "00000000000000000006-0000000001.checkpoint", snapshot, 0)
    log = [
        topic("x", uuid.uuid4()),  # below the snapshot's offset: already in it, skipped
        config("x", "k", "v"),
        config("a", "retention.ms", None),  # deleted
        topic("c", c),
        config("c", "min.cleanable.dirty.ratio", "0.1"),
        remove(b),  # b and its configs gone
        config("a", "max.message.bytes", "100"),
    ]
    write(d / "00000000000000000004.log", log, 4)
    assert topic_configs(str(tmp_path)) == {
        "a": {"cleanup.policy": "compact", "max.message.bytes": "100"},
        "c": {"min.cleanable.dirty.ratio": "0.1"},
    }


def test_no_log_or_a_log_that_does_not_reach_back_gives_none(tmp_path):
    assert topic_configs(str(tmp_path)) is None
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    write(d / "00000000000000000010.log", [topic("a", uuid.uuid4()), config("a", "k", "v")], 10)
    assert topic_configs(str(tmp_path)) is None  # records 0..9 are in no snapshot
    (d / "00000000000000000010.log").write_bytes(b"garbage")
    (d / "00000000000000000010.log").rename(d / "00000000000000000000.log")
    assert topic_configs(str(tmp_path)) is None
