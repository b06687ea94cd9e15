"""A roll flushes what it closes, and recovery after a crash reads only what was not flushed.

Kafka's UnifiedLog.roll schedules ``flushUptoOffsetExclusive(newSegment.baseOffset)``: the
rolled segments are fsynced off the request path and the recovery point moves to the new
segment; after a kill -9 the loader re-reads the segments from the checkpointed recovery point
on, and only those (LogLoader.recoverLog). Kafka checkpoints recovery points every
``log.flush.offset.checkpoint.interval.ms``; odradek also writes the checkpoint within a second
of a roll's flush, so the segments re-read are the active ones. Each test here failed before odradek did the same: the
recovery point moved only at load and at a clean close, so a crash re-read everything written
since the last start, and a power loss could take rolled segments with it."""

from __future__ import annotations

import asyncio
import os

from support.background import run_background
from support.batches import batch

from odradek.storage import FaultyFileSystem, LogConfig, LogManager
from odradek.storage.checkpoint import RECOVERY_POINT, read_offsets

SEGMENT = LogConfig(segment_bytes=2000, index_interval_bytes=1)  # every batch indexed: a segment's tail is one batch


def _fill(lg, n: int, clock, size: int = 300) -> None:
    for _ in range(n):
        lg.append(batch(1, size=size, ts=clock.ms))


def _kill(m: LogManager) -> None:
    """kill -9: files closed where they are, no flush, no checkpoint, no clean-shutdown marker."""
    for lg in m.all_logs():
        for seg in lg.segments:
            seg.close()


def _reload(m: LogManager, fs, clock, config=SEGMENT) -> LogManager:
    m2 = LogManager(m.log_dirs, config, fs=fs, clock=clock)
    m2.load()
    return m2


def test_a_roll_flushes_the_rolled_segments_off_the_loop_and_moves_the_recovery_point(make_mgr, fs, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, SEGMENT)
    _fill(lg, 20, clock)
    assert lg.segment_count >= 3
    active = lg.active_segment.base_offset
    assert lg.recovery_point == 0  # the roll itself (on the event loop) fsyncs nothing
    run_background(m, lambda: lg.recovery_point == active)
    for seg in lg.segments[:-1]:
        assert fs._synced[seg.log_path] == seg.size == os.path.getsize(seg.log_path)
    assert fs._synced.get(lg.active_segment.log_path, 0) == 0  # the active segment is not flushed
    assert lg.pending_flush_offset == -1


def test_a_recovery_point_moved_by_a_roll_is_checkpointed_within_a_second(make_mgr, clock):
    """Not at the next periodic checkpoint (log.flush.offset.checkpoint.interval.ms, 60 s here and
    the clock never gets there): at most one write a second (roll_checkpoint_min_interval_ms)."""
    m = make_mgr()
    m.checkpoint_interval_ms = 60_000
    lg = m.create_log("t", 0, SEGMENT)
    _fill(lg, 20, clock)
    path = os.path.join(m.log_dirs[0], RECOVERY_POINT)
    rolled = [lg.active_segment.base_offset]
    seen = []

    def checkpointed() -> int:
        return read_offsets(m.fs, path).get(("t", 0), 0)

    def until():
        if len(rolled) == 1 and checkpointed() == rolled[0]:
            _fill(lg, 8, clock)  # another roll, in the same second
            rolled.append(lg.active_segment.base_offset)
        elif len(rolled) == 2 and lg.recovery_point == rolled[1] and not seen:
            seen.append(checkpointed())  # flushed, not yet checkpointed: the last write was this second
            clock.advance(1000)
        return bool(seen) and checkpointed() == rolled[1]

    run_background(m, until)
    assert seen == [rolled[0]] and rolled[1] > rolled[0]


def test_power_loss_after_a_roll_keeps_every_rolled_segment(make_mgr, fs, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, SEGMENT)
    _fill(lg, 20, clock)
    active = lg.active_segment.base_offset
    run_background(m, lambda: lg.recovery_point == active)
    m.write_checkpoints()
    rolled = lg.read_bytes(0, 1 << 20, max_offset=active)
    _fill(lg, 3, clock)  # acknowledged, in the page cache only
    _kill(m)
    fs.crash()  # power loss: what was never fsynced is gone
    lg2 = _reload(m, FaultyFileSystem(real_fsync=False), clock).get_log("t", 0)
    assert lg2.log_end_offset >= active
    assert lg2.read_bytes(0, 1 << 20, max_offset=active) == rolled


def test_recovery_after_a_kill_reads_only_the_segments_after_the_recovery_point(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, SEGMENT)
    _fill(lg, 40, clock)
    flushed_to = lg.active_segment.base_offset
    run_background(m, lambda: lg.recovery_point == flushed_to)
    m.write_checkpoints()  # the periodic checkpoint: recovery point = the active segment's base
    _fill(lg, 10, clock)  # rolls again; that roll's flush and the next checkpoint never happen
    leo = lg.log_end_offset
    segments = [(s.base_offset, s.log_path, s.size) for s in lg.segments]
    _kill(m)
    fs2 = FaultyFileSystem(real_fsync=False)
    lg2 = _reload(m, fs2, clock).get_log("t", 0)
    assert lg2.log_end_offset == leo
    unflushed = [(b, size) for b, _, size in segments if b >= flushed_to]
    assert len(unflushed) >= 2 and len(segments) - len(unflushed) >= 4
    assert lg2.recovered_at_load == unflushed
    for base, path, size in segments:
        read = fs2.bytes_read.get(path, 0)
        if base >= flushed_to:
            assert read >= size  # validated batch by batch
        else:
            assert read <= 3 * 61, (base, read, size)  # a few batch headers (its first and last), no batch


def test_a_flush_racing_a_truncation_never_moves_the_recovery_point_past_it(tmp_path, clock):
    """The flush computes its target, fsyncs in a worker thread; a follower truncation on the event
    loop meanwhile lowers the log end offset: the recovery point must not land above it."""

    class TruncatingDuringFsync(FaultyFileSystem):
        hook = None

        def fsync(self, fd):
            hook, self.hook = self.hook, None
            if hook is not None:
                hook()
            super().fsync(fd)

    fs = TruncatingDuringFsync(real_fsync=False)
    m = LogManager([str(tmp_path / "d1")], SEGMENT, fs=fs, clock=clock)
    m.load()
    lg = m.create_log("t", 0, SEGMENT)
    _fill(lg, 20, clock)
    target = lg.active_segment.base_offset
    fs.hook = lambda: (lg.truncate_to(3), _fill(lg, 30, clock))  # truncated, then written again past target
    lg.flush(target)
    assert lg.recovery_point <= 3
    lg.flush(target)  # a flush that does not race one moves it
    assert lg.recovery_point == target
    _kill(m)


def test_kill_of_every_replica_at_once_loses_nothing_that_was_written(make_mgr, clock):
    """Process kill (not power loss) of all brokers at once: the page cache keeps every write,
    flushed or not, and each log recovers to its end (docs/cluster.md, what survives what)."""
    m = make_mgr(dirs=("b1", "b2", "b3"))
    logs = [m.create_log(f"t{i}", 0, SEGMENT) for i in range(3)]
    for lg in logs:
        _fill(lg, 25, clock)
    data = [lg.read_bytes(0, 1 << 20) for lg in logs]
    _kill(m)
    m2 = _reload(m, FaultyFileSystem(real_fsync=False), clock)
    assert [m2.get_log(f"t{i}", 0).read_bytes(0, 1 << 20) for i in range(3)] == data


def test_power_loss_of_every_replica_at_once_loses_the_unflushed_tails_only(make_mgr, fs, clock):
    """Power loss of all replicas at once (three logs standing for three brokers' copies): what
    survives is what each had flushed (its rolled segments); acknowledged records in the active
    segments are lost, as in Kafka, whose guarantee is replication, not fsync (docs/cluster.md).
    ``flush.messages=1`` makes every acknowledged append durable instead."""
    m = make_mgr(dirs=("b1", "b2", "b3"))
    logs = [m.create_log(f"t{i}", 0, SEGMENT) for i in range(2)]
    logs.append(m.create_log("t2", 0, LogConfig(segment_bytes=2000, flush_messages=1)))
    for lg in logs:
        _fill(lg, 25, clock)
    durable = logs[2].read_bytes(0, 1 << 20)

    async def flush_before_answering():  # ReplicaManager's step for an append with needs_flush
        await m.flush_log(logs[2])

    asyncio.run(flush_before_answering())
    rolled = [lg.active_segment.base_offset for lg in logs[:2]]
    run_background(m, lambda: [lg.recovery_point for lg in logs[:2]] == rolled)
    written = [lg.log_end_offset for lg in logs]
    _kill(m)
    fs.crash()
    m2 = _reload(m, FaultyFileSystem(real_fsync=False), clock)
    after = [m2.get_log(f"t{i}", 0).log_end_offset for i in range(3)]
    assert after[:2] == rolled and all(r < w for r, w in zip(rolled, written[:2], strict=True))
    assert after[2] == written[2] and m2.get_log("t2", 0).read_bytes(0, 1 << 20) == durable
