"""Differential: broker-side compression.type (and KIP-390's compression.<codec>.level), odradek
against Apache Kafka 4.x.

The same hand-built batches go to both brokers with raw Produce requests; the Fetch responses are
compared on each stored batch's header (codec, timestamp type, offsets, producer fields, base and
max timestamps) and on its records (offset, timestamp, key, value, headers). The compressed bytes
themselves are not compared: Kafka's Java codecs and odradek's (zlib, cramjam) need not produce
the same bytes for the same records and level.
"""

from __future__ import annotations

import time

import pytest
from support.diff import unique
from support.proto import TOPIC, create_topic, create_topics, describe_configs, fetch, produce, produce_ok

from odradek.protocol import records as R
from odradek.protocol.records import Record

pytestmark = pytest.mark.reference

TARGETS = ["uncompressed", "gzip", "snappy", "lz4", "zstd"]
SOURCES = [R.NONE, R.GZIP, R.SNAPPY, R.LZ4, R.ZSTD]
INIT_PRODUCER_ID, V_INIT_PRODUCER_ID = 22, 4


def _records(tag: int, ts: int, n: int = 4) -> list[Record]:
    """``n`` records (some keyless, with headers, one null header value) from timestamp ``ts``:
    computed outside a scenario, so that both brokers receive the same bytes."""
    return [
        Record(-1, ts + i, b"k%d" % i if i % 3 else None, (b"v%d-%d " % (tag, i)) * 30, [("h", b"%d" % i), ("n", None)])
        for i in range(n)
    ]


def _stored(resp, producer_id: int | None = None) -> list[dict]:
    """The batches of the first partition of a Fetch response: header fields and records."""
    p = resp.responses[0].partitions[0]
    assert int(p.error_code) == 0, p
    recs = bytes(p.records or b"")
    out, pos = [], 0
    while pos + R.HEADER_SIZE <= len(recs):
        h = R.parse_header(recs, pos)
        if pos + h.size > len(recs):
            break
        R.validate_batch(recs, pos)  # framing and CRC as a client checks them
        out.append(
            {
                "base_offset": h.base_offset,
                "last_offset_delta": h.last_offset_delta,
                "record_count": h.record_count,
                "codec": R.CODEC_NAMES[h.compression],
                "timestamp_type": h.timestamp_type,
                "transactional": h.is_transactional,
                "control": h.is_control,
                "base_timestamp": h.base_timestamp,
                # LogAppendTime: each broker's own clock; compared as "the records carry it"
                "max_timestamp": h.max_timestamp if not h.timestamp_type else "log append time",
                "producer": "the producer's id" if h.producer_id == producer_id else h.producer_id,
                "producer_epoch": h.producer_epoch,
                "base_sequence": h.base_sequence,
                "records": [
                    (
                        r.offset,
                        r.timestamp if not h.timestamp_type else r.timestamp == h.max_timestamp,
                        r.key,
                        r.value,
                        list(r.headers),
                    )
                    for r in R.decode_records(recs, pos)
                ],
            }
        )
        pos += h.size
    return out


def _init_producer_id(c) -> tuple[int, int]:
    """An idempotent producer id, retried while the broker loads its producer-id state (Kafka
    answers COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR at first)."""
    deadline = time.monotonic() + 15
    while True:
        r = c.call(
            INIT_PRODUCER_ID,
            V_INIT_PRODUCER_ID,
            transactional_id=None,
            transaction_timeout=60000,
            producer_id=-1,
            producer_epoch=-1,
        )
        if int(r.error_code) not in (14, 15, 16) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert int(r.error_code) == 0, r
    return r.producer_id, r.producer_epoch


def test_topic_codec_rewrites_batches_of_every_codec(pair):
    """A topic per compression.type; to each, one batch in every codec (the last ones from an
    idempotent producer): stored in the topic's codec, same offsets, timestamps, producer fields
    and records as Kafka stores them."""
    names = {target: unique(f"cz-{target}") for target in TARGETS}
    base_ts = int(time.time() * 1000) - 5000

    def scenario(t):
        out = {}
        with t.raw() as c:
            pid, epoch = _init_producer_id(c)
            for target, name in names.items():
                create_topic(c, name, configs={"compression.type": target})
                for i, codec in enumerate(SOURCES):
                    recs = _records(i, base_ts + 100 * i)
                    if i < 3:
                        produce_ok(c, name, [R.build_batch(recs, compression=codec)])
                    else:
                        idem = R.build_batch(
                            recs, compression=codec, producer_id=pid, producer_epoch=epoch, base_sequence=4 * (i - 3)
                        )
                        produce_ok(c, name, [idem])
                out[target] = _stored(fetch(c, [(name, 0, 0, 1 << 20)]), pid)
        return out

    got = pair.same(scenario)
    for target in TARGETS:
        assert {b["codec"] for b in got[target]} == {"none" if target == "uncompressed" else target}
        assert [b["base_offset"] for b in got[target]] == [0, 4, 8, 12, 16]


def test_log_append_time_with_recompression(pair):
    """message.timestamp.type=LogAppendTime on a gzip topic: the rewritten batch says LogAppendTime
    and carries the append time as max timestamp; the batch in the topic's codec as well."""
    name = unique("cz-lat")
    now = int(time.time() * 1000)

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, configs={"compression.type": "gzip", "message.timestamp.type": "LogAppendTime"})
            r1 = produce_ok(c, name, [R.build_batch(_records(1, now - 60_000), compression=R.NONE)])
            r2 = produce_ok(c, name, [R.build_batch(_records(2, now - 30_000), compression=R.GZIP)])
            stored = _stored(fetch(c, [(name, 0, 0, 1 << 20)]))
            return {
                "log_append_time_set": [r1.log_append_time is not None, r2.log_append_time is not None],
                "stored": stored,
            }

    got = pair.same(scenario)
    assert [b["timestamp_type"] for b in got["stored"]] == [1, 1]


def test_levels_and_size_limit_after_recompression(pair):
    """compression.<codec>.level on the topic; a zstd batch that fits max.message.bytes but not once
    stored uncompressed is refused (Kafka checks the size again after recompressing)."""
    gz, big = unique("cz-level"), unique("cz-big")
    now = int(time.time() * 1000)

    def scenario(t):
        with t.raw() as c:
            create_topic(c, gz, configs={"compression.type": "zstd", "compression.zstd.level": "19"})
            produce_ok(c, gz, [R.build_batch(_records(1, now, n=50), compression=R.GZIP)])
            create_topic(c, big, configs={"compression.type": "uncompressed", "max.message.bytes": "3000"})
            large = R.build_batch([Record(-1, now, None, b"a" * 1000)] * 20, compression=R.ZSTD)
            assert len(large) < 3000
            return {
                "level": _stored(fetch(c, [(gz, 0, 0, 1 << 20)])),
                "too_large": produce(c, big, [large]),
                "fits": produce(c, big, [R.build_batch(_records(3, now, n=2), compression=R.ZSTD)]),
            }

    got = pair.same(scenario, ignore=("*.log_append_time", "*.error_message"))
    assert got["too_large"]["error_code"] == 10


def test_compression_configs_validated_and_described(pair):
    """Which values CreateTopics accepts, and how DescribeConfigs shows a topic's compression."""
    name = unique("cz-cfg")
    bad = [
        {"compression.type": "GZIP"},
        {"compression.type": "none"},
        {"compression.gzip.level": "0"},
        {"compression.gzip.level": "10"},
        {"compression.gzip.level": "-1"},
        {"compression.lz4.level": "18"},
        {"compression.lz4.level": "1"},
        {"compression.zstd.level": "-131073"},
        {"compression.zstd.level": "-131072"},
        {"compression.zstd.level": "23"},
        {"compression.type": "uncompressed", "compression.gzip.level": "5"},
    ]
    keys = ["compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level"]

    def scenario(t):
        with t.raw() as c:
            checks = [
                create_topics(c, {"name": unique("cz-v"), "configs": cfg}, validate_only=True).topics[0].error_code
                for cfg in bad
            ]
            create_topic(c, name, configs={"compression.type": "lz4", "compression.lz4.level": "12"})
            return {"validate": checks, "describe": describe_configs(c, TOPIC, name, keys=keys)}

    got = pair.same(scenario, ignore=("*.configs[*].documentation",))
    assert got["validate"] == [40, 40, 40, 40, 0, 40, 0, 40, 0, 40, 0]
