"""The bounded cache of open segment files (file_cache.py) and indexes that hold no descriptor:
eviction, second chance, pinning, reopening, reads of cold segments, regions that outlive the
cache's hold on their file, threads that do not evict, the flush of an evicted segment."""

import os
import threading

from support.batches import batch

from odradek.protocol.records import decode_any
from odradek.storage import LogConfig
from odradek.storage.file_cache import default_capacity, raise_open_file_limit


def open_files_under(path) -> list[str]:
    """The files under ``path`` this process holds open (from /proc/self/fd)."""
    root = str(path)
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(root):
            out.append(target)
    return out


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for r in decode_any(data)]


def test_descriptors_stay_under_the_capacity_while_many_logs_are_written(make_mgr, tmp_path):
    m = make_mgr()
    cache = m.fs.file_cache
    cache.capacity = 8
    logs = [m.create_log("t", p, LogConfig()) for p in range(40)]
    for _ in range(3):
        for lg in logs:
            lg.append(batch(2))
            files = open_files_under(tmp_path)
            assert len(files) <= 8, files
            assert all(f.endswith(".log") for f in files), files  # no index holds a descriptor
    assert len(cache) <= 8 and cache.open_files <= 8
    assert cache.evictions > 0
    for lg in logs:  # every log reads back whole, its file reopened as needed
        assert offsets_of(lg.read_bytes(0, 1 << 20)) == list(range(6))
        assert len(open_files_under(tmp_path)) <= 8


def test_a_segment_used_since_the_last_pass_gets_a_second_chance(make_mgr):
    m = make_mgr()
    cache = m.fs.file_cache
    cache.capacity = 3
    a, b, c = (m.create_log("t", p, LogConfig()) for p in range(3))
    for lg in (a, b, c):
        lg.append(batch(1))
    m.create_log("t", 3, LogConfig()).append(batch(1))  # first pass: every one used, the oldest goes
    a.append(batch(1))  # a reopens
    b.high_watermark = b.log_end_offset  # replicated: read from the file, not from the last append's bytes
    b.read_bytes(0, 100)  # b is used: it survives the next pass
    m.create_log("t", 4, LogConfig()).append(batch(1))
    assert b.active_segment._file is not None
    assert len(cache) <= 3


def test_a_pinned_segment_is_not_closed(make_mgr):
    m = make_mgr()
    cache = m.fs.file_cache
    cache.capacity = 2
    first = m.create_log("t", 0, LogConfig())
    first.append(batch(1))
    seg = first.active_segment
    seg.pins += 1  # as the flush thread and the cleaner do while they use it
    try:
        for p in range(1, 10):
            m.create_log("t", p, LogConfig()).append(batch(1))
        assert seg._file is not None and seg in cache._ring
    finally:
        seg.pins -= 1
    for p in range(10, 14):
        m.create_log("t", p, LogConfig()).append(batch(1))
    assert seg._file is None  # unpinned, cold: closed


def test_reads_of_cold_rolled_segments_after_their_files_were_closed(make_mgr, tmp_path, clock):
    m = make_mgr()
    cache = m.fs.file_cache
    lg = m.create_log("t", 0, LogConfig(segment_bytes=1000, index_interval_bytes=100))
    for _ in range(12):
        lg.append(batch(2, size=300, ts=clock.ms))
    assert lg.segment_count == 4
    for seg in lg.segments:
        seg.release_file()
    assert open_files_under(tmp_path) == [] and cache.open_files == 0
    # from the start, from the middle of an old segment (the offset index, in memory), by time
    assert offsets_of(lg.read_bytes(0, 1 << 20)) == list(range(24))
    assert offsets_of(lg.read_bytes(9, 1 << 20))[0] == 8
    for seg in lg.segments:
        seg.release_file()
    assert lg.offset_for_timestamp(clock.ms)[0] == 0
    assert lg.max_timestamp_offset()[0] >= 0
    assert all(f.endswith(".log") for f in open_files_under(tmp_path))


def test_index_lookups_hold_no_descriptor(make_mgr, tmp_path, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=2000, index_interval_bytes=100))
    for _ in range(12):
        lg.append(batch(2, size=300, ts=clock.ms))
    old = lg.segments[0]
    assert len(old.offset_index) > 1
    assert not [f for f in open_files_under(tmp_path) if not f.endswith(".log")]
    old.release_file()
    off, pos = old.offset_index.lookup(old.base_offset + 5)
    assert pos > 0 and old.base_offset <= off <= old.base_offset + 5
    assert old.translate(old.base_offset + 5, old.size) is not None  # reads the .log: reopened
    assert not [f for f in open_files_under(tmp_path) if not f.endswith(".log")]
    # the index file holds what memory holds (written at roll)
    entries = old.offset_index.entries()
    m.shutdown()
    m2 = make_mgr()  # a clean start reads the index files (an unclean one would rebuild them)
    assert m2.get_log("t", 0).segments[0].offset_index.entries() == entries


def test_a_region_keeps_its_file_open_after_the_cache_closed_it(make_mgr, tmp_path):
    m = make_mgr()
    cache = m.fs.file_cache
    cache.capacity = 2
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(3))
    lg.high_watermark = lg.log_end_offset  # replicated: a file region, not the last append's bytes
    region = lg.read(0, 1 << 20).regions[0]
    expected = os.pread(region.fd, region.length, region.position)
    for p in range(1, 8):  # the cache lets t-0's file go, and new files are opened
        m.create_log("t", p, LogConfig()).append(batch(1))
    assert lg.active_segment._file is None
    # the descriptor in the region was not closed nor reused: same bytes
    assert os.pread(region.fd, region.length, region.position) == expected
    fd = region.fd
    before = cache.open_files
    del region
    assert cache.open_files == before - 1  # closed once the last reader let it go
    assert not os.path.exists(f"/proc/self/fd/{fd}") or not os.readlink(f"/proc/self/fd/{fd}").endswith(
        "00000000000000000000.log"
    )


def test_other_threads_open_files_but_do_not_close_others(make_mgr):
    m = make_mgr()
    cache = m.fs.file_cache
    cache.capacity = 2
    logs = [m.create_log("t", p, LogConfig()) for p in range(6)]
    for lg in logs:
        lg.append(batch(1))
    for lg in logs:
        lg.active_segment.release_file()
    held = logs[0].active_segment.file  # the owner thread holds one open

    def in_a_thread():
        for lg in logs[1:]:
            lg.active_segment.flush()  # reopens to fsync

    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert len(cache) == 6  # over the capacity: only the owner closes
    logs[0].append(batch(1))  # the owner's next open? none needed: still open
    m.create_log("t", 9, LogConfig()).append(batch(1))  # an open by the owner brings it back under
    assert len(cache) <= 2
    assert held.fd >= 0


def test_flush_of_a_segment_whose_file_was_closed_makes_its_data_durable(make_mgr, fs):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(4))
    lg.active_segment.release_file()  # written, not yet fsynced, descriptor closed
    lg.flush()
    path = lg.active_segment.log_path
    size = os.path.getsize(path)
    fs.crash()  # drops whatever was never fsynced
    assert os.path.getsize(path) == size > 0


def test_load_leaves_no_file_open(make_mgr, tmp_path):
    m = make_mgr()
    for p in range(5):
        m.create_log("t", p, LogConfig()).append(batch(2))
    m.shutdown()
    assert open_files_under(tmp_path) == []
    m2 = make_mgr()
    assert open_files_under(tmp_path) == []  # recovery reads each log, then lets its files go
    assert offsets_of(m2.get_log("t", 3).read_bytes(0, 1 << 20)) == [0, 1]


def test_the_open_file_limit_is_raised_to_the_hard_limit():
    import resource

    before, now = raise_open_file_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert now == soft and before <= now
    assert hard == resource.RLIM_INFINITY or soft == hard
    assert default_capacity(20000) == 10000 and default_capacity(10) == 16


def test_room_for_new_partitions_counts_free_descriptors_against_what_the_cache_may_add(fs):
    import resource

    from odradek.storage.file_cache import CREATE_RESERVE, FileCache

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 200, hard))
    try:
        cache = FileCache(fs, capacity=1000)
        problem = cache.room_for(500)  # up to 500 more files + the reserve: more than ~200 free
        assert problem is not None and "log.open.segments.max" in problem and "500 new partition" in problem
        assert cache.room_for(100) is None  # 100 + 64 fit
        cache.capacity = 50  # the cache closes cold files past 50: at most 50 more, whatever the count
        assert cache.room_for(100_000) is None
        cache.capacity = 200 - CREATE_RESERVE + 50
        assert cache.room_for(100_000) is not None
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_files_whose_descriptors_died_with_their_process_close_nothing_later(make_mgr, fs, tmp_path):
    """The simulator's process death closes every descriptor behind the cache's back; the number
    is reused by the next incarnation, which the old segment's file must not close."""
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(1))
    seg = lg.active_segment
    f = seg.file
    os.close(f.fd)  # the process died
    fs.forget_open_files()
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)  # the next incarnation gets that number
    try:
        assert other == f.fd
        del f
        assert seg._file is None
        import gc

        gc.collect()
        os.fstat(other)  # still open
        assert fs.file_cache is not None and len(fs.file_cache) == 0  # a new cache
    finally:
        os.close(other)


def test_running_out_of_descriptors_fails_the_request_not_the_directory(make_mgr, fs, tmp_path):
    import errno

    import pytest

    from odradek.storage import KafkaStorageError

    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(2))
    lg.active_segment.release_file()
    fs.fail("open", errno.EMFILE, path="t-0")  # reopening the segment file: the process is out
    with pytest.raises(KafkaStorageError, match="out of file descriptors"):
        lg.append(batch(1))
    assert not lg.dir_state.offline
    assert lg.append(batch(1)).first_offset == 2  # nothing was written by the failed one
    assert offsets_of(lg.read_bytes(0, 1 << 20)) == [0, 1, 2]
    # a creation that runs out leaves no directory behind, and the log directory online
    fs.fail("open", errno.EMFILE, path="u-0")
    with pytest.raises(KafkaStorageError):
        m.create_log("u", 0, LogConfig())
    assert not (tmp_path / "d1" / "u-0").exists() and not lg.dir_state.offline
    assert m.get_log("u", 0) is None
    m.create_log("u", 0, LogConfig()).append(batch(1))
