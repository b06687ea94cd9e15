"""The validator as a seam of its own: crafted batches in, outcomes and write plans out (no log, no files)."""

import struct
import zlib

import pytest
from support.batches import batch

from odradek.protocol.records import (
    CONTROL_COMMIT,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    build_batch,
    build_control_batch,
    crc32c,
    decode_message_set,
    decode_records,
    iter_batches,
)
from odradek.storage import LogConfig, StorageRecordTooLargeError
from odradek.storage.errors import StorageInvalidTimestampError
from odradek.storage.validator import BatchValidator

NOW = 1_700_000_000_000


def validator(**cfg) -> BatchValidator:
    return BatchValidator(LogConfig(**cfg), "t-0")


def with_record_count(b: bytes, count: int) -> bytes:
    """``b`` claiming ``count`` records, CRC recomputed (a well-formed batch with a wrong count)."""
    out = bytearray(b)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def v1_message_set(value: bytes) -> bytes:
    """One uncompressed magic-1 message (a legacy MessageSet, as Produce v0-v2 carries)."""
    body = bytes([1, 0]) + struct.pack(">q", NOW) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def written(plan) -> bytes:
    return b"".join(bytes(b) for b in plan.buffers)


# ------------------------------------------------------------------ checks


def test_valid_batches_pass_with_their_headers():
    b1, b2 = batch(3, ts=NOW), batch(2, ts=NOW, producer_id=7, producer_epoch=0, base_sequence=0)
    v = validator().validate(b1 + b2, NOW)
    assert [h.record_count for h in v.headers] == [3, 2]
    assert [h.position for h in v.headers] == [0, len(b1)]
    assert v.log_append_time == -1
    assert v.has_producer_ids
    assert not validator().validate(b1, NOW).has_producer_ids


def test_empty_append_is_invalid():
    with pytest.raises(InvalidRecordError, match="empty"):
        validator().validate(b"", NOW)


def test_crc_mismatch_and_truncation_are_corrupt_unless_unchecked():
    b = bytearray(batch(2, ts=NOW))
    b[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        validator().validate(bytes(b), NOW)
    assert len(validator().validate(bytes(b), NOW, check=False).headers) == 1  # framing only
    with pytest.raises(CorruptRecordError):
        validator().validate(batch(2, ts=NOW)[:-3], NOW, check=False)  # framing is always checked


def test_legacy_message_set_is_rejected_by_magic():
    legacy = v1_message_set(b"v" * 60)
    assert decode_message_set(legacy)[0].value == b"v" * 60  # a real v1 message set
    with pytest.raises(CorruptRecordError, match="magic 1"):
        validator().validate(legacy, NOW)


def test_record_count_strict_for_producers_not_for_replicas():
    short = with_record_count(batch(3, ts=NOW), 2)  # lastOffsetDelta 2, 2 records: as compaction leaves
    with pytest.raises(InvalidRecordError, match="record count"):
        validator().validate(short, NOW)
    assert validator().validate(short, NOW, assign_offsets=False).headers[0].record_count == 2
    with pytest.raises(CorruptRecordError, match="exceeds offset range"):
        validator().validate(with_record_count(batch(3, ts=NOW), 4), NOW, assign_offsets=False)


def test_size_against_max_message_bytes_at_the_boundary():
    b = batch(2, ts=NOW)
    assert validator(max_message_bytes=len(b)).validate(b, NOW).headers
    with pytest.raises(StorageRecordTooLargeError, match="max.message.bytes"):
        validator(max_message_bytes=len(b) - 1).validate(b, NOW)
    with pytest.raises(StorageRecordTooLargeError):  # one oversized batch among valid ones
        validator(max_message_bytes=len(b)).validate(b + batch(3, ts=NOW), NOW)


def test_create_time_bounds():
    v = validator(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
    assert v.validate(batch(1, ts=NOW - 1000), NOW).headers
    assert v.validate(batch(1, ts=NOW + 500), NOW).headers
    with pytest.raises(StorageInvalidTimestampError):
        v.validate(batch(1, ts=NOW - 1001), NOW)
    with pytest.raises(StorageInvalidTimestampError):
        v.validate(batch(1, ts=NOW + 501), NOW)
    old_marker = build_control_batch(CONTROL_COMMIT, producer_id=1, producer_epoch=0, timestamp=NOW - 10**9)
    assert v.validate(old_marker, NOW).headers  # control batches are not checked
    assert v.validate(batch(1, ts=NOW - 10**9), NOW, check=False).headers
    # without bounds anything goes
    assert validator().validate(batch(1, ts=0), NOW).headers


def test_log_append_time_is_stamped_not_checked():
    v = validator(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=1000)
    checked = v.validate(batch(1, ts=NOW - 10**9), NOW)
    assert checked.log_append_time == NOW
    # replicated batches keep the leader's timestamps
    assert v.validate(batch(1, ts=NOW), NOW, assign_offsets=False).log_append_time == -1


def test_compacted_topic_needs_keys():
    v = validator(cleanup_policy="compact")
    keyed = build_batch([Record(-1, NOW, b"k", b"v"), Record(-1, NOW, b"k2", None)])
    assert v.validate(keyed, NOW).headers
    one_keyless = build_batch([Record(-1, NOW, b"k", b"v"), Record(-1, NOW, None, b"v")])
    with pytest.raises(InvalidRecordError, match="without key in topic partition t-0"):
        v.validate(keyed + one_keyless, NOW)
    marker = build_control_batch(CONTROL_COMMIT, producer_id=1, producer_epoch=0, timestamp=NOW)
    assert v.validate(marker, NOW).headers  # a marker's key is its type; control batches are exempt anyway
    assert validator().validate(one_keyless, NOW).headers  # delete policy: keys optional


# ------------------------------------------------------------------ offset assignment


def test_assign_offsets_patches_outside_the_crc_without_copying_records():
    b1, b2 = batch(3, ts=NOW), batch(2, ts=NOW + 5)
    received = b1 + b2
    plan = validator().validate(received, NOW).assign_offsets(100, leader_epoch=7)
    assert (plan.first_offset, plan.next_offset, plan.record_count, plan.size) == (100, 105, 5, len(received))
    assert plan.batches == [(0, 102, NOW + 2, len(b1)), (len(b1), 104, NOW + 6, len(b2))]
    # per batch: a new 16-byte prefix, then a slice of the received buffer (no copy)
    assert [len(plan.buffers[0]), len(plan.buffers[2])] == [16, 16]
    assert plan.buffers[1].obj is received and plan.buffers[3].obj is received
    out = written(plan)
    hs = list(iter_batches(out))  # CRCs still valid
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(100, 7), (103, 7)]
    assert [r.offset for h in hs for r in decode_records(out, h.position)] == list(range(100, 105))
    assert out[16:] != received[16:] and out[len(b1) + 16 :] == received[len(b1) + 16 :]


def test_assign_offsets_with_log_append_time_rewrites_header_and_crc():
    received = batch(2, ts=5)
    plan = validator(message_timestamp_type="LogAppendTime").validate(received, NOW).assign_offsets(10, 3)
    assert plan.batches == [(0, 11, NOW, len(received))]
    assert len(plan.buffers[0]) == 61 and plan.buffers[1].obj is received
    out = written(plan)
    (h,) = iter_batches(out)
    assert (h.base_offset, h.partition_leader_epoch, h.timestamp_type, h.max_timestamp) == (10, 3, 1, NOW)
    assert out[61:] == received[61:]


def test_keep_offsets_for_replicated_batches():
    b1 = build_batch([Record(-1, NOW, None, b"a")], base_offset=50, partition_leader_epoch=4)
    b2 = build_batch([Record(-1, NOW, None, b"b")] * 2, base_offset=60, partition_leader_epoch=5)  # a gap is fine
    received = b1 + b2
    plan = validator().validate(received, NOW, assign_offsets=False).keep_offsets(log_end_offset=50)
    assert (plan.first_offset, plan.next_offset, plan.record_count) == (50, 62, 3)
    assert len(plan.buffers) == 1 and written(plan) == received
    assert [(rel, last) for rel, last, _, _ in plan.batches] == [(0, 50), (len(b1), 61)]
    with pytest.raises(InvalidRecordError, match="below log end offset"):
        validator().validate(received, NOW, assign_offsets=False).keep_offsets(log_end_offset=51)
    overlapping = b1 + build_batch([Record(-1, NOW, None, b"c")], base_offset=50)
    with pytest.raises(InvalidRecordError, match="below log end offset"):
        validator().validate(overlapping, NOW, assign_offsets=False).keep_offsets(log_end_offset=0)
