"""The ``.lock`` file of each log directory keeps a second broker out (Kafka's
LogManager.lockLogDirs). Before it, two brokers started on one directory both wrote its
segments and checkpoints, and each corrupted the other's log without a word.

The lock is an ``flock`` on an open file, so a second acquisition conflicts even within one
process (several brokers in one test process, the simulator), and closing the descriptor, as
the kernel does when a process dies, releases it. Across processes:
tests/interop/storage/test_log_dir_lock.py."""

from __future__ import annotations

import errno
import os

import pytest

from odradek.storage import FaultyFileSystem, LogConfig, LogDirInUseError, LogDirLocks, LogManager, OSFileSystem
from odradek.storage.log_dir import LOCK_FILE


def test_a_second_lock_on_a_directory_is_refused_with_a_message_naming_it(tmp_path):
    d = str(tmp_path / "data")
    first = LogDirLocks.acquire(OSFileSystem(), [d])
    try:
        with pytest.raises(LogDirInUseError) as e:
            LogDirLocks.acquire(OSFileSystem(), [d])
        assert str(e.value).startswith(f"Failed to acquire lock on file .lock in {d}:")
        assert "another broker" in str(e.value)
        assert first.dirs == [d]
    finally:
        first.release()
    again = LogDirLocks.acquire(OSFileSystem(), [d])  # released at a clean stop: a restart takes it
    again.release()
    assert os.path.isfile(os.path.join(d, LOCK_FILE))  # the file stays, as Kafka's


def test_locks_are_per_directory_and_taken_all_or_none(tmp_path):
    fs = OSFileSystem()
    a, b, c = (str(tmp_path / n) for n in "abc")
    held_b = LogDirLocks.acquire(fs, [b])
    try:
        with pytest.raises(LogDirInUseError, match=f"in {b}:"):
            LogDirLocks.acquire(fs, [a, b, c])
        other = LogDirLocks.acquire(fs, [a, c])  # `a` was released when `b` was refused; `c` never taken
        other.release()
    finally:
        held_b.release()


def test_closing_the_descriptor_releases_the_lock_as_a_killed_process_does(tmp_path):
    """The simulator kills a broker by closing every descriptor its disk opened
    (testing/sim/broker.py `SimDisk.close_all`): the restarted incarnation takes the lock."""
    fs = FaultyFileSystem(real_fsync=False)
    d = str(tmp_path / "data")
    LogDirLocks.acquire(fs, [d])  # never released: the process dies
    with pytest.raises(LogDirInUseError):
        LogDirLocks.acquire(fs, [d])
    for fd in list(fs._paths):
        fs.close(fd)
    LogDirLocks.acquire(fs, [d]).release()


def test_an_io_error_while_locking_is_raised_and_nothing_stays_locked(tmp_path):
    fs = FaultyFileSystem(real_fsync=False)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    fs.fail("lock", errno.EIO, path=b)
    with pytest.raises(OSError) as e:
        LogDirLocks.acquire(fs, [a, b])
    assert e.value.errno == errno.EIO
    assert not fs._paths  # the .lock of `a` closed again, and the one of `b`
    LogDirLocks.acquire(fs, [a, b]).release()


def test_the_loader_ignores_the_lock_file(tmp_path, clock):
    d = str(tmp_path / "data")
    locks = LogDirLocks.acquire(OSFileSystem(), [d])
    try:
        m = LogManager([d], LogConfig(), clock=clock)
        m.load()
        m.create_log("t", 0, LogConfig())
        m.shutdown()
        m2 = LogManager([d], LogConfig(), clock=clock)
        m2.load()
        assert [(lg.topic, lg.partition) for lg in m2.all_logs()] == [("t", 0)]
        assert not m2.offline_dirs
        m2.shutdown()
        assert os.path.isfile(os.path.join(d, LOCK_FILE))
    finally:
        locks.release()
