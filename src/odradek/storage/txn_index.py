"""The transaction index of one segment, ``<base>.txnindex`` (Kafka's TransactionIndex).

One entry per aborted transaction whose ABORT marker is in the segment, in marker order,
34 bytes each, big endian (Kafka's AbortedTxn, version 0)::

    version i16 = 0 | producer id i64 | first offset i64 | last offset i64 | last stable offset i64

``first offset`` is the transaction's first data offset, ``last offset`` the marker's offset,
``last stable offset`` the log's last stable offset once the marker is written (the first
offset of the next still-open transaction of another producer, else last offset + 1).

As in Kafka the file is created when the first entry is appended: a segment without aborted
transactions has none. The entries are kept in memory as well (a segment holds few), so a
read_committed fetch never reads the file. A trailing partial entry (a crash during an
append) is ignored and overwritten by the next append. Writes are unbuffered ``pwrite``s;
the file is fsynced with its segment (``flush``).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from typing import NamedTuple

from .fs import FileSystem

__all__ = ["AbortedTxn", "TransactionIndex", "ENTRY_SIZE"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(VERSION, *self)


class TransactionIndex:
    """Aborted transactions of one segment. Mutated on the event-loop thread (appends,
    truncation) or by the cleaner on a segment not yet in the log; ``flush`` may run in the
    flush thread."""

    __slots__ = ("fs", "path", "base_offset", "entries", "_lasts", "_unsynced")

    def __init__(self, fs: FileSystem, path: str, base_offset: int) -> None:
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self._lasts: list[int] = []  # the entries' last offsets (increasing), for bisect
        self._unsynced = False  # written since the last flush (no descriptor is held: each write opens the file)

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Read the file when there is one. Raises ValueError for an entry of an unknown
        version or one whose last offset is below the segment's base offset, or when the last
        offsets do not increase (Kafka's sanity check): the caller rebuilds the index."""
        self.entries = []
        self._lasts = []
        if not self.fs.exists(self.path):
            return
        data = self.fs.read_file(self.path)
        prev = -1
        for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != VERSION:
                raise ValueError(f"{self.path}: aborted transaction of unknown version {version} at {pos}")
            if last < self.base_offset or last <= prev:
                raise ValueError(f"{self.path}: aborted transaction at {pos} has last offset {last} out of order")
            prev = last
            self.entries.append(AbortedTxn(pid, first, last, lso))
        self._lasts = [e.last_offset for e in self.entries]

    def close(self) -> None:
        """Nothing to close: no descriptor is held."""

    def _write(self, op, *args) -> None:
        fd = self.fs.open(self.path, create=True)
        try:
            op(fd, *args)
        finally:
            self.fs.close(fd)
        self._unsynced = True

    # ------------------------------------------------------------------ writing
    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its last offset must be above the previous entry's."""
        if self.entries and self.entries[-1].last_offset >= txn.last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction last offset {txn.last_offset} does not follow "
                f"{self.entries[-1].last_offset}"
            )
        self._write(self.fs.pwrite, txn.encode(), len(self.entries) * ENTRY_SIZE)
        self.entries.append(txn)
        self._lasts.append(txn.last_offset)

    def reset(self) -> None:
        """Empty the index (a segment being recovered rebuilds it)."""
        self.entries = []
        self._lasts = []
        if self.fs.exists(self.path):
            self._write(self.fs.ftruncate, 0)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        del self._lasts[keep:]
        self._write(self.fs.ftruncate, keep * ENTRY_SIZE)

    def flush(self) -> None:
        if self._unsynced:
            self._unsynced = False  # (a write meanwhile sets it again)
            fd = self.fs.open(self.path, create=True)
            try:
                self.fs.fsync(fd)
            finally:
                self.fs.close(fd)

    def delete(self) -> None:
        self.close()
        self.fs.remove(self.path)

    def rename(self, new_path: str) -> None:
        if self.fs.exists(self.path):
            self.fs.rename(self.path, new_path)
        self.path = new_path

    # ------------------------------------------------------------------ reading
    def collect(self, fetch_offset: int, upper_bound_offset: int, out: list, pairs: bool = False) -> bool:
        """Append to ``out`` the aborted transactions overlapping [fetch_offset,
        upper_bound_offset) (with ``pairs``, as (producer id, first offset)); True when no
        later segment can hold one (an entry's last stable offset reached the upper bound), as
        Kafka's collectAbortedTxns.

        Kafka walks the entries from the first; this starts at the first entry whose marker is
        at or above ``fetch_offset`` (bisect), which finds the same: an earlier entry is not
        added, and cannot end the walk either, since a last stable offset is at most its
        marker's offset + 1 <= fetch_offset < upper_bound_offset."""
        entries = self.entries
        for k in range(bisect_left(self._lasts, fetch_offset), len(entries)):
            e = entries[k]
            pid, first, _last, lso = e
            if first < upper_bound_offset:
                out.append((pid, first) if pairs else e)
            if lso >= upper_bound_offset:
                return True
        return False
