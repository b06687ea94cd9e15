"""A truncation writes its log directory's recovery-point checkpoint before it returns.

Kafka's LogManager.truncateTo (and truncateFullyAndStartAt) checkpoints the recovery points of
the truncated logs' directories right after truncating. odradek lowered the recovery point in
memory only, so the file kept the old one until the next periodic checkpoint: records appended
below it after the truncation, rolled into new segments and not yet flushed, were never
re-read after a power cut. Recovery started at the segment holding the stale recovery point,
found the segments below it "flushed", and took the log end to be the last segment's base
offset, over records that the power cut had taken (a hole in the log). Each test here failed
before the fix."""

from __future__ import annotations

import os

import pytest
from support.batches import batch

from odradek.protocol.records import decode_any
from odradek.storage import FaultyFileSystem, LogConfig, LogManager
from odradek.storage.checkpoint import RECOVERY_POINT, read_offsets

SEGMENT = LogConfig(segment_bytes=2000, index_interval_bytes=1)  # about 6 batches of 300 bytes a segment


def _fill(lg, clock, segments: int) -> None:
    while lg.segment_count < segments:
        lg.append(batch(1, size=300, ts=clock.ms))


def _kill(m: LogManager) -> None:
    """kill -9: files closed where they are, no flush, no checkpoint, no clean-shutdown marker."""
    for lg in m.all_logs():
        for seg in lg.segments:
            seg.close()


def _checkpointed(m: LogManager) -> int:
    return read_offsets(FaultyFileSystem(), os.path.join(m.log_dirs[0], RECOVERY_POINT))[("t", 0)]


def _offsets(lg) -> list[int]:
    return [r.offset for r in decode_any(lg.read_bytes(lg.log_start_offset, 1 << 24))]


def _flushed_and_checkpointed(make_mgr, clock):
    """A log of three segments whose rolled ones are flushed and checkpointed, as the roll's
    flush and checkpoint leave it."""
    m = make_mgr()
    lg = m.create_log("t", 0, SEGMENT)
    _fill(lg, clock, 3)
    active = lg.active_segment.base_offset
    lg.flush(active)
    m.write_checkpoints()
    assert _checkpointed(m) == lg.checkpointed_recovery_point == active
    return m, lg, active


@pytest.mark.parametrize("full", [False, True], ids=["truncate_to", "truncate_fully_and_start_at"])
def test_a_truncation_writes_the_recovery_point_checkpoint_at_once(make_mgr, clock, full):
    m, lg, old = _flushed_and_checkpointed(make_mgr, clock)
    if full:
        lg.truncate_fully_and_start_at(3)
    else:
        lg.truncate_to(3)
    assert lg.recovery_point == 3
    assert _checkpointed(m) == lg.checkpointed_recovery_point == 3  # was `old` until the next periodic write


@pytest.mark.parametrize("where", ["past the log end", "within the active segment"])
def test_a_truncation_at_or_above_the_checkpointed_recovery_point_writes_no_checkpoint(make_mgr, fs, clock, where):
    """Past the log end nothing is cut (Kafka's truncateTo checkpoints only the logs it
    truncated); within the active segment, above the file's recovery point, the file is right
    as it is (Kafka writes it anyway): no fsynced write on the event loop."""
    m, lg, active = _flushed_and_checkpointed(make_mgr, clock)
    for _ in range(2):
        lg.append(batch(1, size=300, ts=clock.ms))
    renames = fs.calls.get("rename", 0)
    at = lg.log_end_offset if where == "past the log end" else lg.log_end_offset - 1
    assert at > active
    lg.truncate_to(at)
    assert lg.log_end_offset == at
    assert fs.calls.get("rename", 0) == renames  # no checkpoint file replaced
    assert _checkpointed(m) == lg.checkpointed_recovery_point == active


@pytest.mark.parametrize("full", [False, True], ids=["truncate_to", "truncate_fully_and_start_at"])
def test_after_a_truncation_a_power_cut_is_recovered_from_the_truncation_point(make_mgr, fs, clock, caplog, full):
    """Truncate below the checkpointed recovery point, append into new segments without
    flushing, lose power: recovery re-reads (validates) from the truncation point, finds the
    records after it lost, and ends the log there, without a hole."""
    m, lg, old = _flushed_and_checkpointed(make_mgr, clock)
    at = 3
    assert lg.segments[0].base_offset < at < lg.segments[1].base_offset  # inside the first segment
    if full:
        lg.truncate_fully_and_start_at(at)
    else:
        lg.truncate_to(at)
    _fill(lg, clock, 3)  # rolled twice again, below the old recovery point; the roll flushes never run
    assert lg.segments[1].base_offset <= old  # recovery from `old` would start after the first segment
    assert lg.recovery_point == at
    _kill(m)
    fs.crash()  # power cut: every byte appended after the truncation is gone, the new segments' files are not
    m2 = LogManager(m.log_dirs, SEGMENT, fs=FaultyFileSystem(real_fsync=False), clock=clock)
    m2.load()
    lg2 = m2.get_log("t", 0)
    first_read = lg2.recovered_at_load[0][0]
    assert first_read == (at if full else 0)  # the segment holding the truncation point, not the stale `old`
    assert lg2.log_end_offset == at  # was the last segment's base offset: a hole over the lost records
    assert _offsets(lg2) == list(range(lg2.log_start_offset, at))
    assert "its unflushed tail was lost, the log ends there" in caplog.text
    lg2.append(batch(1, size=300, ts=clock.ms))  # the log goes on from there
    assert _offsets(lg2) == list(range(lg2.log_start_offset, at + 1))
