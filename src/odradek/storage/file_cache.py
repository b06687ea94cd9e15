"""A bounded cache of open segment files: descriptors independent of the partition count.

Each log segment's ``.log`` file is opened when first used and registered here; when more
than ``capacity`` are registered, the cache closes cold ones (second-chance order: a segment
used since the last pass survives one more), and a segment reopens its file the next time it
is read or written. Indexes hold no descriptor at all (index.py: entries live in memory, the
file is opened for each write), so a broker's descriptors are this cache's capacity plus its
connections, whatever its partition count. Kafka keeps every ``.log`` open and maps its
indexes (AbstractIndex: mmap, then the channel closed); 100,000 partitions within a
20,000-descriptor limit needs the log files closed too.

Closing under a reader. An `OpenFile` closes its descriptor when the last reference to it
goes (CPython's reference count), never while referenced: a Fetch's file regions hold the
`OpenFile` they read from (log.py `FileRegion.file`), so a response waiting for the socket
to drain still sends from the right file after the cache let it go; a thread that needs a
segment's file (flush, cleaner) holds it the same way, and pins the segment (``pins``) so it
is not even let go meanwhile.

Which thread evicts. Only the owner thread (the event loop's, see `bind_owner`) closes files
of other segments: it reads a segment's descriptor and uses it without anything in between
that could open another file. Other threads (flush, cleaner, recovery at start) may open
files, counted here; the owner brings the count back under the capacity on its next open.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
from collections import OrderedDict
from typing import Any

__all__ = ["FileCache", "OpenFile", "raise_open_file_limit", "default_capacity", "CREATE_RESERVE"]

#: descriptors a creation needs beside the segment files it opens: each index and checkpoint
#: write opens one file at a time, and the broker must still accept a connection or two
CREATE_RESERVE = 64

log = logging.getLogger("odradek.storage")


class OpenFile:
    """One open descriptor; closed when the last reference to it goes (or by `close`)."""

    __slots__ = ("fd", "_cache")

    def __init__(self, cache: FileCache, fd: int) -> None:
        self.fd = fd
        self._cache = cache

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            self._cache._closed(fd)

    def __del__(self) -> None:
        if self.fd >= 0:
            self.close()

    def __repr__(self) -> str:
        return f"OpenFile({self.fd})"


class FileCache:
    """The open ``.log`` files of one broker's segments (one per FileSystem, see fs.py).

    ``capacity``: how many segments may keep their file open (None: no bound). ``open_files``:
    descriptors open through the cache now (cached ones and ones let go but still referenced)."""

    def __init__(self, fs: Any, capacity: int | None = None) -> None:
        self.fs = fs
        self.capacity = capacity
        self.open_files = 0
        self.opens = 0  # files opened, first time or again
        self.evictions = 0
        self._ring: OrderedDict[Any, None] = OrderedDict()  # segments holding an OpenFile, oldest first
        self._lock = threading.RLock()  # (an OpenFile let go under it closes under it)
        self._owner = threading.get_ident()
        self._abandoned = False

    def abandon(self) -> None:
        """Its descriptors were closed behind its back (a simulated process death closes every
        descriptor): its files never close a descriptor again, which by now may be another's."""
        with self._lock:
            self._abandoned = True
            for seg in self._ring:
                seg._file = None
            self._ring.clear()

    def bind_owner(self) -> None:
        """The calling thread (the event loop's) is the one that closes cold files."""
        self._owner = threading.get_ident()

    def __len__(self) -> int:
        return len(self._ring)

    def open(self, seg: Any, *, create: bool = False) -> OpenFile:
        """``seg``'s file, opened and registered if it is not open (``seg.log_path``; the
        segment's ``_file`` is set). May close cold files of other segments (owner thread only)."""
        with self._lock:
            f = seg._file
            if f is not None:
                return f
            f = OpenFile(self, self.fs.open(seg.log_path, create=create))
            self.open_files += 1
            self.opens += 1
            seg._file = f
            seg._used = True
            self._ring[seg] = None
            if self.capacity is not None and len(self._ring) > self.capacity and threading.get_ident() == self._owner:
                self._evict()
        return f

    def release(self, seg: Any) -> None:
        """Let ``seg``'s file go (the segment closes, or recovery is done with it): closed at
        once unless something still holds it."""
        with self._lock:
            self._ring.pop(seg, None)
            seg._file = None

    def room_for(self, segments: int) -> str | None:
        """Why opening ``segments`` new segments (new partitions' first ones) could run out of
        descriptors now, or None. They enter this cache, which closes cold files past its
        capacity: at most ``capacity`` minus what it holds are added, plus CREATE_RESERVE."""
        try:
            in_use = len(os.listdir("/proc/self/fd"))  # (Linux; elsewhere no check)
        except OSError:
            return None
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        with self._lock:
            held = len(self._ring)
        room = self.capacity - held if self.capacity is not None else segments
        need = min(segments, max(room, 0)) + CREATE_RESERVE
        free = limit - in_use
        if need <= free:
            return None
        return (
            f"not enough file descriptors for {segments} new partition(s) on this broker: up to {need} more "
            f"needed, {free} of {limit} free ({in_use} open, {self.open_files} of them segment files, at most "
            f"{self.capacity} kept open by log.open.segments.max); raise the open-file limit or lower "
            "log.open.segments.max"
        )

    def _evict(self) -> None:
        ring = self._ring
        budget = 2 * len(ring)  # every entry gets its second chance at most once per pass
        while len(ring) > self.capacity and budget:  # type: ignore[operator]
            budget -= 1
            seg = next(iter(ring))
            del ring[seg]
            if seg.pins or seg._used:
                seg._used = False
                ring[seg] = None
                continue
            seg._file = None  # the OpenFile closes now, or when its last reader lets it go
            self.evictions += 1

    def _closed(self, fd: int) -> None:
        if self._abandoned:
            return
        try:
            self.fs.close(fd)
        except OSError as e:  # (from __del__: nowhere to raise to)
            log.warning("closing a segment file (descriptor %d): %s", fd, e)
        with self._lock:
            self.open_files -= 1


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Kafka's start scripts leave to the
    operator, and a JVM does for itself): (the soft limit before, the one now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                hard = int(f.read())
        except (OSError, ValueError):
            return soft, soft
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard if hard else resource.RLIM_INFINITY))
        except (OSError, ValueError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, e)
            return soft, soft
        return soft, hard
    return soft, soft


def default_capacity(open_file_limit: int) -> int:
    """``log.open.segments.max``'s default: half the open-file limit (at least 16)."""
    return max(16, open_file_limit // 2)
