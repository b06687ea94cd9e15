"""Pluggable serializers, deserializers and partitioners, end to end against each peer."""

from __future__ import annotations

import asyncio
import json

from odradek.client import Consumer, Producer, TopicPartition
from odradek.client.aio import AIOConsumer

PARTS = 4


def test_serializers_and_deserializers(peer):
    topic = peer.new_topic(PARTS)
    docs = [{"user": i, "tags": ["a", "ü"], "score": i / 3} for i in range(40)]
    with Producer(
        bootstrap_servers=peer.bootstrap,
        key_serializer=lambda k: k.encode("utf-16-le"),
        value_serializer=lambda v: json.dumps(v).encode(),
    ) as p:
        futs = [p.send(topic, d, key=f"u{i % 5}") for i, d in enumerate(docs)]
        futs.append(p.send(topic, None, key="tombstone"))  # None is never serialized
        p.flush()
        metas = [f.result(10) for f in futs]
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTS)])  # no deserializers: the bytes as written
        raw = []
        for r in c:
            raw.append(r)
            if len(raw) == len(futs):
                break
    by_pos = {(r.partition, r.offset): r for r in raw}
    for i, (d, m) in enumerate(zip(docs, metas)):
        r = by_pos[(m.partition, m.offset)]
        assert r.key == f"u{i % 5}".encode("utf-16-le") and json.loads(r.value) == d

    async def read_back():
        async with AIOConsumer(
            bootstrap_servers=peer.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            key_deserializer=lambda b: b.decode("utf-16-le"),
            value_deserializer=json.loads,
        ) as c:
            c.assign([TopicPartition(topic, p) for p in range(PARTS)])
            out = []
            async for r in c:
                out.append(r)
                if len(out) == len(futs):
                    return out

    got = {(r.partition, r.offset): r for r in asyncio.run(asyncio.wait_for(read_back(), 30))}
    for i, (d, m) in enumerate(zip(docs, metas)):
        assert (got[(m.partition, m.offset)].key, got[(m.partition, m.offset)].value) == (f"u{i % 5}", d)
    last = got[(metas[-1].partition, metas[-1].offset)]
    assert (last.key, last.value) == ("tombstone", None)


def test_pluggable_and_round_robin_partitioners(peer):
    topic = peer.new_topic(PARTS)
    seen = []

    def by_last_byte(key, all_partitions, available):
        seen.append((key, tuple(all_partitions)))
        return key[-1] % len(all_partitions)

    with Producer(bootstrap_servers=peer.bootstrap, partitioner=by_last_byte) as p:
        futs = [p.send(topic, b"v", key=bytes([7, i])) for i in range(12)]
        p.flush()
        assert [f.result(10).partition for f in futs] == [i % PARTS for i in range(12)]
    assert seen[0] == (bytes([7, 0]), tuple(range(PARTS)))
    with Producer(bootstrap_servers=peer.bootstrap, partitioner="round_robin") as p:
        futs = [p.send(topic, b"v", key=b"same-key") for _ in range(12)]
        p.flush()
        parts = [f.result(10).partition for f in futs]
    assert sorted(parts.count(q) for q in range(PARTS)) == [3] * PARTS
