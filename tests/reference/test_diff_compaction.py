"""Differential: compaction. The same records, one per Produce request, into a compacted topic
of Apache Kafka 4.x and of odradek; once each broker's cleaner has cleaned the closed segment, the
surviving records (offset, key, value) must be the same: the latest value of each key, tombstones
kept (delete.retention.ms has not passed), the active segment untouched.

Kafka's fixture keeps its cleaner's default back-off (log.cleaner.backoff.ms, 15 s), so this test
waits up to about that long for Kafka.
"""

from __future__ import annotations

import time

import pytest
from support.diff import unique
from support.proto import batch, create_topic, fetch, produce_ok

from odradek.protocol.records import decode_records, parse_header

pytestmark = pytest.mark.reference


def _records(c, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of partition 0 up to the high watermark (a Fetch reads from one segment at a
    time on Kafka, so fetch on from where the last answer ended)."""
    out, offset = [], 0
    while True:
        p = fetch(c, [(topic, 0, offset, 1 << 20)]).responses[0].partitions[0]
        data = bytes(p.records or b"")
        pos = 0
        while pos + 61 <= len(data):
            h = parse_header(data, pos)
            if pos + h.size > len(data):
                break
            if not h.is_control:
                out += [(rec.offset, rec.key, rec.value) for rec in decode_records(data, pos)]
            offset = h.last_offset + 1
            pos += h.size
        if offset >= p.high_watermark or not pos:
            return out


def test_compaction_leaves_the_same_records(pair):
    name = unique("cmp")
    writes = [(f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(20)]
    writes[12] = (b"k2", None)  # a tombstone, kept after the first cleaning
    writes[17] = (b"k2", None)

    def scenario(t):
        with t.raw() as c:
            create_topic(
                c,
                name,
                1,
                configs={"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"},
            )
            for k, v in writes:
                produce_ok(c, name, [batch((k, v))])
            time.sleep(0.3)
            produce_ok(c, name, [batch((b"last", b"rolls the segment"))])  # the data segment closes
            deadline = time.monotonic() + 40
            while True:
                recs = _records(c, name)
                closed = [r for r in recs if r[1] != b"last"]
                if len({k for _, k, _ in closed}) == len(closed) or time.monotonic() > deadline:
                    return recs
                time.sleep(0.25)

    got = pair.same(scenario)
    keys = [k for _, k, _ in got]
    assert len(keys) == len(set(keys)) == 6  # k0..k4 and "last"
