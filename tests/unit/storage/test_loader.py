"""The loader as a seam of its own: a log directory on disk in, a LoadedLog (plus the epoch cache and
producer state it fills) out. The directories are written by a real Log, then damaged by hand."""

import os

from support.batches import batch

from odradek.protocol.records import CONTROL_COMMIT, build_control_batch, iter_batches
from odradek.storage import FaultyFileSystem, LogConfig
from odradek.storage.checkpoint import LeaderEpochCache, read_epochs
from odradek.storage.loader import LogLoader, rebuild_producer_state
from odradek.storage.log import AppendOrigin
from odradek.storage.producer_state import ProducerStateManager

COORDINATOR = AppendOrigin.COORDINATOR


def load(directory, config=None, now_ms=1_700_000_000_000, **kw):
    fs = FaultyFileSystem(real_fsync=False)
    epochs, producers = LeaderEpochCache(fs, directory), ProducerStateManager(fs, directory)
    loaded = LogLoader(fs, directory, config or LogConfig(), epochs, producers).load(now_ms=now_ms, **kw)
    return loaded, epochs, producers


def close(segments):
    for s in segments:
        s.close()


def crash(lg):
    """Stop without a clean shutdown: data flushed, files closed, no marker, no final snapshot."""
    lg.flush()
    close(lg.segments)


def pbatch(seq, pid, txn=False):
    return batch(1, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=txn)


def test_empty_directory_gets_its_first_segment_at_the_log_start_offset(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    loaded, epochs, producers = load(str(d), log_start_offset=42, high_watermark=50, clean=True, now_ms=5)
    assert [s.base_offset for s in loaded.segments] == [42]
    assert (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point, loaded.high_watermark) == (
        42,
        42,
        42,
        42,
    )
    assert loaded.created_segment and loaded.segments[0].created_ms == 5
    assert os.path.exists(d / "00000000000000000042.log")
    assert epochs.entries == [] and producers.producers == {}
    close(loaded.segments)


def test_leftovers_of_interrupted_work_are_removed(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    for _ in range(3):
        lg.append(batch(1, ts=clock.ms))
    m.shutdown()
    leftovers = [
        "leader-epoch-checkpoint.tmp",
        "00000000000000000000.log.deleted",
        "00000000000000000000.index.deleted",
        "00000000000000000007.log.cleaned",
        "00000000000000000009.index",  # an index without its log
        "00000000000000000009.timeindex",
    ]
    for name in leftovers:
        open(os.path.join(lg.dir, name), "wb").write(b"x" * 20)
    loaded, _, _ = load(lg.dir, clean=True)
    assert not set(leftovers) & set(os.listdir(lg.dir))
    assert [s.base_offset for s in loaded.segments] == [0] and loaded.log_end_offset == 3
    assert not loaded.created_segment
    close(loaded.segments)


def test_recovery_cuts_a_cut_segment_and_rebuilds_the_epoch_cache_from_batches(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    for epoch, n in [(1, 2), (1, 1), (2, 3), (3, 1)]:
        lg.append(batch(n, ts=clock.ms), leader_epoch=epoch)
    crash(lg)
    seg = lg.segments[0].log_path
    last = list(iter_batches(open(seg, "rb").read()))[-1]
    os.truncate(seg, last.position + last.size - 1)  # the last batch (epoch 3, offset 6) loses its last byte
    os.remove(os.path.join(lg.dir, "leader-epoch-checkpoint"))  # the cache can only come from batch headers
    loaded, epochs, _ = load(lg.dir, recovery_point=0, high_watermark=7)
    assert (loaded.log_end_offset, loaded.recovery_point, loaded.high_watermark) == (6, 6, 6)
    assert os.path.getsize(seg) == last.position
    assert epochs.entries == [(1, 0), (2, 3)]
    assert read_epochs(epochs.fs, epochs.path) == [(1, 0), (2, 3)]  # made durable
    assert loaded.segments[0].rebuilt_index
    close(loaded.segments)


def _three_segments_with_a_flipped_byte_in_the_first(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=700))
    for _ in range(9):
        lg.append(batch(1, size=200, ts=clock.ms))
    crash(lg)
    assert [s.base_offset for s in lg.segments] == [0, 3, 6]
    with open(lg.segments[0].log_path, "r+b") as f:  # inside the 2nd batch: its CRC no longer matches
        f.seek(300)
        b = f.read(1)
        f.seek(300)
        f.write(bytes([b[0] ^ 0xFF]))
    return lg


def test_recovery_checks_only_from_the_segment_holding_the_recovery_point(make_mgr, clock):
    lg = _three_segments_with_a_flipped_byte_in_the_first(make_mgr, clock)
    loaded, _, _ = load(lg.dir, config=LogConfig(segment_bytes=700), recovery_point=7)
    assert loaded.log_end_offset == 9 and [s.base_offset for s in loaded.segments] == [0, 3, 6]
    assert [s.rebuilt_index for s in loaded.segments] == [False, False, True]
    close(loaded.segments)


def test_recovery_from_zero_cuts_at_the_corrupt_batch_and_deletes_later_segments(make_mgr, clock):
    lg = _three_segments_with_a_flipped_byte_in_the_first(make_mgr, clock)
    loaded, _, _ = load(lg.dir, config=LogConfig(segment_bytes=700), recovery_point=0)
    assert loaded.log_end_offset == 1 and [s.base_offset for s in loaded.segments] == [0]
    assert sorted(n for n in os.listdir(lg.dir) if n.endswith(".log")) == ["00000000000000000000.log"]
    close(loaded.segments)


def test_producer_state_comes_from_the_snapshot_then_a_replay(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=300))
    lg.append(pbatch(0, pid=1))
    lg.append(pbatch(1, pid=1))
    lg.roll()  # snapshot at offset 2 holds producer 1
    lg.append(pbatch(0, pid=2, txn=True))  # 2
    lg.append(
        build_control_batch(CONTROL_COMMIT, producer_id=2, producer_epoch=0, timestamp=clock.ms), origin=COORDINATOR
    )  # 3
    lg.append(pbatch(0, pid=3, txn=True))  # 4: left open
    lg.append(pbatch(2, pid=1))  # 5
    crash(lg)
    # the batches of producer 1 before offset 2 are gone: only the snapshot knows it started at 0
    first = lg.segments[0]
    for p in (first.log_path, first.index_path, first.timeindex_path):
        os.remove(p)
    loaded, _, producers = load(lg.dir, config=LogConfig(segment_bytes=300), log_start_offset=2)
    assert loaded.log_start_offset == 2 and loaded.log_end_offset == 6
    assert producers.producers[1].batches[0][:2] == (0, 0)  # from the snapshot
    assert producers.producers[1].last_seq == 2 and producers.producers[1].last_offset == 5  # replayed
    assert producers.producers[2].txn_first_offset == -1  # committed by the replayed marker
    assert producers.first_unstable_offset() == 2  # the commit at 3 is above the high watermark (2)
    producers.on_high_watermark_updated(6)
    assert producers.first_unstable_offset() == 4
    close(loaded.segments)


def test_rebuild_below_a_snapshot_drops_it_and_replays_from_the_log_start(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=300))
    for s in range(6):
        lg.append(pbatch(s, pid=1))
    assert lg.producer_state.snapshot_offsets()  # rolls took snapshots
    snaps = lg.producer_state.snapshot_offsets()
    fresh = ProducerStateManager(lg.fs, lg.dir)
    rebuild_producer_state(fresh, lg.segments, 0, snaps[0] - 1)
    assert fresh.snapshot_offsets() == []  # every snapshot was above the target
    assert fresh.producers[1].last_seq == snaps[0] - 2 and fresh.producers[1].last_offset == snaps[0] - 2


def test_a_checkpoint_with_a_malformed_line_is_logged_and_ignored_as_a_malformed_file(make_mgr, clock, caplog):
    """A line that is not its fields (three numbers where an epoch entry has two, a word for a number, a missing
    offset) makes the whole checkpoint malformed, as a wrong count does. It raised instead: a leader epoch entry of
    three numbers was loaded and broke the next append; a bad line elsewhere failed the load. A malformed
    leader-epoch checkpoint is then rebuilt from the batches (test_epoch_cache_durability.py)."""
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(2, ts=clock.ms), leader_epoch=1)
    m.shutdown()
    expected = [(1, 0)]
    for epoch, body in ((2, "0\n1\n1 0 5\n"), (3, "0\n1\none 0\n")):
        with open(os.path.join(lg.dir, "leader-epoch-checkpoint"), "w") as f:
            f.write(body)
        m = make_mgr()
        lg2 = m.get_log("t", 0)
        assert lg2.epoch_cache.entries == expected
        lg2.append(batch(1, ts=clock.ms), leader_epoch=epoch)
        expected.append((epoch, lg2.log_end_offset - 1))
        assert lg2.epoch_cache.entries == expected
        m.shutdown()
    assert caplog.text.count("ignoring malformed leader epoch checkpoint") == 2
    with open(os.path.join(os.path.dirname(lg.dir), "recovery-point-offset-checkpoint"), "w") as f:
        f.write("0\n1\nt 0\n")
    assert make_mgr().get_log("t", 0).log_end_offset == 4
    assert "ignoring malformed checkpoint" in caplog.text
