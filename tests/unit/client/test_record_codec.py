"""The client's record codec: the C extension and the pure-Python fallback give identical
results, round trips agree with the reference codec, and malformed input raises
CorruptRecordError (never a crash, never an out-of-bounds read).

Every test runs once per available implementation (`impl`); the cross-checks compare
both directly when the extension is built.
"""

from __future__ import annotations

import gc
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.client import _records as CR
from odradek.protocol import records as R

BASE_TS = 1_700_000_000_000


both = pytest.mark.skipif(len(CR.IMPLEMENTATIONS) < 2, reason="C extension not built")


def build(recs, codec=R.NONE, base_offset=0, limit=10**9):
    b = CR.BatchBuilder(limit)
    for k, v, h, dt in recs:
        assert b.append(BASE_TS + dt, k, v, h)
    buf = bytearray(b.build(compression=codec, producer_id=7, producer_epoch=0, base_sequence=3))
    R.patch_batch(buf, base_offset=base_offset)
    return bytes(buf)


def raw_batch(body: bytes, count: int, base_offset: int = 0, attrs: int = 0, last_delta: int | None = None) -> bytes:
    """A v2 batch around arbitrary record bytes, with a correct CRC."""
    out = bytearray(R.HEADER_SIZE)
    R.HEADER.pack_into(
        out,
        0,
        base_offset,
        R.HEADER_SIZE - 12 + len(body),
        0,
        2,
        0,
        attrs,
        count - 1 if last_delta is None else last_delta,
        BASE_TS,
        BASE_TS,
        -1,
        -1,
        -1,
        count,
    )
    out += body
    struct.pack_into(">I", out, 17, R.crc32c(bytes(out[21:])))
    return bytes(out)


def legacy_message(offset: int, key: bytes, value: bytes) -> bytes:
    """A MessageSet v1 entry (uncompressed)."""
    body = struct.pack(">bbqi", 1, 0, 0, len(key)) + key + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def both_impls(fn):
    """fn() under each implementation: ('ok', result) or ('corrupt', None)."""
    out = []
    before = CR.IMPLEMENTATION
    try:
        for name in CR.IMPLEMENTATIONS:
            CR.set_implementation(name)
            try:
                out.append(("ok", fn()))
            except CR.CorruptRecordError:
                out.append(("corrupt", None))
    finally:
        CR.set_implementation(before)
    return out


def columns_tuple(c):
    if c is None:
        return None
    return (
        c.topic,
        c.partition,
        c.count,
        c.offsets,
        c.timestamps,
        c.timestamp_types,
        c.key_validity,
        c.key_offsets,
        c.key_data,
        c.value_validity,
        c.value_offsets,
        c.value_data,
    )


records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=300)),
        st.one_of(st.none(), st.binary(max_size=3000)),
        st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
        st.integers(-(10**6), 10**12),
    ),
    min_size=1,
    max_size=30,
)


# ----------------------------------------------------------------------------- round trips
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    recs=records_st,
    codec=st.sampled_from([R.NONE, R.GZIP, R.SNAPPY, R.LZ4, R.ZSTD]),
    base=st.integers(0, 2**40),
    cut=st.integers(0, 40),
)
def test_round_trip(impl, recs, codec, base, cut):
    raw = build(recs, codec, base)
    R.validate_batch(raw, strict=True)
    ref = R.decode_records(raw)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in ref] == [
        (k, v, list(h), BASE_TS + dt) for k, v, h, dt in recs
    ]
    start = base + cut % len(recs)
    data = raw + raw[:cut]  # a trailing partial batch
    got, nxt = CR.decode_fetched("t", 3, data, start)
    assert nxt == base + len(recs)
    want = [
        CR.ConsumerRecord("t", 3, r.offset, r.timestamp, 0, r.key, r.value, tuple(r.headers))
        for r in ref
        if r.offset >= start
    ]
    assert got == want
    assert all(type(r) is CR.ConsumerRecord and type(r.key) in (bytes, type(None)) for r in got)
    assert all(type(r.headers) is tuple for r in got)  # immutable: records cannot be in a cycle
    if impl == "c":  # so the native codec leaves them out of the cyclic GC's work
        assert not any(gc.is_tracked(r) or gc.is_tracked(r.headers) for r in got)
    cols, nxt2 = CR.decode_fetched_columns("t", 3, data, start)
    assert nxt2 == nxt
    want_cols = CR.RecordColumns.from_records("t", 3, want) if want else None
    assert columns_tuple(cols) == columns_tuple(want_cols)


@both
@settings(max_examples=60, deadline=None)
@given(recs=records_st)
def test_encoders_produce_identical_bytes(recs):
    assert len({r[1] for r in both_impls(lambda: build(recs))}) == 1


def test_log_append_time_and_batch_limit(impl):
    b = CR.BatchBuilder(200)
    assert b.append(BASE_TS, None, b"x" * 100, None)
    assert not b.append(BASE_TS, None, b"x" * 100, None)  # would pass the limit
    assert b.count == 1
    b = CR.BatchBuilder(10)
    assert b.append(BASE_TS, None, b"x" * 100, None)  # the first record always fits
    raw = bytearray(build([(b"k", b"v", [], 5), (None, None, [("h", b"1")], 9)]))
    attrs = struct.unpack_from(">h", raw, 21)[0] | 0x08  # LogAppendTime
    struct.pack_into(">h", raw, 21, attrs)
    struct.pack_into(">q", raw, 35, 42)  # max timestamp = the broker's time
    struct.pack_into(">I", raw, 17, R.crc32c(bytes(raw[21:])))
    got, _ = CR.decode_fetched("t", 0, bytes(raw), 0)
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(42, 1), (42, 1)]
    assert got[1].headers == (("h", b"1"),)


def test_control_aborted_and_legacy(impl):
    ctrl = bytearray(R.build_control_batch(R.CONTROL_COMMIT, producer_id=1, producer_epoch=0, timestamp=5))
    R.patch_batch(ctrl, base_offset=0)
    txn = bytearray(raw_batch(bytes(build([(None, b"a", [], 0)]))[R.HEADER_SIZE :], 1, base_offset=1, attrs=0x10))
    struct.pack_into(">q", txn, 43, 9)  # producer id 9
    struct.pack_into(">I", txn, 17, R.crc32c(bytes(txn[21:])))
    legacy = legacy_message(2, b"k", b"old")
    plain = build([(None, b"new", [], 0)], base_offset=3)
    data = bytes(ctrl) + bytes(txn) + legacy + plain
    got, nxt = CR.decode_fetched("t", 0, data, 0)
    assert [(r.offset, r.value) for r in got] == [(1, b"a"), (2, b"old"), (3, b"new")] and nxt == 4
    assert CR.aborted_batches(data, [(9, 1)]) == {1}
    got, nxt = CR.decode_fetched("t", 0, data, 0, aborted={1})  # the batch at 1 (producer 9) was aborted
    assert [(r.offset, r.value) for r in got] == [(2, b"old"), (3, b"new")] and nxt == 4
    cols, nxt = CR.decode_fetched_columns("t", 0, data, 0)
    assert list(cols.offset_list()) == [1, 2, 3] and nxt == 4
    cols, nxt = CR.decode_fetched_columns("t", 0, bytes(ctrl), 0)
    assert cols is None and nxt == 1


def test_columns_layout(impl):
    data = build([(None, b"ab", [], 0), (b"k", None, [], 1), (b"", b"", [], 2)], base_offset=10)
    cols, nxt = CR.decode_fetched_columns("t", 1, data, 11)
    assert nxt == 13 and len(cols) == 2
    assert list(cols.offset_list()) == [11, 12]
    assert list(memoryview(cols.timestamps).cast("q")) == [BASE_TS + 1, BASE_TS + 2]
    assert list(memoryview(cols.key_offsets).cast("i")) == [0, 1, 1] and cols.key_data == b"k"
    assert cols.key_validity is None
    assert cols.value_validity == b"\x02" and list(memoryview(cols.value_offsets).cast("i")) == [0, 0, 0]


# ----------------------------------------------------------------------------- corrupt input
def test_crc_checked(impl):
    raw = bytearray(build([(None, b"hello", [], 0)]))
    raw[-2] ^= 0xFF
    with pytest.raises(CR.CorruptRecordError, match="CRC"):
        CR.decode_fetched("t", 0, bytes(raw), 0)
    with pytest.raises(CR.CorruptRecordError, match="CRC"):
        CR.decode_fetched_columns("t", 0, bytes(raw), 0)
    got, _ = CR.decode_fetched("t", 0, bytes(raw), 0, check_crcs=False)
    assert len(got) == 1 and got[0].value != b"hello"


GOOD = b"\x00" + b"\x00\x00" + b"\x01" + b"\x02v" + b"\x00"  # attrs, ts, offset, key -1, value "v", 0 headers
BAD_RECORDS = {
    "varint too long": b"\xff" * 11,
    "record length past the end": bytes([len(GOOD) * 2 + 2]) + GOOD,
    "record length shorter than fields": bytes([(len(GOOD) - 1) * 2]) + GOOD,
    "record length longer than fields": bytes([(len(GOOD) + 1) * 2]) + GOOD + b"\x00",
    "negative record length": b"\x03" + GOOD,
    "empty record": b"\x00",
    "key length -2": b"\x0c" + b"\x00\x00\x00" + b"\x03" + b"\x02v\x00",
    "key past the end": b"\x0c" + b"\x00\x00\x00" + b"\x14" + b"\x02v\x00",
    "value past the end": b"\x0a" + b"\x00\x00\x00\x01" + b"\x40v",
    "header count -1": b"\x0c" + b"\x00\x00\x00\x01\x02v" + b"\x01",
    "header key null": b"\x10" + b"\x00\x00\x00\x01\x02v" + b"\x02\x01\x01",
    "header key not utf-8": b"\x12" + b"\x00\x00\x00\x01\x02v" + b"\x02\x02\xff\x01",
    "header value -2": b"\x12" + b"\x00\x00\x00\x01\x02v" + b"\x02\x02h\x03",
    "bad varint in offset delta": b"\x0e" + b"\x00\x00\xff\xff\xff\xff\xff\x01",
    "fewer records than count": bytes([len(GOOD) * 2]) + GOOD,  # count is 2 below
    "truncated mid-record": bytes([len(GOOD) * 2]) + GOOD[:3],
}


@pytest.mark.parametrize("body", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_bad_records_raise(impl, body):
    count = 2 if body == BAD_RECORDS["fewer records than count"] else 1
    data = raw_batch(body, count)
    with pytest.raises(CR.CorruptRecordError):
        CR.decode_fetched("t", 0, data, 0)
    with pytest.raises(CR.CorruptRecordError):
        CR.decode_fetched_columns("t", 0, data, 0)


def test_good_record_helper_decodes(impl):
    got, _ = CR.decode_fetched("t", 0, raw_batch(bytes([len(GOOD) * 2]) + GOOD, 1), 0)
    assert [(r.key, r.value) for r in got] == [(None, b"v")]


def test_bad_batch_headers_raise(impl):
    good = raw_batch(bytes([len(GOOD) * 2]) + GOOD, 1)
    for length in (-12, -1, 0, 13):  # shorter than any entry
        bad = bytearray(good)
        struct.pack_into(">i", bad, 8, length)
        with pytest.raises(CR.CorruptRecordError):
            CR.decode_fetched("t", 0, bytes(bad) + bytes(100), 0, check_crcs=False)
    bad = bytearray(good[:40])  # a v2 batch shorter than its header
    struct.pack_into(">i", bad, 8, 28)
    with pytest.raises(CR.CorruptRecordError):
        CR.decode_fetched("t", 0, bytes(bad), 0, check_crcs=False)
    with pytest.raises(CR.CorruptRecordError):
        CR.decode_fetched("t", 0, raw_batch(b"", -1, last_delta=0), 0)  # negative record count
    with pytest.raises(CR.CorruptRecordError):
        CR.decode_fetched("t", 0, raw_batch(bytes([len(GOOD) * 2]) + GOOD, 1, base_offset=2**63 - 1), 0)


def test_truncation_is_a_partial_batch(impl):
    recs = [(b"k%d" % i, b"v" * i, [("h", b"x")], i) for i in range(20)]
    one = build(recs[:10])
    two = build(recs[10:], base_offset=10)
    data = one + two
    for cut in range(len(one), len(data)):
        got, nxt = CR.decode_fetched("t", 0, data[:cut], 0)
        assert nxt == 10 and [r.offset for r in got] == list(range(10))
    for cut in range(0, len(one)):
        got, nxt = CR.decode_fetched("t", 0, data[:cut], 0)
        assert (got, nxt) == ([], 0)


@settings(max_examples=300, deadline=None)
@given(
    recs=records_st,
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
    codec=st.sampled_from([R.NONE, R.NONE, R.GZIP]),
)
def test_mutated_batches_agree(recs, flips, codec):
    """Random byte changes (CRC unchecked): every implementation raises CorruptRecordError
    or returns the same records and columns."""
    data = bytearray(build(recs, codec) + build(recs[:3], base_offset=len(recs)))
    for pos, x in flips:
        data[pos % len(data)] ^= x
    data = bytes(data)
    res = both_impls(lambda: CR.decode_fetched("t", 0, data, 0, check_crcs=False))
    assert all(r == res[0] for r in res)
    cres = both_impls(
        lambda: (lambda c: (columns_tuple(c[0]), c[1]))(CR.decode_fetched_columns("t", 0, data, 0, check_crcs=False))
    )
    assert [r[0] for r in cres] == [r[0] for r in res]
    if res[0][0] == "ok":
        recs_got, nxt = res[0][1]
        want = CR.RecordColumns.from_records("t", 0, recs_got) if recs_got else None
        assert all(r[1] == (columns_tuple(want), nxt) for r in cres)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data):
    for blob in (data, raw_batch(data, 3)):
        res = both_impls(lambda blob=blob: CR.decode_fetched("t", 0, blob, 0, check_crcs=False))
        assert all(r == res[0] for r in res)


@pytest.mark.parametrize("transactional_id", [None, "txn-é"])
@pytest.mark.parametrize("version", range(3, 13))
def test_hand_encoded_produce_matches_kio(version, transactional_id):
    from odradek.client import _wire
    from odradek.protocol import messages

    topics = {"t1": [(0, b"abc" * 50), (3, b"")], "tópic": [(7, b"x" * 300)]}
    data = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout": 30000,
        "topic_data": [
            {"name": t, "partition_data": [{"index": i, "records": r} for i, r in ps]} for t, ps in topics.items()
        ],
    }
    ours = _wire.encode_produce(version, -1, 30000, topics, transactional_id)
    assert ours == messages.encode(_wire.request(0, version, data))


def test_a_record_below_the_fetch_offset_is_skipped_before_its_headers_are_read():
    """A batch holds records below the fetch offset (the consumer asked from inside it): they
    are dropped unread, so a bad header key there is no error, in either implementation; the
    same key in a wanted record is CorruptRecordError in both (found by the mutation test)."""
    data = bytearray(build([(None, b"v", [("é", None)], 0), (None, b"w", [], 1)], R.NONE, base_offset=10))
    at = bytes(data).index("é".encode())
    data[at] = 0xFF  # no longer UTF-8
    data = bytes(data)
    skipped = both_impls(lambda: CR.decode_fetched("t", 0, data, 11, check_crcs=False))
    assert [(k, [r.offset for r in got], nxt) for k, (got, nxt) in skipped] == [("ok", [11], 12)] * len(skipped)
    wanted = both_impls(lambda: CR.decode_fetched("t", 0, data, 10, check_crcs=False))
    assert wanted == [("corrupt", None)] * len(wanted)
