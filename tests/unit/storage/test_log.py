import os

import pytest
from support.batches import batch

from odradek.protocol import records as R
from odradek.protocol.records import Record, build_batch, decode_any, iter_batches
from odradek.storage import LogConfig, StorageOffsetOutOfRangeError, StorageRecordTooLargeError
from odradek.storage.errors import StorageInvalidTimestampError


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for r in decode_any(data)]


def test_append_assigns_offsets_and_stamps_epoch(make_mgr):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    assert m.create_log("t", 0, LogConfig()) is lg  # idempotent
    i1 = lg.append(batch(3), leader_epoch=4)
    i2 = lg.append(batch(2) + batch(1), leader_epoch=4)
    assert (i1.first_offset, i1.last_offset, i1.record_count) == (0, 2, 3)
    assert (i2.first_offset, i2.last_offset, i2.record_count) == (3, 5, 3)
    assert i1.log_append_time_ms == -1 and not i1.duplicate
    assert lg.log_end_offset == 6
    data = lg.read_bytes(0, 1 << 20)
    hs = list(iter_batches(data))
    assert [h.base_offset for h in hs] == [0, 3, 5]
    assert all(h.partition_leader_epoch == 4 for h in hs)
    assert offsets_of(data) == list(range(6))
    assert lg.end_offset_for_epoch(4) == (4, 6)


def test_rolls_by_size_time_index_and_reads_across(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=1000, index_interval_bytes=100))
    b = batch(2, size=300, ts=clock.ms)
    for _ in range(10):
        lg.append(b)
    assert lg.segment_count == 4  # 3 batches (900 bytes) per segment
    assert [s.base_offset for s in lg.segments] == [0, 6, 12, 18]
    assert offsets_of(lg.read_bytes(0, 1 << 20)) == list(range(20))
    assert offsets_of(lg.read_bytes(7, 1 << 20))[0] == 6  # whole batch containing 7
    # time based roll (segment.ms), measured from the first batch's timestamp
    lg.update_config(LogConfig(segment_ms=1000))
    clock.advance(1002)
    lg.append(batch(1, ts=clock.ms))
    assert lg.segment_count == 5
    lg.append(batch(1, ts=clock.ms))
    assert lg.segment_count == 5
    # full index
    lg2 = m.create_log("t", 1, LogConfig(segment_index_bytes=16, index_interval_bytes=0))
    for _ in range(6):
        lg2.append(batch(1, ts=clock.ms))
    assert lg2.segment_count >= 2
    assert offsets_of(lg2.read_bytes(0, 1 << 20)) == list(range(6))
    # relative offsets must fit int32 (a replicated batch far ahead of the segment base)
    lg3 = m.create_log("t", 2, LogConfig())
    lg3.append(batch(1, ts=clock.ms))
    lg3.append(batch(1, ts=clock.ms, base_offset=2**31 + 5), assign_offsets=False)
    assert lg3.segment_count == 2 and lg3.log_end_offset == 2**31 + 6
    assert [s.base_offset for s in lg3.segments] == [0, 2**31 + 5]


def test_read_limits_min_one_batch_and_max_offset(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(index_interval_bytes=1))
    sizes = []
    for i in range(10):
        b = batch(2, size=200 + 10 * i, ts=clock.ms)
        sizes.append(len(b))
        lg.append(b)
    r = lg.read(0, sizes[0] + sizes[1] + 5)
    assert r.size == sizes[0] + sizes[1] and len(r.regions) == 1 and r.first_offset == 0
    r = lg.read(0, 10)  # first batch larger than max_bytes: returned whole
    assert r.size == sizes[0]
    r = lg.read(0, 10, min_one_batch=False)
    assert r.size == 0 and r.regions == []
    r = lg.read(3, 1 << 20, max_offset=8)
    assert offsets_of(lg.read_bytes(3, 1 << 20, max_offset=8)) == [2, 3, 4, 5, 6, 7]
    assert r.first_offset == 2
    assert lg.read(8, 1 << 20, max_offset=8).size == 0
    assert lg.read(20, 100).size == 0  # at LEO: empty
    with pytest.raises(StorageOffsetOutOfRangeError):
        lg.read(21, 100)
    with pytest.raises(StorageOffsetOutOfRangeError):
        lg.read(-1, 100)
    # regions are real file regions
    reg = lg.read(4, 1 << 20).regions[0]
    data = os.pread(reg.fd, reg.length, reg.position)
    assert offsets_of(data)[0] == 4


def test_read_spanning_segments_returns_several_regions(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=500))
    for _ in range(6):
        lg.append(batch(1, size=200, ts=clock.ms))
    r = lg.read(0, 1 << 20)
    assert len(r.regions) == 3
    assert offsets_of(lg.read_bytes(0, 1 << 20)) == list(range(6))
    assert offsets_of(lg.read_bytes(1, 450)) == [1, 2]


def test_log_append_time_and_timestamps(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(message_timestamp_type="LogAppendTime"))
    info = lg.append(batch(2, ts=5))
    assert info.log_append_time_ms == clock.ms
    recs = decode_any(lg.read_bytes(0, 1 << 20))
    assert [r.timestamp for r in recs] == [clock.ms, clock.ms]
    lg2 = m.create_log("t", 1, LogConfig(message_timestamp_before_max_ms=1000))
    with pytest.raises(StorageInvalidTimestampError):
        lg2.append(batch(1, ts=clock.ms - 5000))
    with pytest.raises(StorageRecordTooLargeError):
        m.create_log("t", 2, LogConfig(max_message_bytes=100)).append(batch(1, size=500))


def test_offsets_by_time_and_max_timestamp(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=1000, index_interval_bytes=50))
    t0 = clock.ms
    # timestamps: batch i holds records at t0 + 10*i and t0 + 10*i + 1; batch 7 has the max
    for i in range(20):
        ts = t0 + 10 * i if i != 7 else t0 + 100_000
        lg.append(build_batch([Record(-1, ts, b"k", b"v" * 50), Record(-1, ts + 1, b"k", b"w" * 50)]))
    assert lg.segment_count > 2
    assert lg.offset_for_timestamp(t0) == (0, t0)
    assert lg.offset_for_timestamp(t0 + 1) == (1, t0 + 1)
    assert lg.offset_for_timestamp(t0 + 31) == (7, t0 + 31)
    assert lg.offset_for_timestamp(t0 + 32) == (8, t0 + 40)  # batch 4 holds 40/41
    assert lg.offset_for_timestamp(t0 + 75) == (14, t0 + 100_000)  # first record with ts >= target
    assert lg.offset_for_timestamp(t0 + 100_002) is None
    assert lg.max_timestamp_offset() == (15, t0 + 100_001)
    assert lg.offset_for_timestamp(-2) == (0, -1)
    assert lg.offset_for_timestamp(-1) == (40, -1)
    assert m.create_log("e", 0, LogConfig()).max_timestamp_offset() == (-1, -1)
    # same answers after a clean reload (indexes trimmed and reloaded) ...
    answers = [lg.offset_for_timestamp(t0 + d) for d in range(0, 200, 7)]
    m.shutdown()
    m2 = type(m)(m.log_dirs, LogConfig(), fs=m.fs, clock=clock)
    m2.load()
    lg2 = m2.get_log("t", 0)
    assert [lg2.offset_for_timestamp(t0 + d) for d in range(0, 200, 7)] == answers
    assert lg2.max_timestamp_offset() == (15, t0 + 100_001)
    m2.shutdown()


def test_truncate_and_leader_epochs(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=600))
    for e in (0, 0, 1, 1, 3, 3):
        lg.append(batch(2, size=200, ts=clock.ms), leader_epoch=e)
    assert lg.end_offset_for_epoch(0) == (0, 4)
    assert lg.end_offset_for_epoch(1) == (1, 8)
    assert lg.end_offset_for_epoch(2) == (1, 8)
    assert lg.end_offset_for_epoch(3) == (3, 12)
    assert lg.end_offset_for_epoch(4) == (-1, -1)
    lg.truncate_to(5)
    # as Kafka: the batch holding offset 5 goes, the log end offset becomes 5
    assert lg.log_end_offset == 5
    assert offsets_of(lg.read_bytes(0, 1 << 20)) == [0, 1, 2, 3]
    assert lg.end_offset_for_epoch(1) == (1, 5)
    info = lg.append(batch(1, ts=clock.ms), leader_epoch=5)
    assert info.first_offset == 5
    assert lg.end_offset_for_epoch(1) == (1, 5)
    assert lg.end_offset_for_epoch(5) == (5, 6)
    lg.truncate_to(0)
    assert lg.log_end_offset == 0 and lg.read(0, 100).size == 0


def test_config_from_props():
    cfg = LogConfig.from_props(
        {
            "segment.bytes": "1000",
            "cleanup.policy": "compact, delete",
            "min.cleanable.dirty.ratio": "0.1",
            "preallocate": "true",
            "compression.type": "zstd",
        }
    )
    assert cfg.segment_bytes == 1000 and cfg.compact and cfg.delete and cfg.preallocate
    assert cfg.min_cleanable_dirty_ratio == 0.1
    for key, bad in [
        ("segment.bytes", "x"),
        ("cleanup.policy", "nope"),
        ("min.cleanable.dirty.ratio", "2"),
        ("message.timestamp.type", "Now"),
        ("retention.ms", "-5"),
        ("preallocate", "yes"),
    ]:
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            LogConfig.from_props({key: bad})
    assert LogConfig.from_props(LogConfig().to_props()) == LogConfig()
    base = LogConfig(retention_ms=5)
    assert LogConfig.from_props({}, base) == base


def test_compressed_batches_stored_as_received(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    for codec in (R.GZIP, R.SNAPPY, R.LZ4, R.ZSTD):
        b = build_batch([Record(-1, clock.ms, b"k%d" % i, b"v" * 100) for i in range(5)], compression=codec)
        info = lg.append(b)
        stored = lg.read_bytes(info.first_offset, 1 << 20, max_offset=info.last_offset + 1)
        assert stored[12:] != b[12:] or True
        assert stored[61:] == b[61:]  # body untouched
        assert [r.offset for r in decode_any(stored)] == list(range(info.first_offset, info.last_offset + 1))
