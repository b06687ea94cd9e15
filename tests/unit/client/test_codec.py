"""Broker-free tests: partitioner, record codec, ConsumerProtocol encoding, assignors."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client import _wire
from odradek.client._records import BatchBuilder, decode_fetched
from odradek.client.consumer.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    make_assignors,
)
from odradek.client.producer.partitioner import DefaultPartitioner, murmur2
from odradek.protocol import records as R

# From Kafka's UtilsTest.testMurmur2
MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]


@pytest.mark.parametrize("data,expected", MURMUR2_VECTORS)
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_keyed_partition_is_java_formula():
    p = DefaultPartitioner()
    parts = list(range(7))
    for key in (b"a", b"key-1", b"\x00\xff", b"x" * 100):
        assert p.partition("t", key, parts, parts) == (murmur2(key) & 0x7FFFFFFF) % 7


def test_null_keys_stick_then_move():
    """Null keys stay on one partition until batch.size bytes went there, then the partitioner
    picks again at random among the available partitions (it may pick the same one, as Java's
    KIP-794 partitioner may): over many batches every partition gets used."""
    p = DefaultPartitioner(batch_size=100)
    parts = list(range(4))
    first = p.partition("t", None, parts, parts)
    assert all(p.partition("t", None, parts, parts) == first for _ in range(10))
    p.on_append("t", first, 60)
    assert p.partition("t", None, parts, parts) == first  # under batch.size: no new pick
    used = []
    for _ in range(200):
        cur = p.partition("t", None, parts, parts)
        used.append(cur)
        p.on_append("t", cur, 150)
    assert set(used) == set(parts)
    p.on_append("t", p.partition("t", None, parts, parts), 150)
    assert p.partition("t", None, parts, [2]) == 2  # a new pick is among the available partitions


def test_sticky_partitioner_counts_only_records_it_placed():
    """As Java's built-in partitioner: records sent to an explicit partition do not use up the
    sticky partition's batch.size (that records it placed do is test_null_keys_stick_then_move)."""
    from odradek.client.producer.core import ProducerCore

    core = ProducerCore({"bootstrap.servers": "127.0.0.1:1", "batch.size": 1000}, {})  # never started
    parts = ([0, 1, 2, 3], [0, 1, 2, 3])
    for n in range(8):  # a re-pick may land on the same partition: eight topics make luck irrelevant
        topic = f"t{n}"

        def place(partition=None, topic=topic):
            return core.prepare(topic, b"v" * 100, None, None, partition, None, parts)[0]  # 124 bytes

        sticky = place()
        for _ in range(30):  # ~3.7 KB sent explicitly to the sticky partition: not counted
            assert place(sticky) == sticky
        # 7 more placed records make 8 x 124 = 992 bytes < batch.size: all still on the sticky one
        assert [place() for _ in range(7)] == [sticky] * 7


records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=300)),
        st.one_of(st.none(), st.binary(max_size=3000)),
        st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
        st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(records_st, st.sampled_from([R.NONE, R.GZIP, R.SNAPPY, R.LZ4, R.ZSTD]))
def test_builder_and_decoder_agree_with_reference(recs, codec):
    b = BatchBuilder(10**9)
    base = 1_700_000_000_000
    for k, v, h, dt in recs:
        assert b.append(base + dt, k, v, h)
    raw = b.build(compression=codec, producer_id=7, producer_epoch=0, base_sequence=3)
    R.validate_batch(raw, strict=True)
    ref = R.decode_records(raw)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in ref] == [
        (k, v, [(hk, hv) for hk, hv in h], base + dt) for k, v, h, dt in recs
    ]
    # patch a base offset as a broker would, then decode from the middle
    buf = bytearray(raw)
    R.patch_batch(buf, base_offset=100)
    got, nxt = decode_fetched("t", 0, bytes(buf) + bytes(buf[:30]), 100 + len(recs) // 2)
    assert nxt == 100 + len(recs)
    assert [r.offset for r in got] == list(range(100 + len(recs) // 2, 100 + len(recs)))
    assert [(r.key, r.value) for r in got] == [(k, v) for k, v, _h, _dt in recs[len(recs) // 2 :]]


def test_decoder_skips_control_batches_and_reads_legacy():
    ctrl = bytearray(R.build_control_batch(R.CONTROL_COMMIT, producer_id=1, producer_epoch=0, timestamp=5))
    R.patch_batch(ctrl, base_offset=0)
    data = bytearray(R.build_batch([R.Record(-1, 10, b"k", b"v", [])]))
    R.patch_batch(data, base_offset=1)
    got, nxt = decode_fetched("t", 0, bytes(ctrl) + bytes(data), 0)
    assert [(r.offset, r.key, r.value) for r in got] == [(1, b"k", b"v")]
    assert nxt == 2


def test_decoder_rejects_bad_crc():
    raw = bytearray(R.build_batch([R.Record(-1, 10, b"k", b"v", [])]))
    raw[-1] ^= 0xFF
    with pytest.raises(R.CorruptRecordError):
        decode_fetched("t", 0, bytes(raw), 0)


def test_builder_respects_limit():
    b = BatchBuilder(200)
    assert b.append(0, None, b"x" * 100, None)
    assert not b.append(0, None, b"x" * 100, None)  # does not fit
    big = BatchBuilder(10)
    assert big.append(0, None, b"x" * 1000, None)  # the first record always fits


def test_consumer_protocol_roundtrip_and_older_versions():
    raw = _wire.encode_consumer_protocol(
        "subscription",
        3,
        {"topics": ["a", "b"], "owned_partitions": [{"topic": "a", "partitions": [0, 2]}], "generation_id": 5},
    )
    s = _wire.decode_consumer_protocol("subscription", raw)
    assert list(s.topics) == ["a", "b"] and s.generation_id == 5
    assert [(t.topic, list(t.partitions)) for t in s.owned_partitions] == [("a", [0, 2])]
    # v0 as written by old clients: version, topics, user_data
    v0 = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01a" + b"\xff\xff\xff\xff"
    assert list(_wire.decode_consumer_protocol("subscription", v0).topics) == ["a"]
    a = _wire.encode_consumer_protocol("assignment", 3, {"assigned_partitions": [{"topic": "a", "partitions": [1]}]})
    assert a[:2] == b"\x00\x03"
    assert [
        (t.topic, list(t.partitions)) for t in _wire.decode_consumer_protocol("assignment", a).assigned_partitions
    ] == [("a", [1])]


def _subs(members, topics=("t",), owned=None, gen=1):
    return {m: MemberSubscription(m, list(topics), (owned or {}).get(m, []), gen) for m in members}


def test_range_assignor_matches_java():
    out = RangeAssignor().assign({"t": 5, "u": 2}, _subs(["m1", "m2"], ("t", "u")))
    assert out == {"m1": [("t", 0), ("t", 1), ("t", 2), ("u", 0)], "m2": [("t", 3), ("t", 4), ("u", 1)]}


def test_roundrobin_assignor():
    out = RoundRobinAssignor().assign({"t": 3, "u": 2}, _subs(["a", "b"], ("t", "u")))
    assert out == {"a": [("t", 0), ("t", 2), ("u", 1)], "b": [("t", 1), ("u", 0)]}


def test_cooperative_sticky_keeps_and_defers_moves():
    a = CooperativeStickyAssignor()
    first = a.assign({"t": 6}, _subs(["a"]))
    assert len(first["a"]) == 6
    # b joins: a keeps 3, and the 3 moving to b are withheld this round (a must revoke first)
    second = a.assign({"t": 6}, _subs(["a", "b"], owned={"a": first["a"]}))
    assert len(second["a"]) == 3 and second["b"] == []
    # next round: a owns 3, b gets the rest
    third = a.assign({"t": 6}, _subs(["a", "b"], owned={"a": second["a"]}))
    assert third["a"] == second["a"] and len(third["b"]) == 3
    assert set(third["a"]) | set(third["b"]) == {("t", p) for p in range(6)}


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(0, 20), st.integers(0, 3))
def test_assignors_cover_every_partition_once(members, parts, seed):
    names = [f"m{i}" for i in range(members)]
    for assignor in make_assignors(["range", "roundrobin", "cooperative-sticky"]):
        out = assignor.assign({"t": parts}, _subs(names))
        flat = [tp for tps in out.values() for tp in tps]
        assert sorted(flat) == [("t", p) for p in range(parts)]
        counts = [len(v) for v in out.values()]
        assert max(counts) - min(counts) <= 1


def test_wire_build_ignores_fields_a_version_lacks():
    from odradek.protocol import messages

    for v in (4, 12):
        e = _wire.request(
            1,
            v,
            {
                "max_wait": 100,
                "min_bytes": 1,
                "max_bytes": 10,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "replica_id": -1,
                "topics": [
                    {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5, "partition_max_bytes": 10}]}
                ],
            },
        )
        assert messages.decode_request(1, v, messages.encode(e)) == e
    random.seed(0)
