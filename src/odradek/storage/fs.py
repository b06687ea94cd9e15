"""File access behind a small interface, so crashes and I/O failures can be injected in tests.

`OSFileSystem` is a thin layer over raw file descriptors (``os.pwritev``/``os.pread``, no
Python-level buffering). `FaultyFileSystem` runs on the same real files but can fail the
next matching operation with an ``OSError`` (EIO, ENOSPC...), write only part of a buffer
before failing, cut a file at a byte, and simulate a power loss (drop data never fsynced).
"""

from __future__ import annotations

import errno as _errno
import fcntl
import os
import shutil
import struct
import threading
from dataclasses import dataclass

from .file_cache import FileCache

__all__ = ["FileSystem", "OSFileSystem", "FaultyFileSystem"]

_IOV_MAX = 1024
# open-file-description locks (Linux 3.15+); struct flock: l_type, l_whence, l_start, l_len, l_pid
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_WRITE_LOCK_WHOLE_FILE = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)  # 32 bytes, as the kernel reads


class FileSystem:
    """The operations storage uses. Paths are str; files are OS file descriptors (ints).
    ``file_cache``: the segments' open files (file_cache.py), one per file system."""

    _file_cache: FileCache | None = None

    @property
    def file_cache(self) -> FileCache:
        cache = self._file_cache
        if cache is None:
            cache = self._file_cache = FileCache(self)
        return cache

    def forget_open_files(self) -> None:
        """Every descriptor of this file system's segment files was closed behind its back (a
        simulated process death): the next incarnation starts with a new file cache, and the old
        one's files close nothing (file_cache.py `FileCache.abandon`)."""
        if self._file_cache is not None:
            self._file_cache.abandon()
            self._file_cache = None

    def open(self, path: str, *, create: bool = False) -> int:
        raise NotImplementedError

    def close(self, fd: int) -> None:
        raise NotImplementedError

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        raise NotImplementedError

    def pwrite(self, fd: int, data, offset: int) -> None:
        raise NotImplementedError

    def pwritev(self, fd: int, buffers: list, offset: int, size: int | None = None) -> None:
        raise NotImplementedError

    def fsync(self, fd: int) -> None:
        raise NotImplementedError

    def ftruncate(self, fd: int, size: int) -> None:
        raise NotImplementedError

    def try_lock(self, fd: int) -> bool:
        """Lock the open file ``fd`` exclusively, without waiting: False when another open file
        (of this process or another) holds the lock. Closing ``fd``, or the process ending,
        releases it."""
        raise NotImplementedError

    def fsize(self, fd: int) -> int:
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> None:
        raise NotImplementedError

    def remove(self, path: str) -> None:
        raise NotImplementedError

    def rmtree(self, path: str) -> None:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        raise NotImplementedError

    def makedirs(self, path: str) -> None:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def isdir(self, path: str) -> bool:
        raise NotImplementedError

    def getmtime(self, path: str) -> float:
        raise NotImplementedError

    def fsync_dir(self, path: str) -> None:
        raise NotImplementedError

    def read_file(self, path: str) -> bytes:
        fd = self.open(path)
        try:
            return self.pread(fd, self.fsize(fd), 0)
        finally:
            self.close(fd)

    def write_file_atomic(self, path: str, data: bytes, *, sync: bool = True) -> None:
        """Write to ``path.tmp``, fsync, rename over ``path``, fsync the directory."""
        tmp = path + ".tmp"
        fd = self.open(tmp, create=True)
        try:
            self.ftruncate(fd, 0)
            self.pwrite(fd, data, 0)
            if sync:
                self.fsync(fd)
        finally:
            self.close(fd)
        self.rename(tmp, path)
        if sync:
            self.fsync_dir(os.path.dirname(path) or ".")


class OSFileSystem(FileSystem):
    def open(self, path, *, create=False):
        return os.open(path, os.O_RDWR | (os.O_CREAT if create else 0) | getattr(os, "O_CLOEXEC", 0), 0o644)

    def close(self, fd):
        os.close(fd)

    def pread(self, fd, size, offset):
        data = os.pread(fd, size, offset)
        if len(data) < size:  # short reads happen only at EOF for regular files, but be exact
            parts = [data]
            got = len(data)
            while got < size:
                more = os.pread(fd, size - got, offset + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data

    def pwrite(self, fd, data, offset):
        mv = memoryview(data)
        while mv:
            n = os.pwrite(fd, mv, offset)
            mv = mv[n:]
            offset += n

    def pwritev(self, fd, buffers, offset, size=None):
        """Write every byte of ``buffers`` at ``offset`` (``size``: their total, if known)."""
        n = 0
        if size is not None and len(buffers) <= _IOV_MAX:
            n = os.pwritev(fd, buffers, offset)  # nearly always all of it
            if n == size:
                return
        bufs = [memoryview(b) for b in buffers]
        while True:
            # drop fully written buffers, trim a partially written one
            i = 0
            while i < len(bufs) and n >= len(bufs[i]):
                n -= len(bufs[i])
                offset += len(bufs[i])
                i += 1
            bufs = bufs[i:]
            if not bufs:
                return
            if n:
                bufs[0] = bufs[0][n:]
                offset += n
            n = os.pwritev(fd, bufs[:_IOV_MAX], offset)

    def fsync(self, fd):
        os.fsync(fd)

    def ftruncate(self, fd, size):
        os.ftruncate(fd, size)

    def try_lock(self, fd):
        """An ``flock``, and on Linux an open-file-description record lock over the whole file
        (``F_OFD_SETLK``): both belong to the open file, so a second lock conflicts within one
        process too; the record lock also conflicts with the POSIX lock of Java's ``FileLock``,
        which ``flock`` does not on Linux, so that a Kafka broker and this one refuse each
        other's directories too."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if _OFD_SETLK is not None:
            try:
                fcntl.fcntl(fd, _OFD_SETLK, _WRITE_LOCK_WHOLE_FILE)
            except OSError as e:
                if e.errno not in (_errno.EAGAIN, _errno.EACCES, _errno.EINVAL):
                    raise
                if e.errno != _errno.EINVAL:  # (EINVAL: a kernel before 3.15; the flock stands alone)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return False
        return True

    def fsize(self, fd):
        return os.fstat(fd).st_size

    def rename(self, src, dst):
        os.rename(src, dst)

    def remove(self, path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def rmtree(self, path):
        shutil.rmtree(path, ignore_errors=True)

    def listdir(self, path):
        return os.listdir(path)

    def makedirs(self, path):
        os.makedirs(path, exist_ok=True)

    def exists(self, path):
        return os.path.exists(path)

    def isdir(self, path):
        return os.path.isdir(path)

    def getmtime(self, path):
        return os.path.getmtime(path)

    def fsync_dir(self, path):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass
class _Fault:
    op: str
    err: int
    path: str | None
    after: int
    times: int | None
    partial: int | None


class FaultyFileSystem(OSFileSystem):
    """Real files, injectable failures.

    ``fail(op, err, path=..., after=n, times=k)`` makes the (n+1)-th matching call of ``op``
    fail ``k`` times (None: forever). Ops: open, read, write (pwrite/pwritev), fsync,
    truncate, lock, rename, remove, listdir, mkdir. ``path`` is a substring matched against the
    file's path (for rename: source or destination). ``partial=b`` makes a failing write
    first write ``b`` bytes, as a disk filling up does. ``bytes_read`` counts what was read
    from each path (what recovery reads, asserted on by tests).
    """

    def __init__(self, *, real_fsync: bool = True) -> None:
        self.real_fsync = real_fsync  # False: fsync only records what would be durable (fast tests)
        self._faults: list[_Fault] = []
        self._paths: dict[int, str] = {}
        # path -> the descriptors opened on it (a hint: checked against `_paths`, which a
        # simulated process death clears): a rename moves its open files without walking all
        self._fds_of: dict[str, set[int]] = {}
        self._synced: dict[str, int] = {}
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.bytes_read: dict[str, int] = {}

    # -- control
    def fail(
        self,
        op: str,
        err: int = _errno.EIO,
        *,
        path: str | None = None,
        after: int = 0,
        times: int | None = 1,
        partial: int | None = None,
    ) -> None:
        self._faults.append(_Fault(op, err, path, after, times, partial))

    def clear(self) -> None:
        self._faults.clear()

    def cut(self, path: str, at: int) -> None:
        os.truncate(path, at)

    def crash(self) -> None:
        """Power loss: every file written through us loses what was never fsynced."""
        for path, synced in list(self._synced.items()):
            if os.path.exists(path) and os.path.getsize(path) > synced:
                os.truncate(path, synced)

    def _check(self, op: str, *paths: str | None) -> _Fault | None:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            for f in self._faults:
                if f.op != op:
                    continue
                if f.path is not None and not any(p is not None and f.path in p for p in paths):
                    continue
                if f.after > 0:
                    f.after -= 1
                    continue
                if f.times is not None:
                    f.times -= 1
                    if f.times <= 0:
                        self._faults.remove(f)
                return f
        return None

    def _raise(self, f: _Fault, path: str | None) -> None:
        raise OSError(f.err, os.strerror(f.err), path)

    # -- operations
    def open(self, path, *, create=False):
        if f := self._check("open", path):
            self._raise(f, path)
        existed = os.path.exists(path)
        fd = super().open(path, create=create)
        self._paths[fd] = path
        self._fds_of.setdefault(path, set()).add(fd)
        if not existed:
            self._synced.setdefault(path, 0)
        return fd

    def close(self, fd):
        self._unmap(fd, self._paths.pop(fd, None))
        super().close(fd)

    def _unmap(self, fd: int, path: str | None) -> None:
        fds = self._fds_of.get(path) if path is not None else None
        if fds is not None and path is not None:
            fds.discard(fd)
            if not fds:
                del self._fds_of[path]

    def pread(self, fd, size, offset):
        path = self._paths.get(fd)
        if f := self._check("read", path):
            self._raise(f, path)
        data = super().pread(fd, size, offset)
        if path is not None:
            with self._lock:
                self.bytes_read[path] = self.bytes_read.get(path, 0) + len(data)
        return data

    def _track_write(self, fd):
        path = self._paths.get(fd)
        if path is not None:
            self._synced.setdefault(path, 0)

    def pwrite(self, fd, data, offset):
        self._track_write(fd)
        if f := self._check("write", self._paths.get(fd)):
            if f.partial:
                super().pwrite(fd, memoryview(data)[: f.partial], offset)
            self._raise(f, self._paths.get(fd))
        super().pwrite(fd, data, offset)

    def pwritev(self, fd, buffers, offset, size=None):
        self._track_write(fd)
        if f := self._check("write", self._paths.get(fd)):
            if f.partial:
                super().pwrite(fd, b"".join(bytes(b) for b in buffers)[: f.partial], offset)
            self._raise(f, self._paths.get(fd))
        super().pwritev(fd, buffers, offset, size)

    def fsync(self, fd):
        path = self._paths.get(fd)
        if f := self._check("fsync", path):
            self._raise(f, path)
        if self.real_fsync:
            super().fsync(fd)
        if path is not None:
            self._synced[path] = os.fstat(fd).st_size

    def ftruncate(self, fd, size):
        path = self._paths.get(fd)
        if f := self._check("truncate", path):
            self._raise(f, path)
        super().ftruncate(fd, size)
        if path is not None and self._synced.get(path, 0) > size:
            self._synced[path] = size

    def try_lock(self, fd):
        path = self._paths.get(fd)
        if f := self._check("lock", path):
            self._raise(f, path)
        return super().try_lock(fd)

    def rename(self, src, dst):
        if f := self._check("rename", src, dst):
            self._raise(f, src)
        super().rename(src, dst)
        if src in self._synced:
            self._synced[dst] = self._synced.pop(src)
        else:
            self._synced.pop(dst, None)
        for fd in list(self._fds_of.get(src, ())):  # (list(): a collected file's __del__ may close one meanwhile)
            if self._paths.get(fd) == src:
                self._paths[fd] = dst
                self._unmap(fd, src)
                self._fds_of.setdefault(dst, set()).add(fd)

    def remove(self, path):
        if f := self._check("remove", path):
            self._raise(f, path)
        super().remove(path)
        self._synced.pop(path, None)

    def listdir(self, path):
        if f := self._check("listdir", path):
            self._raise(f, path)
        return super().listdir(path)

    def fsync_dir(self, path):
        if f := self._check("fsync", path):
            self._raise(f, path)
        if self.real_fsync:
            super().fsync_dir(path)

    def makedirs(self, path):
        if f := self._check("mkdir", path):
            self._raise(f, path)
        super().makedirs(path)
