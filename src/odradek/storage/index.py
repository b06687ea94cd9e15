"""Sparse offset and time indexes, in Kafka's file formats.

``.index``: 8-byte entries (int32 offset relative to the segment base, int32 position in
the .log file), big endian. An entry (o, p) means "the batch starting at p has last offset
base + o". ``.timeindex``: 12-byte entries (int64 timestamp, int32 relative offset): "up to
and including offset base + o the largest timestamp is t"; timestamps strictly increase.

Entries live in memory (arrays, binary searched) and are written to the file in one
pwrite on flush/roll/close (off the append path). An index holds no descriptor: lookups
read memory, and each write (flush, roll, truncation) opens the file, writes and closes it,
so a broker's descriptors do not grow with its segments (Kafka maps its indexes and closes
the channel, AbstractIndex). Files are preallocated to
``segment.index.bytes`` (sparse) while the segment is active and trimmed when it rolls or
closes, as Kafka does. On load, trailing zeros (preallocation) are dropped and the entries
must be strictly increasing, otherwise the index is reported corrupt and rebuilt.
"""

from __future__ import annotations

import struct
import sys
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from contextlib import contextmanager

from .fs import FileSystem

__all__ = ["OffsetIndex", "TimeIndex", "IndexCorruptError"]

_LITTLE = sys.byteorder == "little"
_TENT = struct.Struct(">qi")


class IndexCorruptError(Exception):
    pass


def _increasing(a) -> bool:
    return all(x < y for x, y in zip(a, a[1:]))


def _nondecreasing(a) -> bool:
    return all(x <= y for x, y in zip(a, a[1:]))


class _Index:
    ENTRY = 8
    _rel: array[int]  # each entry's offset relative to base_offset (both kinds of index have it)

    def __init__(self, fs: FileSystem, path: str, base_offset: int, max_bytes: int) -> None:
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.ENTRY)
        self._written = 0  # entries already in the file
        self._unsynced = False  # written since the last fsync
        self._lock = threading.Lock()
        self._file_len = 0
        self._clear()

    def __len__(self) -> int:
        return len(self._rel)

    @contextmanager
    def _opened(self) -> Iterator[int]:
        """The file, open for one operation (created if missing)."""
        fd = self.fs.open(self.path, create=True)
        try:
            yield fd
        finally:
            self.fs.close(fd)

    def open(self, *, load: bool, preallocate: bool) -> None:
        """Create the file if needed; ``load`` reads existing entries (IndexCorruptError)."""
        exists = self.fs.exists(self.path)
        with self._opened() as fd:
            self._open(fd, load and exists)
            if preallocate:
                self._resize(fd, self.max_entries * self.ENTRY)

    def _open(self, fd: int, load: bool) -> None:
        self._file_len = self.fs.fsize(fd)
        if load:
            # preallocated files end in zero entries: binary search the first one, read the rest
            E = self.ENTRY
            zero = b"\0" * E
            lo, hi = 0, self._file_len // E
            if hi > 2 and self.fs.pread(fd, E, E) == zero:
                # at most one entry (an idle partition's index, preallocated): two reads, not 20;
                # only a first entry can be all zeros, and the search below takes it for the tail too
                lo = hi = 0 if self.fs.pread(fd, E, 0) == zero else 1
            while lo < hi:
                mid = (lo + hi) // 2
                if self.fs.pread(fd, E, mid * E) == zero:
                    hi = mid
                else:
                    lo = mid + 1
            self._load(self.fs.pread(fd, lo * E, 0))
            self._written = len(self._rel)
        else:
            self._clear()
            self._written = 0
            if self._file_len:
                self.fs.ftruncate(fd, 0)
                self._file_len = 0
                self._unsynced = True

    def resize(self, nbytes: int) -> None:
        with self._lock:
            if max(nbytes, len(self._rel) * self.ENTRY) == self._file_len:
                return  # that size already (a new segment's preallocated index): not opened for nothing
            with self._opened() as fd:
                self._resize(fd, nbytes)

    def _resize(self, fd: int, nbytes: int) -> None:
        nbytes = max(nbytes, len(self._rel) * self.ENTRY)
        if nbytes < self._written * self.ENTRY:
            self._written = nbytes // self.ENTRY
        if nbytes != self._file_len:
            self.fs.ftruncate(fd, nbytes)
            self._file_len = nbytes
            self._unsynced = True

    def _write_pending(self, fd: int) -> None:
        n = len(self._rel)
        if self._written < n:
            data = self._encode(self._written, n)
            self.fs.pwrite(fd, data, self._written * self.ENTRY)
            self._written = n
            self._file_len = max(self._file_len, n * self.ENTRY)
            self._unsynced = True

    def flush(self) -> None:
        with self._lock:
            if self._written == len(self._rel) and not self._unsynced:
                return
            with self._opened() as fd:
                self._write_pending(fd)
                self.fs.fsync(fd)
                self._unsynced = False

    def trim(self) -> None:
        """Write pending entries and cut the preallocated tail (on roll/close)."""
        with self._lock, self._opened() as fd:
            self._write_pending(fd)
            self._resize(fd, len(self._rel) * self.ENTRY)

    def truncate_entries(self, keep: int) -> None:
        """Keep the first ``keep`` entries; zero the rest in the file."""
        with self._lock:
            self._keep(keep)
            if self._written > keep:
                size = self._file_len
                with self._opened() as fd:
                    self.fs.ftruncate(fd, keep * self.ENTRY)
                    self.fs.ftruncate(fd, size)
                self._written = keep
                self._unsynced = True

    def reset(self) -> None:
        self.truncate_entries(0)

    def close(self) -> None:
        """Nothing to close: no descriptor is held (entries not yet written stay unwritten, as
        before: recovery rebuilds what an unclean stop lost)."""

    # ---------------------------------------------------------------- per kind of index
    def _clear(self) -> None:
        """Drop every entry from memory."""
        raise NotImplementedError

    def _keep(self, n: int) -> None:
        """Keep the first ``n`` entries in memory."""
        raise NotImplementedError

    def _load(self, data: bytes) -> None:
        """Read the entries of the file's bytes (IndexCorruptError)."""
        raise NotImplementedError

    def _encode(self, a: int, b: int) -> bytes:
        """Entries [a, b) in the file's format."""
        raise NotImplementedError


class OffsetIndex(_Index):
    ENTRY = 8

    def _clear(self) -> None:
        self._rel = array("i")
        self._pos = array("i")

    def _keep(self, n: int) -> None:
        del self._rel[n:]
        del self._pos[n:]

    def _load(self, data: bytes) -> None:
        data = data.rstrip(b"\0")
        n = -(-len(data) // 8)
        raw = array("i")
        raw.frombytes(data.ljust(n * 8, b"\0"))
        if _LITTLE:
            raw.byteswap()
        rel, pos = raw[0::2], raw[1::2]
        if n and (rel[0] < 0 or pos[0] <= 0 or not _increasing(rel) or not _increasing(pos)):
            raise IndexCorruptError(f"{self.path}: entries not increasing")
        self._rel, self._pos = rel, pos

    def _encode(self, a: int, b: int) -> bytes:
        out = array("i", [0]) * (2 * (b - a))
        out[0::2] = self._rel[a:b]
        out[1::2] = self._pos[a:b]
        if _LITTLE:
            out.byteswap()
        return out.tobytes()

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            return
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, as (absolute offset, position); (base, 0) if none."""
        i = bisect_right(self._rel, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def last_before(self, position_limit: int, offset_limit: int) -> int:
        """Position of the last indexed batch starting at or before ``position_limit`` whose
        last offset is below ``offset_limit`` (0 if none)."""
        i = bisect_right(self._pos, position_limit) - 1
        j = bisect_left(self._rel, offset_limit - self.base_offset) - 1
        k = min(i, j)
        return self._pos[k] if k >= 0 else 0

    def last_entry(self) -> tuple[int, int]:
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches whose last offset >= offset."""
        self.truncate_entries(bisect_left(self._rel, offset - self.base_offset))

    def entries(self) -> list[tuple[int, int]]:
        return [(self.base_offset + r, p) for r, p in zip(self._rel, self._pos)]


class TimeIndex(_Index):
    ENTRY = 12

    def _clear(self) -> None:
        self._ts = array("q")
        self._rel = array("i")

    def _keep(self, n: int) -> None:
        del self._ts[n:]
        del self._rel[n:]

    def _load(self, data: bytes) -> None:
        n = len(data) // 12
        ts, rel = array("q"), array("i")
        mv = memoryview(data)
        ent = _TENT
        for t, r in ent.iter_unpack(mv[: n * 12]):
            if ts and t <= ts[-1]:
                if t == 0 and r == 0:
                    break  # preallocated tail
                raise IndexCorruptError(f"{self.path}: timestamps not increasing")
            ts.append(t)
            rel.append(r)
        if rel and (rel[0] < 0 or not _nondecreasing(rel)):
            raise IndexCorruptError(f"{self.path}: offsets decreasing")
        self._ts, self._rel = ts, rel

    def _encode(self, a: int, b: int) -> bytes:
        ent = _TENT
        return b"".join(ent.pack(self._ts[i], self._rel[i]) for i in range(a, b))

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp < 0 or (self._ts and timestamp <= self._ts[-1]):
            return
        rel = offset - self.base_offset
        if self._rel and rel < self._rel[-1]:
            return
        self._ts.append(timestamp)
        self._rel.append(rel)

    def lookup(self, timestamp: int) -> int:
        """Offset from which to scan for the first record with timestamp >= target: the
        offset of the last entry whose timestamp < target (base offset if none)."""
        i = bisect_left(self._ts, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self._rel[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._ts:
            return -1, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def truncate_to_offset(self, offset: int) -> None:
        self.truncate_entries(bisect_left(self._rel, offset - self.base_offset))

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + r) for t, r in zip(self._ts, self._rel)]
