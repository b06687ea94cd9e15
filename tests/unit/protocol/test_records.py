import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import records as R
from odradek.protocol.records import Record

CODECS = [R.NONE, R.GZIP, R.SNAPPY, R.LZ4, R.ZSTD]

_bytes = st.one_of(st.none(), st.binary(max_size=64))
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3)
_record = st.builds(lambda ts, k, v, h: Record(-1, ts, k, v, h), st.integers(0, 2**41), _bytes, _bytes, _headers)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_record, min_size=1, max_size=20),
    st.sampled_from(CODECS),
    st.integers(0, 2**40),
    st.integers(-1, 2**31 - 1),
    st.integers(-1, 100),
    st.booleans(),
)
def test_round_trip(recs, codec, base_offset, pid, epoch, txn):
    b = R.build_batch(
        recs,
        base_offset=base_offset,
        compression=codec,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=txn,
    )
    (h,) = list(R.iter_batches(b, strict=True))
    assert h.base_offset == base_offset and h.record_count == len(recs)
    assert h.last_offset == base_offset + len(recs) - 1
    assert h.compression == codec and h.is_transactional == txn and h.producer_id == pid
    assert h.max_timestamp == max(r.timestamp for r in recs)
    out = R.decode_records(b)
    assert len(out) == len(recs)
    for i, (a, r) in enumerate(zip(out, recs)):
        assert a.offset == base_offset + i
        assert a.timestamp == r.timestamp
        assert a.key == r.key and a.value == r.value
        assert list(a.headers) == list(r.headers)


def test_iter_batches_concatenated_and_validation():
    b1 = R.build_batch([Record(value=b"a"), Record(value=b"b")], base_offset=0)
    b2 = R.build_batch([Record(value=b"c")], base_offset=2, compression=R.GZIP)
    hs = list(R.iter_batches(b1 + b2))
    assert [(h.position, h.base_offset, h.next_offset) for h in hs] == [(0, 0, 2), (len(b1), 2, 3)]
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_batches(b1 + b2[:-1]))  # truncated
    bad = bytearray(b1)
    bad[-1] ^= 1
    with pytest.raises(R.CorruptRecordError, match="CRC"):
        list(R.iter_batches(bytes(bad)))
    bad = bytearray(b1)
    bad[16] = 1
    with pytest.raises(R.CorruptRecordError, match="magic"):
        list(R.iter_batches(bytes(bad)))
    bad = bytearray(b1)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_batches(bytes(bad)))
    # count inconsistent with lastOffsetDelta (count is covered by the CRC: rebuild it)
    bad = bytearray(b1)
    struct.pack_into(">i", bad, 57, 5)
    struct.pack_into(">I", bad, 17, R.crc32c(bytes(bad[21:])))
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_batches(bytes(bad)))
    comp = R.build_batch([Record(0, 1, b"k", b"v"), Record(5, 2, b"k", b"w")], last_offset_delta=7)
    h = R.validate_batch(comp)
    assert h.record_count == 2 and h.last_offset == 7
    with pytest.raises(R.InvalidRecordError):
        R.validate_batch(comp, strict=True)


def test_patch_base_offset_epoch_and_log_append_time():
    b = bytearray(R.build_batch([Record(-1, 10, b"k", b"v"), Record(-1, 20, None, b"w")]))
    crc_before = bytes(b[17:21])
    R.patch_batch(b, base_offset=100, partition_leader_epoch=7)
    assert bytes(b[17:21]) == crc_before
    h = R.validate_batch(b)
    assert (h.base_offset, h.partition_leader_epoch) == (100, 7)
    R.patch_batch(b, log_append_time=999)
    h = R.validate_batch(b)
    assert h.timestamp_type == 1 and h.max_timestamp == 999
    assert [r.timestamp for r in R.decode_records(b)] == [999, 999]
    assert [r.offset for r in R.decode_records(b)] == [100, 101]
    # scatter form: header patched separately from the body
    b2 = R.build_batch([Record(-1, 5, b"k", b"v")])
    hdr = bytearray(b2[:61])
    R.patch_batch(hdr, base_offset=3, log_append_time=77, body=b2[61:])
    h = R.validate_batch(bytes(hdr) + b2[61:])
    assert h.max_timestamp == 77 and h.base_offset == 3


def test_control_batch_and_delete_horizon():
    b = R.build_control_batch(R.CONTROL_COMMIT, producer_id=5, producer_epoch=1, timestamp=3)
    h = R.validate_batch(b)
    assert h.is_control and h.is_transactional
    assert R.decode_control_record(b) == (0, R.CONTROL_COMMIT)
    b = R.build_batch([Record(4, 1000, b"k", None)], base_offset=4, delete_horizon_ms=5000)
    h = R.validate_batch(b)
    assert h.delete_horizon_ms == 5000
    assert R.decode_records(b) == [Record(4, 1000, b"k", None, [])]


def test_snappy_raw_and_xerial_decode():
    data = b"hello snappy " * 10000
    framed = R.compress(R.SNAPPY, data)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert R.decompress(R.SNAPPY, framed) == data
    import cramjam

    assert R.decompress(R.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
    with pytest.raises(R.CorruptRecordError):
        R.decompress(R.GZIP, b"not gzip")


def _legacy_msg(offset, magic, key, value, ts=None, attrs=0):
    body = struct.pack(">bb", magic, attrs)
    if magic == 1:
        body += struct.pack(">q", ts)
    body += struct.pack(">i", -1 if key is None else len(key)) + (key or b"")
    body += struct.pack(">i", -1 if value is None else len(value)) + (value or b"")
    crc = zlib.crc32(body)
    msg = struct.pack(">I", crc) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def test_legacy_message_sets():
    v0 = _legacy_msg(0, 0, b"k", b"v") + _legacy_msg(1, 0, None, b"w")
    assert R.decode_message_set(v0) == [Record(0, -1, b"k", b"v", []), Record(1, -1, None, b"w", [])]
    # v1 compressed wrapper: inner offsets relative, wrapper offset = last absolute offset
    inner = _legacy_msg(0, 1, b"a", b"1", ts=10) + _legacy_msg(1, 1, b"b", b"2", ts=11)
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    wrapper = _legacy_msg(41, 1, None, c.compress(inner) + c.flush(), ts=11, attrs=R.GZIP)
    recs = R.decode_message_set(wrapper + wrapper[:20])  # trailing partial message ignored
    assert [(r.offset, r.key, r.timestamp) for r in recs] == [(40, b"a", 10), (41, b"b", 11)]
    mixed = v0 + R.build_batch([Record(value=b"x")], base_offset=2)
    assert [r.offset for r in R.decode_any(mixed)] == [0, 1, 2]
    bad = bytearray(v0)
    bad[-1] ^= 0xFF
    with pytest.raises(R.CorruptRecordError):
        R.decode_message_set(bytes(bad))


def test_lz4_frames_have_independent_blocks():
    """Kafka's Java LZ4 reader (KafkaLZ4BlockInputStream, in the broker and the Java consumer)
    refuses a frame whose FLG byte lacks the block-independence bit ("Dependent block stream is
    unsupported"); tests/reference/test_diff_compression.py has Kafka read ours."""
    data = b"".join(b"record %d " % i for i in range(50_000))  # several 64 KiB blocks
    for payload in (data, bytearray(data), memoryview(data)):
        frame = R.compress(R.LZ4, payload)
        assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
        assert frame[4] & 0x20, f"FLG {frame[4]:#04x} without block independence"
        assert R.decompress(R.LZ4, frame) == data


def test_header_fields_read_in_place_match_the_parsed_header():
    """batch_size / batch_is_transactional / batch_is_control / batch_producer read one field of a
    batch where it lies, anywhere in a buffer, as parse_header reads it."""
    recs = [Record(-1, 1_700_000_000_000, b"k", b"v", [])]
    plain = R.build_batch(recs, producer_id=7, producer_epoch=3, base_sequence=0)
    txn = R.build_batch(recs, producer_id=2**40, producer_epoch=300, base_sequence=0, is_transactional=True)
    marker = R.build_control_batch(R.CONTROL_COMMIT, producer_id=9, producer_epoch=1, timestamp=5)
    buf = memoryview(b"\x00" * 3 + plain + txn + marker)
    pos = 3
    for batch, transactional, control in ((plain, False, False), (txn, True, False), (marker, True, True)):
        h = R.parse_header(buf, pos)
        assert R.batch_size(buf, pos) == len(batch) == R.LOG_OVERHEAD + h.batch_length
        assert (R.batch_is_transactional(buf, pos), R.batch_is_control(buf, pos)) == (transactional, control)
        assert R.batch_producer(buf, pos) == (h.producer_id, h.producer_epoch)
        pos += len(batch)
    assert R.batch_producer(txn) == (2**40, 300)


def test_header_fields_of_a_cut_batch():
    txn = R.build_batch([Record(-1, 0, None, b"v", [])], producer_id=1, producer_epoch=0, is_transactional=True)
    assert R.batch_size(txn[:11]) is None and R.batch_size(txn[:12]) == len(txn)
    assert not R.batch_is_transactional(txn[:22]) and R.batch_is_transactional(txn[:23])
    assert not R.batch_is_control(b"") and R.batch_producer(txn[:60]) is None
