"""The leader-epoch checkpoint says what the batches say, across truncation, kill -9, power loss
and a damaged file.

Kafka's LeaderEpochFileCache writes its checkpoint when an epoch is assigned and when it is
truncated from either end; odradek marked the cache dirty and wrote it only at a flush, which by
default never comes, so a kill -9 after a follower truncation left entries on disk for offsets
that no longer held them (replication-audit §9). A missing, empty or malformed checkpoint read
as no entries at all, and a clean start never rebuilt them (§8): the follower then fetched with
no last epoch and skipped divergence detection. Kafka fails the log directory on a malformed
checkpoint; odradek rebuilds the cache from the batch headers instead (docs/storage.md)."""

from __future__ import annotations

import asyncio
import os

import pytest
from support.batches import batch

from odradek.protocol.records import Record, build_batch
from odradek.storage import FaultyFileSystem, LogConfig, LogManager
from odradek.storage.checkpoint import read_epochs

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=1)
CHECKPOINT = "leader-epoch-checkpoint"


def _replicated(base_offset: int, epoch: int, ts: int, size: int = 300) -> bytes:
    """One record at ``base_offset`` as a leader of ``epoch`` wrote it (a follower appends it as is)."""
    record = Record(-1, ts, None, b"x" * (size - 73))
    return build_batch([record], base_offset=base_offset, partition_leader_epoch=epoch)


def _on_disk(lg) -> list[tuple[int, int]]:
    return read_epochs(lg.fs, os.path.join(lg.dir, CHECKPOINT))


def _from_batches(lg) -> list[tuple[int, int]]:
    """(epoch, first offset) of each epoch, as the batch headers give them."""
    out: list[tuple[int, int]] = []
    for seg in lg.segments:
        pos = 0
        while pos < seg.size:
            h = seg.read_header(pos)
            if not out or h.partition_leader_epoch > out[-1][0]:
                out.append((h.partition_leader_epoch, h.base_offset))
            pos += h.size
    return out


def _kill(m: LogManager) -> None:
    for lg in m.all_logs():
        for seg in lg.segments:
            seg.close()


def _reload(m: LogManager, clock, fs=None) -> LogManager:
    m2 = LogManager(m.log_dirs, CONFIG, fs=fs or FaultyFileSystem(real_fsync=False), clock=clock)
    m2.load()
    return m2


def _log_of_epochs(make_mgr, clock, epochs):
    m = make_mgr()
    lg = m.create_log("t", 0, CONFIG)
    for epoch in epochs:
        lg.append(batch(1, size=300, ts=clock.ms), leader_epoch=epoch)
    return m, lg


def test_a_new_epoch_is_written_at_once(make_mgr, clock):
    m, lg = _log_of_epochs(make_mgr, clock, [1, 1, 3])
    assert _on_disk(lg) == lg.epoch_cache.entries == [(1, 0), (3, 2)]


def test_truncation_from_the_end_is_written_at_once(make_mgr, clock):
    m, lg = _log_of_epochs(make_mgr, clock, [1, 1, 2, 2, 4, 4])
    lg.flush()
    lg.truncate_to(3)
    assert _on_disk(lg) == lg.epoch_cache.entries == [(1, 0), (2, 2)]


def test_truncation_from_the_start_is_written_at_once(make_mgr, clock):
    m, lg = _log_of_epochs(make_mgr, clock, [1, 1, 2, 2, 4, 4])
    lg.flush()
    lg.high_watermark = lg.log_end_offset
    lg.delete_records(3)
    assert _on_disk(lg) == lg.epoch_cache.entries == [(2, 3), (4, 4)]


def test_a_kill_after_a_follower_truncation_and_a_refill_keeps_the_epochs_the_batches_say(make_mgr, clock):
    """replication-audit §9: a follower flushed up to 12 (epochs 0 then 5), truncated to 4 when its
    new leader diverged, fetched epoch 6 from there and rolled; then kill -9. The recovery-point
    checkpoint on disk still says 12, so recovery starts at the segment holding 12 and keeps
    the entries below it as the checkpoint file has them."""
    m = make_mgr()
    lg = m.create_log("t", 0, CONFIG)
    for off in range(12):
        lg.append(_replicated(off, 0 if off < 6 else 5, clock.ms), assign_offsets=False)
    lg.flush()
    m.write_checkpoints()
    assert lg.epoch_cache.entries == [(0, 0), (5, 6)] and lg.recovery_point == 12
    lg.truncate_to(4)
    for off in range(4, 15):
        lg.append(_replicated(off, 6, clock.ms), assign_offsets=False)
    assert lg.active_segment.base_offset <= 12 < lg.log_end_offset
    _kill(m)
    lg2 = _reload(m, clock).get_log("t", 0)
    assert lg2.epoch_cache.entries == _from_batches(lg2) == [(0, 0), (6, 4)]
    assert _on_disk(lg2) == [(0, 0), (6, 4)]


DAMAGE = {
    "missing": None,
    "empty": "",
    "garbage": "\x00\x17not a checkpoint",
    "wrong count": "0\n3\n0 0\n",
    "three fields": "0\n1\n0 0 7\n",
    "truncated by a power loss": "0\n2\n0 0\n",
}


@pytest.mark.parametrize("clean", [True, False], ids=["clean start", "after kill -9"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_an_empty_or_malformed_checkpoint_is_rebuilt_from_the_batches(make_mgr, clock, damage, clean):
    # epochs by segment (5 batches each): a change inside a segment, one at a segment boundary,
    # a segment of one epoch between two of the same, and a change in the active segment
    epochs = [0] * 5 + [0, 0, 2, 2, 2] + [3] * 5 + [3] * 5 + [3] * 5 + [3, 3, 7]
    m, lg = _log_of_epochs(make_mgr, clock, epochs)
    expected = _from_batches(lg)
    assert expected == [(0, 0), (2, 7), (3, 10), (7, 27)] and lg.segment_count == 6
    middle = lg.segments[3].log_path  # epoch 3 only, as the next segment's first batch
    if clean:
        m.shutdown()
    else:
        _run_roll_flushes(m)
        m.write_checkpoints()
        _kill(m)
    path = os.path.join(lg.dir, CHECKPOINT)
    if DAMAGE[damage] is None:
        os.remove(path)
    else:
        with open(path, "w") as f:
            f.write(DAMAGE[damage])
    fs = FaultyFileSystem(real_fsync=False)
    lg2 = _reload(m, clock, fs).get_log("t", 0)
    assert lg2.epoch_cache.entries == expected
    assert _on_disk(lg2) == expected
    assert fs.bytes_read.get(middle, 0) <= 4 * 61  # batch headers at its ends, not a walk of its batches
    lg2.append(batch(1, ts=clock.ms), leader_epoch=8)
    assert lg2.epoch_cache.entries == [*expected, (8, 28)]


def _run_roll_flushes(m: LogManager) -> None:
    asyncio.run(m.flush_rolled())


def test_power_loss_before_the_flush_empties_the_checkpoint_and_the_next_start_rebuilds_it(make_mgr, fs, clock):
    """A new epoch's entry is written at once but not fsynced; a power loss then leaves the file
    empty (what FaultyFileSystem does to a file never fsynced), and the start rebuilds it."""
    m, lg = _log_of_epochs(make_mgr, clock, [1] * 6)
    _run_roll_flushes(m)  # the rolled segments and the checkpoint (1, 0) are durable
    m.write_checkpoints()
    lg.append(batch(1, size=300, ts=clock.ms), leader_epoch=2)  # not durable: the segment and the checkpoint
    assert _on_disk(lg) == [(1, 0), (2, 6)]
    _kill(m)
    fs.crash()
    assert open(os.path.join(lg.dir, CHECKPOINT)).read() == ""
    lg2 = _reload(m, clock).get_log("t", 0)
    assert lg2.epoch_cache.entries == _from_batches(lg2)
    assert lg2.epoch_cache.entries[0] == (1, 0)


def test_a_flush_makes_the_written_checkpoint_durable(make_mgr, fs, clock):
    m, lg = _log_of_epochs(make_mgr, clock, [1, 1, 2])
    assert lg.epoch_cache.unsynced
    lg.flush()
    assert not lg.epoch_cache.unsynced
    _kill(m)
    fs.crash()
    assert _on_disk(lg) == [(1, 0), (2, 2)]
