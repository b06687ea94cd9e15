"""Differential: Produce, Fetch, ListOffsets and DeleteRecords, odradek against Apache Kafka 4.x.

Records are written with raw Produce requests of hand-built batches (one batch per request
unless a test says otherwise), so both brokers receive the same bytes and assign the same
offsets. Fetch responses are compared on what a client reads from them: per partition the
error, high watermark, log start offset and the batches returned (base offset, record count,
size), not their bytes (Kafka stamps the partition leader epoch, odradek too, but the CRC then
differs only where the timestamps do).
"""

from __future__ import annotations

import time

import pytest
from support.diff import unique
from support.proto import batch, create_topic, delete_records, fetch, list_offsets, produce, produce_ok

from odradek.protocol.records import Record, parse_header

pytestmark = pytest.mark.reference


# --------------------------------------------------------------------------- Produce errors


def test_produce_errors_for_bad_input(pair):
    """Unknown topics and partitions, invalid names, a batch over max.message.bytes, a bad acks."""
    name, nope = unique("pe"), unique("nope")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 2, configs={"max.message.bytes": "2000"})
            small = batch((b"k", b"v"))
            return {
                "ok": produce_ok(c, name, [small]),
                "unknown_topic": produce(c, nope, [small]),
                "unknown_partition": produce(c, name, [small], partition=7),
                "negative_partition": produce(c, name, [small], partition=-1),
                "invalid_name": produce(c, "bad name!", [small]),
                "too_large": produce(c, name, [batch((b"k", b"x" * 3000))]),
                "two_batches": produce(c, name, [small, small]),
                "second_too_large": produce(c, name, [small, batch((b"k", b"x" * 3000))]),
                "acks_2": produce(c, name, [small], acks=2),
                "internal": produce(c, "__consumer_offsets", [small]),
            }

    got = pair.same(scenario, ignore=("*.log_append_time",))
    assert got["unknown_topic"]["error_code"] == 3 and got["too_large"]["error_code"] == 10


def test_keyless_records_on_a_compacted_topic_get_record_errors(pair):
    """A batch holding some records without a key, on a compacted topic: INVALID_RECORD with
    record_errors naming the bad records' indexes only (Produce v8+), so a client fails only those."""
    name = unique("kl")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 1, configs={"cleanup.policy": "compact"})
            mixed = batch((b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4"))
            all_keyless = batch((None, b"x"))
            return {
                "mixed": produce(c, name, [mixed]),
                "keyless": produce(c, name, [all_keyless]),
                "then_ok": produce(c, name, [batch((b"a", b"5"))]),
                "old_version": produce(c, name, [mixed], version=7),
            }

    got = pair.same(scenario, ignore=("*.log_append_time",))
    assert got["mixed"]["error_code"] == 87
    assert [e["batch_index"] for e in got["mixed"]["record_errors"]] == [1, 3]


def test_timestamps_out_of_range_get_record_errors(pair):
    """message.timestamp.before/after.max.ms are checked per record: INVALID_TIMESTAMP with the
    bad records' indexes (their messages name the broker's clock, so only the indexes compare)."""
    name = unique("ts")

    def scenario(t):
        now = int(time.time() * 1000)
        with t.raw() as c:
            create_topic(c, name, 1, configs={"message.timestamp.before.max.ms": "600000"})
            return {
                "old_middle": produce(
                    c, name, [batch(*(Record(timestamp=ts, key=b"k", value=b"v") for ts in (now, now - 10**7, now)))]
                ),
                "future_first": produce(
                    c, name, [batch(*(Record(timestamp=ts, key=b"k", value=b"v") for ts in (now + 10**8, now)))]
                ),
                "ok": produce(c, name, [batch(Record(timestamp=now, key=b"k", value=b"v"))]),
            }

    got = pair.same(scenario, ignore=("*.log_append_time", "*.batch_index_error_message"))
    assert [e["batch_index"] for e in got["old_middle"]["record_errors"]] == [1]


# --------------------------------------------------------------------------- ListOffsets


def test_list_offsets_by_timestamp_and_special_timestamps(pair):
    name = unique("lo")
    base = int(time.time() * 1000) - 60_000
    stamps = [base + i * 1000 for i in range(10)]
    stamps[7] = base + 50_000  # the largest timestamp is not the last record's
    stamps[8] = base + 50_000  # ... and is shared: -3 answers the first record with it

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 2)
            for i, ts in enumerate(stamps):
                produce_ok(c, name, [batch(Record(timestamp=ts, key=b"k", value=str(i).encode()))])
            produce_ok(
                c,
                name,
                [batch(Record(timestamp=base, key=b"a", value=b"1"), Record(timestamp=base + 1, key=b"b", value=b"2"))],
                partition=1,
            )
            queries = [-1, -2, -3, -4, base, base + 2500, base + 49_000, base + 50_000, base + 10**7, 0]
            return {
                "p0": {q: list_offsets(c, name, [(0, q)]) for q in queries},
                "p1": {q: list_offsets(c, name, [(1, q)]) for q in (-1, -2, -3, base + 1)},
                "duplicate": list_offsets(c, name, [(0, -1), (0, -2)]),
                "unknown_partition": list_offsets(c, name, [(9, -1)]),
                "unknown_topic": list_offsets(c, "nope-" + name, [(0, -1)]),
                "committed": {q: list_offsets(c, name, [(0, q)], isolation=1) for q in (-1, -3)},
            }

    got = pair.same(scenario)
    assert got["p0"][-3]["partitions"][0]["offset"] == 7


def test_list_offsets_on_an_empty_partition(pair):
    name = unique("loe")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 1)
            return {q: list_offsets(c, name, [(0, q)]) for q in (-1, -2, -3, 0)}

    pair.same(scenario)


# --------------------------------------------------------------------------- DeleteRecords


def test_delete_records(pair):
    name = unique("dr")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 2)
            for i in range(5):
                produce_ok(c, name, [batch((b"k", str(i).encode()), (b"k", b"x"))])
            out = {
                "middle": delete_records(c, name, [(0, 3)]),  # inside a batch: the log start moves there
                "hw": delete_records(c, name, [(0, -1)]),  # -1: up to the high watermark
                "below_start": delete_records(c, name, [(0, 2)]),
                "above_hw": delete_records(c, name, [(0, 11)]),
                "empty_partition": delete_records(c, name, [(1, 0)]),
                "empty_partition_above": delete_records(c, name, [(1, 1)]),
                "unknown_partition": delete_records(c, name, [(5, 0)]),
                "unknown_topic": delete_records(c, "nope-" + name, [(0, 0)]),
            }
            out["after"] = {q: list_offsets(c, name, [(0, q)]) for q in (-2, -1)}
            return out

    pair.same(scenario)


# --------------------------------------------------------------------------- Fetch


def _summary(resp) -> dict:
    """What a client reads from a Fetch response, per partition."""
    out = {"error_code": resp.error_code, "topics": []}
    for t in resp.responses:
        parts = []
        for p in t.partitions:
            recs = bytes(p.records or b"")
            batches, pos = [], 0
            while pos + 61 <= len(recs):  # whole batches; a broker may end with part of one (clients skip it)
                h = parse_header(recs, pos)
                if pos + h.size > len(recs):
                    break
                batches.append((h.base_offset, h.record_count, h.size))
                pos += h.size
            parts.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": p.error_code,
                    "high_watermark": p.high_watermark,
                    "log_start_offset": p.log_start_offset,
                    "batches": batches,
                    "partial_bytes": len(recs) - pos,
                }
            )
        out["topics"].append({"name": t.topic, "partitions": parts})
    return out


def test_fetch_errors_and_out_of_range(pair):
    name = unique("fe")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 1)
            for i in range(3):
                produce_ok(c, name, [batch((b"k", str(i).encode()))])
            r = fetch(
                c,
                [(name, 0, 0, 1 << 20), (name, 3, 0, 1 << 20), ("nope-" + name, 0, 0, 1 << 20)],
            )
            ahead = fetch(c, [(name, 0, 4, 1 << 20)])
            at_end = fetch(c, [(name, 0, 3, 1 << 20)])
            negative = fetch(c, [(name, 0, -1, 1 << 20)])
            return {
                "mixed": _summary(r),
                "ahead": _summary(ahead),
                "at_end": _summary(at_end),
                "negative": _summary(negative),
            }

    pair.same(scenario)


def test_fetch_size_limits(pair):
    """Per-partition and per-request maximum bytes, and a first batch larger than either: it is
    returned whole (KIP-74) for the first partition, and nothing for the others. Compared on the
    whole batches returned."""
    name = unique("fs")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 2)
            for p in (0, 1):
                for i in range(4):
                    produce_ok(c, name, [batch((b"k", bytes([65 + i]) * 300))], partition=p)
            big = batch((b"k", b"B" * 5000))
            produce_ok(c, name, [big], partition=0)
            return {
                "all": _summary(fetch(c, [(name, 0, 0, 1 << 20), (name, 1, 0, 1 << 20)])),
                "partition_cap": _summary(fetch(c, [(name, 0, 0, 800), (name, 1, 0, 800)])),
                "request_cap": _summary(fetch(c, [(name, 0, 0, 1 << 20), (name, 1, 0, 1 << 20)], max_bytes=1000)),
                "first_batch_over_partition_cap": _summary(fetch(c, [(name, 0, 4, 100), (name, 1, 0, 100)])),
                "first_batch_over_request_cap": _summary(
                    fetch(c, [(name, 0, 4, 1 << 20), (name, 1, 0, 1 << 20)], max_bytes=100)
                ),
                "zero_partition_cap": _summary(fetch(c, [(name, 0, 0, 0)])),
            }

    # Kafka fills a response up to the limit with the start of the next batch (clients drop it);
    # odradek sends whole batches only (docs/compatibility.md): the whole batches must agree
    kafka, odradek = pair.run(scenario)
    pair.compare(kafka, odradek, ignore=("*.partial_bytes",))
    assert any(p["partial_bytes"] for r in kafka.values() for t in r["topics"] for p in t["partitions"])
    assert not any(p["partial_bytes"] for r in odradek.values() for t in r["topics"] for p in t["partitions"])


def test_librdkafka_fails_only_the_keyless_records(pair):
    """The client's view of record_errors: librdkafka sends four records in one batch to a
    compacted topic, two without a key; each record's delivery report must be the same as with
    Kafka."""
    ck = pytest.importorskip("confluent_kafka")
    name = unique("klrd")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, name, 1, configs={"cleanup.policy": "compact"})
        reports: list = [None] * 4
        # A linger far longer than the loop: the four records go in one batch even when this
        # process is descheduled between two produce() calls; flush() sends it at once
        # (librdkafka's flush overrides linger.ms since 1.8).
        p = ck.Producer({"bootstrap.servers": t.bootstrap, "linger.ms": 60000, "enable.idempotence": False})
        for i, key in enumerate([b"a", None, b"c", None]):

            def done(err, msg, i=i):
                reports[i] = err.name() if err is not None else "ok"

            p.produce(name, value=str(i).encode(), key=key, partition=0, on_delivery=done)
        assert p.flush(30) == 0
        with t.raw() as c:
            end = list_offsets(c, name, [(0, -1)]).partitions[0].offset
        return {"reports": reports, "end_offset": end}

    got = pair.same(scenario)
    # librdkafka fails the keyless records INVALID_RECORD and the others with its own
    # _INVALID_DIFFERENT_RECORD ("another record of the batch was invalid": the application may
    # send them again); without record_errors every record came back INVALID_RECORD
    assert got["reports"] == ["_INVALID_DIFFERENT_RECORD", "INVALID_RECORD"] * 2
