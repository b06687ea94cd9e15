import errno
import logging
import os
import random

import pytest
from support.batches import batch

from odradek.protocol.records import decode_any, iter_batches
from odradek.storage import FaultyFileSystem, KafkaStorageError, LogConfig, LogManager


def _reload(mgr_dirs, fs, clock, config=None):
    m = LogManager(mgr_dirs, config or LogConfig(), fs=fs, clock=clock)
    m.load()
    return m


def _seg0(lg):
    return os.path.join(lg.dir, "00000000000000000000.log")


def _five_batches(make_mgr, clock, **cfg):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(index_interval_bytes=1, **cfg))
    ends = []
    for i in range(5):
        lg.append(batch(i + 1, size=100 + 37 * i, ts=clock.ms + i))
        ends.append((lg.active_segment.size, lg.log_end_offset))
    lg.flush()
    return m, lg, ends


def test_recovery_from_every_cut_point(make_mgr, tmp_path, clock):
    m, lg, ends = _five_batches(make_mgr, clock)
    path = _seg0(lg)
    original = open(path, "rb").read()
    for seg in lg.segments:
        seg.close()
    total = len(original)
    fs = FaultyFileSystem(real_fsync=False)
    for cut in range(total + 1):
        with open(path, "wb") as f:
            f.write(original[:cut])
        # no clean-shutdown marker and recovery point 0: everything is revalidated
        for name in ("recovery-point-offset-checkpoint",):
            p = tmp_path / "d1" / name
            if p.exists():
                p.unlink()
        m2 = _reload(m.log_dirs, fs, clock)
        lg2 = m2.get_log("t", 0)
        expected_bytes, expected_leo = 0, 0
        for size, leo in ends:
            if size <= cut:
                expected_bytes, expected_leo = size, leo
        assert lg2.log_end_offset == expected_leo, cut
        assert lg2.size_bytes == expected_bytes
        assert os.path.getsize(path) == expected_bytes
        data = lg2.read_bytes(0, 1 << 20) if expected_leo else b""
        assert data == original[:expected_bytes]
        for seg in lg2.segments:
            seg.close()


@pytest.mark.parametrize("garbage", ["zeros", "random", "partial-header"])
def test_garbage_tail_removed(make_mgr, clock, garbage, caplog):
    m, lg, ends = _five_batches(make_mgr, clock)
    path = _seg0(lg)
    good = open(path, "rb").read()
    rnd = random.Random(7)
    tail = {
        "zeros": b"\0" * 5000,
        "random": bytes(rnd.getrandbits(8) for _ in range(3000)),
        "partial-header": good[:40],
    }[garbage]
    with open(path, "ab") as f:
        f.write(tail)
    for seg in lg.segments:
        seg.close()
    caplog.set_level(logging.INFO, logger="odradek.storage")
    m2 = _reload(m.log_dirs, FaultyFileSystem(real_fsync=False), clock)
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset == ends[-1][1]
    assert open(path, "rb").read() == good
    assert f"truncated {len(tail)} bytes" in caplog.text
    lg2.append(batch(1))
    assert [r.offset for r in decode_any(lg2.read_bytes(0, 1 << 20))][-1] == ends[-1][1]


def test_corrupt_batch_in_middle_truncates_and_drops_later_segments(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=700))
    for _i in range(9):
        lg.append(batch(1, size=200, ts=clock.ms))
    lg.flush()
    assert lg.segment_count == 3
    second = lg.segments[1]
    positions = [h.position for h in iter_batches(open(second.log_path, "rb").read())]
    with open(second.log_path, "r+b") as f:  # flip a byte inside the 2nd batch of segment 2
        f.seek(positions[1] + 100)
        b = f.read(1)
        f.seek(positions[1] + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    dirs = m.log_dirs
    for s in lg.segments:
        s.close()
    os.remove(os.path.join(dirs[0], "recovery-point-offset-checkpoint"))
    m2 = _reload(dirs, FaultyFileSystem(real_fsync=False), clock)
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset == 4 and lg2.segment_count == 2
    assert not os.path.exists(os.path.join(lg2.dir, "00000000000000000006.log"))


@pytest.mark.parametrize("damage", ["delete", "garbage", "zeros", "truncate"])
def test_index_rebuilt_after_clean_shutdown(make_mgr, clock, damage):
    m = make_mgr()
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=150)
    lg = m.create_log("t", 0, cfg)
    for i in range(30):
        lg.append(batch(2, size=120 + i, ts=clock.ms + 3 * i))
    lg.high_watermark = lg.log_end_offset
    probes = list(range(0, 60, 3))
    reads = [lg.read_bytes(o, 400) for o in probes]
    times = [lg.offset_for_timestamp(clock.ms + d) for d in range(0, 100, 5)]
    entries = [(s.offset_index.entries(), s.time_index.entries()) for s in lg.segments[:-1]]
    m.shutdown()
    seg_dir = lg.dir
    rnd = random.Random(3)
    for name in os.listdir(seg_dir):
        if name.endswith((".index", ".timeindex")):
            p = os.path.join(seg_dir, name)
            if damage == "delete":
                os.remove(p)
            elif damage == "garbage":
                open(p, "wb").write(bytes(rnd.getrandbits(8) for _ in range(96)))
            elif damage == "zeros":
                open(p, "wb").write(b"\0" * 96)
            else:
                os.truncate(p, max(0, os.path.getsize(p) - 5))
    m2 = _reload(m.log_dirs, FaultyFileSystem(real_fsync=False), clock, cfg)
    lg2 = m2.get_log("t", 0)
    assert [lg2.read_bytes(o, 400) for o in probes] == reads
    assert [lg2.offset_for_timestamp(clock.ms + d) for d in range(0, 100, 5)] == times
    if damage in ("delete", "garbage"):
        assert [(s.offset_index.entries(), s.time_index.entries()) for s in lg2.segments[:-1]] == entries
    m2.shutdown()


def test_write_failure_takes_dir_offline_other_dir_serves(make_mgr, fs, clock, caplog):
    m = make_mgr(dirs=("d1", "d2"))
    a = m.create_log("a", 0, LogConfig())
    b = m.create_log("b", 0, LogConfig())
    assert a.dir_state is not b.dir_state
    a.append(batch(2))
    a.flush()
    flushed = a.read_bytes(0, 1 << 20)
    a.append(batch(1))  # acknowledged without flush: may be lost, must not corrupt
    fs.fail("write", errno.EIO, path=os.path.basename(a.dir))
    with pytest.raises(KafkaStorageError):
        a.append(batch(1))
    assert m.offline_dirs == {a.dir_state.path}
    assert "offline" in caplog.text and "errno 5" in caplog.text and a.dir_state.path in caplog.text
    for op in (
        lambda: a.read(0, 100),
        lambda: a.append(batch(1)),
        lambda: a.flush(),
        lambda: a.offset_for_timestamp(0),
        lambda: a.delete_records(0),
    ):
        with pytest.raises(KafkaStorageError):
            op()
    b.append(batch(1))
    assert b.read(0, 100).size > 0
    m.shutdown()  # must not raise; offline dir gets no clean marker
    assert not os.path.exists(os.path.join(a.dir_state.path, ".kafka_cleanshutdown"))
    assert os.path.exists(os.path.join(b.dir_state.path, ".kafka_cleanshutdown"))
    fs.crash()
    m2 = _reload(m.log_dirs, FaultyFileSystem(real_fsync=False), clock)
    a2 = m2.get_log("a", 0)
    assert a2.read_bytes(0, 1 << 20)[: len(flushed)] == flushed
    assert a2.log_end_offset in (2, 3)
    assert m2.get_log("b", 0).log_end_offset == 1


@pytest.mark.parametrize("op", ["fsync", "enospc"])
def test_fsync_failure_and_enospc(make_mgr, fs, clock, op):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(3))
    lg.flush()
    before = lg.read_bytes(0, 1 << 20)
    lg.append(batch(2))
    if op == "fsync":
        fs.fail("fsync", errno.EIO)
        with pytest.raises(KafkaStorageError):
            lg.flush()
        assert lg.recovery_point == 3
    else:
        fs.fail("write", errno.ENOSPC, partial=30)
        with pytest.raises(KafkaStorageError):
            lg.append(batch(2, size=400))
    assert m.offline_dirs
    with pytest.raises(KafkaStorageError):
        lg.read(0, 10)
    for s in lg.segments:
        s.close()
    fs.crash()
    m2 = _reload(m.log_dirs, FaultyFileSystem(real_fsync=False), clock)
    lg2 = m2.get_log("t", 0)
    assert lg2.read_bytes(0, 1 << 20)[: len(before)] == before
    assert lg2.log_end_offset in (3, 5)
    lg2.append(batch(1))


def test_failure_during_load_marks_dir_offline(tmp_path, clock):
    fs = FaultyFileSystem(real_fsync=False)
    fs.fail("listdir", errno.EIO, path="bad")
    m = LogManager([str(tmp_path / "bad"), str(tmp_path / "good")], LogConfig(), fs=fs, clock=clock)
    m.load()
    assert m.offline_dirs == {str(tmp_path / "bad")}
    lg = m.create_log("t", 0, LogConfig())
    assert lg.dir.startswith(str(tmp_path / "good"))


def test_unflushed_data_lost_on_power_failure_is_only_unflushed(make_mgr, fs, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=1000))
    for _ in range(8):
        lg.append(batch(1, size=300))
    lg.flush()
    flushed = lg.read_bytes(0, 1 << 20)
    m.write_checkpoints()
    for _ in range(5):
        lg.append(batch(1, size=300))
    for s in lg.segments:
        s.close()
    fs.crash()
    m2 = _reload(m.log_dirs, FaultyFileSystem(real_fsync=False), clock)
    lg2 = m2.get_log("t", 0)
    assert lg2.log_end_offset >= 8
    assert lg2.read_bytes(0, 1 << 20)[: len(flushed)] == flushed
