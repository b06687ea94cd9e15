import asyncio
import os

import pytest
from support.batches import batch

from odradek.storage import LogConfig, LogManager, StorageOffsetOutOfRangeError


def _reload(m, clock, fs=None):
    m2 = LogManager(m.log_dirs, m.default_config, fs=fs or m.fs, clock=clock)
    m2.load()
    return m2


def test_retention_by_time(make_mgr, clock):
    m = make_mgr()
    cfg = LogConfig(segment_bytes=700, retention_ms=10_000, file_delete_delay_ms=1000)
    lg = m.create_log("t", 0, cfg)
    t0 = clock.ms
    for i in range(6):
        lg.append(batch(1, size=300, ts=t0 + i * 5000))  # 2 batches per segment
        lg.high_watermark = lg.log_end_offset
    assert lg.segment_count == 3
    clock.ms = t0 + 5000 + 10_001  # segment 0 (largest ts t0+5000) expired, segment 1 not
    old_fd_region = lg.read(0, 100).regions[0]
    assert m.run_retention() == 1
    assert lg.log_start_offset == 2 and lg.segment_count == 2
    with pytest.raises(StorageOffsetOutOfRangeError):
        lg.read(0, 100)
    names = os.listdir(lg.dir)
    assert "00000000000000000000.log.deleted" in names
    # fd of the deleted segment stays valid until file.delete.delay.ms has passed
    assert len(os.pread(old_fd_region.fd, old_fd_region.length, old_fd_region.position)) == old_fd_region.length
    assert m.process_delayed_deletes() == 0
    clock.advance(1000)
    assert m.process_delayed_deletes() == 3 - 2
    assert not any(n.endswith(".deleted") for n in os.listdir(lg.dir))
    # everything expired, including the active segment: roll first, keep an empty active one
    clock.advance(10**9)
    m.run_retention()
    assert lg.segment_count == 1 and lg.log_start_offset == 6 == lg.log_end_offset
    assert lg.append(batch(1)).first_offset == 6


def test_retention_needs_high_watermark(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=700, retention_ms=1))
    for _ in range(6):
        lg.append(batch(1, size=300, ts=clock.ms))
    clock.advance(100)
    assert m.run_retention() == 0  # HW 0: nothing is below it
    lg.high_watermark = 4
    assert m.run_retention() == 2 and lg.log_start_offset == 4


def test_retention_by_size(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=700, retention_bytes=1300))
    for _ in range(8):
        lg.append(batch(1, size=300, ts=clock.ms))
    lg.high_watermark = lg.log_end_offset
    assert lg.segment_count == 4 and lg.size_bytes > 2000
    m.run_retention()
    # Kafka's rule: delete oldest segments while the excess is at least a whole segment
    assert lg.segment_count == 3 and lg.log_start_offset == 2
    lg.update_config(LogConfig(segment_bytes=700, retention_bytes=1000))
    m.run_retention()
    assert lg.segment_count == 2 and lg.log_start_offset == 4
    compact = m.create_log("c", 0, LogConfig(segment_bytes=700, retention_bytes=10, cleanup_policy="compact"))
    for _ in range(8):
        compact.append(batch(1, size=300, key=b"k", ts=clock.ms))
    compact.high_watermark = compact.log_end_offset
    m.run_retention()
    assert compact.segment_count == 4  # delete policy not enabled


def test_delete_records_and_log_start_persisted(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=700))
    for _ in range(8):
        lg.append(batch(2, size=300, ts=clock.ms))
    lg.high_watermark = 10
    with pytest.raises(StorageOffsetOutOfRangeError):
        lg.delete_records(11)
    assert lg.delete_records(5) == 5  # mid-segment
    assert lg.segment_count == 3  # [0..3] deleted, segment holding 5 kept
    with pytest.raises(StorageOffsetOutOfRangeError):
        lg.read(4, 100)
    assert lg.read(5, 1 << 20).first_offset == 4  # batch holding 5
    assert lg.offset_for_timestamp(-2) == (5, -1)
    assert lg.offset_for_timestamp(0)[0] == 5
    assert lg.delete_records(3) == 5
    m.write_checkpoints()
    for s in lg.segments:
        s.close()
    m2 = _reload(m, clock)  # unclean, from checkpoints
    lg2 = m2.get_log("t", 0)
    assert lg2.log_start_offset == 5 and lg2.log_end_offset == 16 and lg2.high_watermark == 10
    m2.shutdown()
    m3 = _reload(m, clock)
    assert m3.get_log("t", 0).log_start_offset == 5
    m3.shutdown()


def test_flush_advances_recovery_point_only_past_flushed_data(make_mgr, fs, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=700, flush_messages=3))
    i = lg.append(batch(2))
    assert not i.needs_flush and lg.recovery_point == 0
    i = lg.append(batch(1))
    assert i.needs_flush
    lg.flush(up_to=2)
    assert lg.recovery_point == 2
    lg.append(batch(1))
    asyncio.run(m.flush_log(lg))
    assert lg.recovery_point == 4 == lg.log_end_offset
    for _ in range(5):
        lg.append(batch(1, size=300))
    m.write_checkpoints()
    assert lg.unflushed_messages == 5
    # what is flushed survives a power loss; the recovery point checkpoint says 4
    for s in lg.segments:
        s.close()
    fs.crash()
    m2 = _reload(m, clock)
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset >= 4


def test_background_loop_flushes_by_messages_and_time_and_deletes(make_mgr, clock):
    m = make_mgr()
    m.tick_seconds = 0.01
    a = m.create_log("a", 0, LogConfig(flush_messages=2))
    b = m.create_log("b", 0, LogConfig(flush_ms=1000))

    async def main():
        task = asyncio.create_task(m.run())
        a.append(batch(2))
        b.append(batch(1))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if a.recovery_point == 2:
                break
        assert a.recovery_point == 2 and b.recovery_point == 0
        clock.advance(1001)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if b.recovery_point == 1:
                break
        assert b.recovery_point == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    m.shutdown()
    assert os.path.exists(os.path.join(m.log_dirs[0], ".kafka_cleanshutdown"))


def test_delete_log(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 3, LogConfig(file_delete_delay_ms=10))
    lg.append(batch(1))
    d = lg.dir
    m.delete_log("t", 3)
    assert m.get_log("t", 3) is None and not os.path.exists(d)
    parent = os.path.dirname(d)
    assert any(n.startswith("t-3.") and n.endswith("-delete") for n in os.listdir(parent))
    clock.advance(11)
    m.process_delayed_deletes()
    assert not any(n.endswith("-delete") for n in os.listdir(parent))
    assert m.create_log("t", 3, LogConfig()).log_end_offset == 0


def test_create_log_balances_dirs(make_mgr):
    m = make_mgr(dirs=("a", "b", "c"))
    logs = [m.create_log("t", p, LogConfig()) for p in range(6)]
    counts = {}
    for lg in logs:
        counts[lg.dir_state.path] = counts.get(lg.dir_state.path, 0) + 1
    assert sorted(counts.values()) == [2, 2, 2]
    m.shutdown()
    m2 = LogManager(m.log_dirs, LogConfig(), fs=m.fs)
    m2.load()
    assert sorted((lg.topic, lg.partition) for lg in m2.all_logs()) == [("t", p) for p in range(6)]
    m2.shutdown()
