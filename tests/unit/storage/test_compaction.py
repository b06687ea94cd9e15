import errno
import os

import pytest

from odradek.protocol import records as R
from odradek.protocol.records import Record, build_batch, decode_any, iter_batches
from odradek.storage import FaultyFileSystem, LogConfig, LogManager

CFG = LogConfig(
    segment_bytes=1000,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=1000,
    file_delete_delay_ms=0,
)


def kv(key, value, ts, codec=R.NONE, **kw):
    return build_batch([Record(-1, ts, key, value)], compression=codec, **kw)


def fill(lg, clock, n=40, keys=5, codec=R.NONE):
    for i in range(n):
        lg.append(kv(b"k%d" % (i % keys), b"v%d-" % i + b"x" * 80, clock.ms + i, codec))
    lg.high_watermark = lg.log_end_offset


def contents(lg):
    return [(r.offset, r.key, r.value) for r in decode_any(lg.read_bytes(lg.log_start_offset, 1 << 24))]


def latest_per_key(recs, below):
    last = {}
    for off, k, _v in recs:
        if off < below:
            last[k] = off
    return last


@pytest.mark.parametrize("codec", [R.NONE, R.GZIP, R.ZSTD])
def test_latest_per_key_kept_offsets_unchanged(make_mgr, clock, codec):
    m = make_mgr()
    lg = m.create_log("t", 0, CFG)
    fill(lg, clock, codec=codec)
    before = contents(lg)
    active_base = lg.active_segment.base_offset
    active_bytes = open(lg.active_segment.log_path, "rb").read()
    assert m.clean_once() == 1
    after = contents(lg)
    last = latest_per_key(before, active_base)
    expected = [r for r in before if r[0] >= active_base or last.get(r[1]) == r[0]]
    assert after == expected
    assert open(lg.active_segment.log_path, "rb").read() == active_bytes  # untouched
    assert lg.cleaner_checkpoint == active_base
    for h in iter_batches(lg.read_bytes(0, 1 << 24)):
        assert h.compression == codec
    # nothing new to clean
    assert m.clean_once() == 0
    # reload: same content, checkpoint persisted
    m.shutdown()
    m2 = LogManager(m.log_dirs, LogConfig(), fs=m.fs, clock=clock, topic_config=lambda t: CFG)
    m2.load()
    lg2 = m2.get_log("t", 0)
    assert contents(lg2) == after and lg2.cleaner_checkpoint == active_base
    m2.shutdown()


def test_dirty_ratio_respected(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=1000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.9))
    fill(lg, clock)
    assert m.clean_once() == 1  # all dirty: ratio 1.0
    for i in range(6):  # a little new dirty data, far below 90%
        lg.append(kv(b"k1", b"new%d" % i + b"y" * 80, clock.ms))
    lg.high_watermark = lg.log_end_offset
    assert m.clean_once() == 0
    lg.update_config(LogConfig(segment_bytes=1000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1))
    assert m.clean_once() == 1


def test_min_compaction_lag(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log(
        "t",
        0,
        LogConfig(
            segment_bytes=1000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, min_compaction_lag_ms=60_000
        ),
    )
    fill(lg, clock)
    assert m.clean_once() == 0
    clock.advance(61_000)
    assert m.clean_once() == 1


def test_tombstones_dropped_after_delete_retention(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, CFG)
    fill(lg, clock, n=20)
    lg.append(kv(b"k1", None, clock.ms))  # tombstone for k1
    for _i in range(12):
        lg.append(kv(b"other", b"z" * 90, clock.ms))
    lg.high_watermark = lg.log_end_offset
    assert m.clean_once() == 1
    recs = contents(lg)
    assert [r for r in recs if r[1] == b"k1"] == [(20, b"k1", None)]  # tombstone kept for now
    clock.advance(500)
    m.clean_once()
    assert any(r[1] == b"k1" for r in contents(lg))
    clock.advance(600)  # past delete.retention.ms since the first cleaning
    assert m.clean_once() == 1
    assert not any(r[1] == b"k1" for r in contents(lg))


def test_producer_last_batch_kept_empty(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, CFG)
    lg.append(kv(b"a", b"1" * 100, clock.ms, producer_id=9, producer_epoch=0, base_sequence=0))
    for _ in range(12):
        lg.append(kv(b"a", b"2" * 100, clock.ms))
    lg.high_watermark = lg.log_end_offset
    m.clean_once()
    hs = list(iter_batches(lg.read_bytes(0, 1 << 24)))
    assert hs[0].producer_id == 9 and hs[0].record_count == 0 and hs[0].base_offset == 0
    # sequence state still continues
    i = lg.append(kv(b"b", b"x", clock.ms, producer_id=9, producer_epoch=0, base_sequence=1))
    assert not i.duplicate


@pytest.mark.parametrize("step", ["cleaned", "swap", "deleted", "final"])
def test_crash_during_swap_then_reload_is_consistent(tmp_path, clock, step):
    fs = FaultyFileSystem(real_fsync=False)
    m = LogManager([str(tmp_path / "d")], CFG, fs=fs, clock=clock)
    m.load()
    lg = m.create_log("t", 0, CFG)
    fill(lg, clock)
    lg.flush()
    m.write_checkpoints()
    before = contents(lg)
    active_base = lg.active_segment.base_offset
    last = latest_per_key(before, active_base)
    compacted = [r for r in before if r[0] >= active_base or last.get(r[1]) == r[0]]
    if step == "cleaned":  # fail renaming .cleaned -> .swap
        fs.fail("rename", errno.EIO, path=".log.swap")
    elif step == "swap":  # fail renaming the old segment to .deleted (swap exists)
        fs.fail("rename", errno.EIO, path=".log.deleted")
    elif step == "deleted":  # old renamed to .deleted, fail .swap -> final
        fs.fail("rename", errno.EIO, path=".log.swap", after=1)
    else:  # fail after the swap of the first group completed
        fs.fail("rename", errno.EIO, path=".log.deleted", after=1)
    m.clean_once()
    assert m.offline_dirs
    if step == "cleaned":  # the cleaner removes its partial output; a crash would leave it
        with open(os.path.join(lg.dir, "00000000000000000000.log.cleaned"), "wb") as f:
            f.write(b"partial")
    left = os.listdir(lg.dir)
    marker = {"cleaned": ".log.cleaned", "swap": ".log.swap", "deleted": ".log.swap", "final": ".log.swap"}[step]
    assert any(n.endswith(marker) for n in left), left
    if step == "deleted":
        assert any(n.endswith(".log.deleted") for n in left)
    for s in lg.segments:
        s.close()
    fs.clear()
    m2 = LogManager(m.log_dirs, CFG, fs=fs, clock=clock)
    m2.load()
    lg2 = m2.get_log("t", 0)
    got = contents(lg2)
    assert got in (before, compacted) or (set(compacted) <= set(got) <= set(before))
    # latest value per key is always there, offsets strictly increasing
    assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
    assert latest_per_key(got, 10**9) == latest_per_key(before, 10**9)
    names = os.listdir(lg2.dir)
    assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names)
    m2.clean_once()
    assert contents(lg2) == compacted
    m2.shutdown()


def test_compacted_topic_rejects_records_without_key(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, CFG)
    lg.append(kv(b"k", b"v", clock.ms))
    with pytest.raises(R.InvalidRecordError, match="without key"):
        lg.append(
            build_batch(
                [Record(-1, clock.ms, b"k2", b"ok"), Record(-1, clock.ms, None, b"keyless")], compression=R.GZIP
            )
        )
    assert lg.log_end_offset == 1  # nothing of the rejected batch was appended


def test_key_map_bounded_cleans_in_several_passes(make_mgr, clock):
    """log.cleaner.dedupe.buffer.size: whole dirty segments are mapped while they fit; the
    rest is cleaned by later passes, and the end result is the same."""
    m = make_mgr()
    lg = m.create_log("t", 0, CFG)
    for i in range(60):  # distinct keys per segment, so every segment adds keys to the map
        lg.append(kv(b"k%d" % (i // 2 if i < 40 else i % 7), b"v%d-" % i + b"x" * 80, clock.ms + i))
    lg.high_watermark = lg.log_end_offset
    before = contents(lg)
    active_base = lg.active_segment.base_offset
    bases = [s.base_offset for s in lg.segments]
    assert len(bases) >= 6
    per_seg = bases[1] - bases[0]  # records per segment (one record per batch)
    m.cleaner_dedupe_buffer_size = 24 * per_seg  # the map holds about one segment's keys
    m.cleaner_io_buffer_load_factor = 1.0
    assert m.cleaner_max_keys == per_seg
    passes = 0
    while lg.cleaner_checkpoint < active_base:
        assert m.clean_once(force=True) == 1
        passes += 1
        assert lg.cleaner_checkpoint in bases  # each pass ends at a segment boundary
        assert passes < 20
    assert passes >= 2
    last = latest_per_key(before, active_base)
    assert contents(lg) == [r for r in before if r[0] >= active_base or last.get(r[1]) == r[0]]


def test_key_map_smaller_than_one_segment_still_progresses(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, CFG)
    fill(lg, clock, n=40, keys=40)
    m.cleaner_dedupe_buffer_size = 24  # room for one key
    m.cleaner_io_buffer_load_factor = 1.0
    start = lg.cleaner_checkpoint
    assert m.clean_once(force=True) == 1
    assert lg.cleaner_checkpoint == lg.segments[1].base_offset > start  # the first dirty segment, whole
