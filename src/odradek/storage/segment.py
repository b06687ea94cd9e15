"""LogSegment: ``<base>.log`` + ``<base>.index`` + ``<base>.timeindex`` (+ ``<base>.txnindex``, see txn_index.py)."""

from __future__ import annotations

import os
import random
import struct
import threading
from collections.abc import Callable, Iterator

from odradek.protocol.records import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    validate_batch,
)

from .config import LogConfig
from .file_cache import OpenFile
from .fs import FileSystem, OSFileSystem
from .index import IndexCorruptError, OffsetIndex, TimeIndex
from .txn_index import TransactionIndex

__all__ = ["LogSegment", "segment_name", "offset_from_name", "scan_buffer_size", "new_segment", "open_segment"]

_LEN = struct.Struct(">i")
_PEEK = struct.Struct(">qi11xi")  # base offset, batch length, (epoch, magic, crc, attributes), last offset delta
_PEEK_SIZE = _PEEK.size
_INT32_MAX = 2**31 - 1
scan_buffer_size = 8 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def offset_from_name(name: str) -> int:
    return int(name.split(".", 1)[0])


class LogSegment:
    """One segment. Mutated only by its Log (appends on the event loop; flush in a thread
    touches only fsync and the index files, under the index locks).

    Its ``.log`` file is open only while the file cache (file_cache.py) keeps it: ``fd`` and
    ``file`` reopen it when it was closed. A thread other than the event loop's holds ``file``
    (and pins the segment) while it uses the descriptor."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        base_offset: int,
        *,
        index_bytes: int,
        index_interval: int,
        suffix: str = "",
    ) -> None:
        self.fs = fs
        self.dir = directory
        self.base_offset = base_offset
        self.suffix = suffix
        stem = os.path.join(directory, segment_name(base_offset))
        self.log_path = stem + ".log" + suffix
        self.index_path = stem + ".index" + suffix
        self.timeindex_path = stem + ".timeindex" + suffix
        self.txn_index = TransactionIndex(fs, stem + ".txnindex" + suffix, base_offset)
        self.index_bytes = index_bytes
        self.index_interval = index_interval
        self.offset_index = OffsetIndex(fs, self.index_path, base_offset, index_bytes)
        self.time_index = TimeIndex(fs, self.timeindex_path, base_offset, index_bytes)
        self._file: OpenFile | None = None  # set and cleared by the file cache
        self._used = False  # used since the file cache's last pass (second chance)
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_timestamp: int | None = None  # max timestamp of the first batch
        self.created_ms = 0
        self.bytes_since_index = 0
        self.flushed_size = 0
        self.deleted = False
        self.rebuilt_index = False
        self.txn_index_ok = True  # False: the .txnindex failed its checks on open (recovery rebuilds it)
        self._hint: tuple[int, int, int, int] | None = None  # see translate()
        self._tail: tuple[int, int] | None = None  # (position, base offset) of the last write's first batch
        # header peeks skip the FileSystem wrapper on real files (a short read is handled)
        self._pread = os.pread if type(fs) is OSFileSystem else fs.pread
        self.truncated_bytes = 0
        self.roll_jitter = 0
        self.pins = 0
        self.pin_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, fs, directory, base_offset, *, index_bytes, index_interval, now_ms, suffix=""):
        seg = cls(fs, directory, base_offset, index_bytes=index_bytes, index_interval=index_interval, suffix=suffix)
        for p in (seg.log_path, seg.index_path, seg.timeindex_path, seg.txn_index.path):
            fs.remove(p)
        fs.file_cache.open(seg, create=True)
        seg.offset_index.open(load=False, preallocate=not suffix)
        seg.time_index.open(load=False, preallocate=not suffix)
        seg.created_ms = now_ms
        return seg

    @classmethod
    def open(cls, fs, directory, base_offset, *, index_bytes, index_interval, suffix=""):
        """Open an existing segment trusting its contents. Indexes that are missing or fail
        their sanity checks are rebuilt (returns with ``rebuilt_index`` set)."""
        seg = cls(fs, directory, base_offset, index_bytes=index_bytes, index_interval=index_interval, suffix=suffix)
        seg.size = seg.flushed_size = fs.fsize(fs.file_cache.open(seg).fd)
        try:
            seg.created_ms = int(fs.getmtime(seg.log_path) * 1000)
        except OSError:
            seg.created_ms = 0
        seg.rebuilt_index = False
        ok = fs.exists(seg.index_path) and fs.exists(seg.timeindex_path)
        for idx in (seg.offset_index, seg.time_index):
            try:
                idx.open(load=True, preallocate=False)
            except IndexCorruptError:
                ok = False
                idx.close()
                idx.open(load=False, preallocate=False)
        if ok:
            try:
                ok = seg._load_tail()
            except CorruptRecordError:
                ok = False
        if not ok:
            seg.rebuilt_index = True
            seg.truncated_bytes = seg.recover()
        try:
            seg.txn_index.load()
        except ValueError:
            # Kafka's sanity check failed: the log loader rebuilds it (LogLoader recovers the segment)
            seg.txn_index.entries = []
            seg.txn_index_ok = False
        else:
            seg.txn_index_ok = True
        if seg.txn_index.entries and seg.truncated_bytes:
            seg.txn_index.truncate_to(seg.next_offset)
        return seg

    def _load_tail(self) -> bool:
        """After loading indexes: check them against the log and derive next offset, max
        timestamp and index bookkeeping from the batches after the last index entry."""
        last_off, pos = self.offset_index.last_entry()
        if pos >= self.size and len(self.offset_index):
            return False
        ts, ts_off = self.time_index.last_entry()
        if len(self.time_index) and not (self.base_offset <= ts_off):
            return False
        if len(self.offset_index):
            h = self.read_header(pos)
            if h is None or not (h.base_offset <= last_off == h.last_offset):
                return False
        self.max_timestamp, self.offset_of_max_timestamp = ts, ts_off
        if self.size:
            first = self.read_header(0)
            if first is None or first.base_offset < self.base_offset:
                return False
            self.rolling_timestamp = first.max_timestamp
        self.bytes_since_index = self.size - pos
        nxt = self.base_offset
        while pos < self.size:
            h = self.read_header(pos)
            if (
                h is None
                or h.magic != 2
                or h.batch_length < HEADER_SIZE - LOG_OVERHEAD
                or pos + h.size > self.size
                or h.base_offset < nxt
            ):
                return False
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            nxt = h.next_offset
            pos += h.size
        if len(self.offset_index) and nxt == self.base_offset:
            nxt = last_off + 1
        if nxt - 1 < ts_off and len(self.time_index):
            return False
        self.next_offset = nxt
        return True

    @property
    def file(self) -> OpenFile:
        """The open ``.log`` file (reopened if the file cache closed it)."""
        f = self._file
        if f is None:
            f = self.fs.file_cache.open(self)
        self._used = True
        return f

    @property
    def fd(self) -> int:
        """The ``.log`` file's descriptor, valid until the event loop opens another file."""
        f = self._file
        if f is None:
            f = self.fs.file_cache.open(self)
        self._used = True
        return f.fd

    def release_file(self) -> None:
        """Let the ``.log`` file go (closed unless a reader still holds it; reopened on use)."""
        self.fs.file_cache.release(self)

    def close(self) -> None:
        self.fs.file_cache.release(self)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    # ------------------------------------------------------------------ reading
    def read_header(self, pos: int) -> BatchHeader | None:
        data = self.fs.pread(self.fd, HEADER_SIZE, pos)
        if len(data) < HEADER_SIZE:
            return None
        return BatchHeader(pos, *HEADER.unpack_from(data, 0))

    def read(self, pos: int, size: int) -> bytes:
        return self.fs.pread(self.fd, size, pos)

    def peek(self, pos: int) -> tuple[int, int, int] | None:
        """(base offset, last offset, size) of the batch at ``pos``: one 27-byte pread."""
        data = self._pread(self.fd, _PEEK_SIZE, pos)
        if len(data) < _PEEK_SIZE:
            return None
        base, length, delta = _PEEK.unpack(data)
        return base, base + delta, length + LOG_OVERHEAD

    def translate(self, offset: int, end_pos: int) -> tuple[int, int, int, int] | None:
        """(position, base offset, last offset, size) of the first batch whose last offset
        >= ``offset`` and that ends at or before ``end_pos``."""
        hint = self._hint  # the batch right after the previous read: sequential consumers
        if hint is not None and hint[1] <= offset <= hint[2] and hint[0] + hint[3] <= end_pos:
            return hint
        tail = self._tail  # a caught-up consumer asks for what was just appended: no index walk
        if tail is not None and tail[1] <= offset and tail[0] < end_pos:
            pos = tail[0]
        else:
            _, pos = self.offset_index.lookup(offset)
        while pos < end_pos:
            b = self.peek(pos)
            if b is None or b[2] < HEADER_SIZE or pos + b[2] > end_pos:
                return None
            if b[1] >= offset:
                return pos, b[0], b[1], b[2]
            pos += b[2]
        return None

    def batches_end(
        self, start: int, first_size: int, pos_limit: int, offset_limit: int, end_pos: int
    ) -> tuple[int, int]:
        """End position of the run of whole batches from ``start`` (a batch of
        ``first_size`` bytes) that ends at or before ``pos_limit`` and holds no batch with
        base offset >= ``offset_limit``, and the base offset of the batch found there (-1 when
        the run ends at ``end_pos`` or at an unreadable header). Remembers that batch as the
        hint for the next read."""
        if pos_limit > end_pos:
            pos_limit = end_pos
        pos = start + first_size
        if pos > pos_limit:
            return start, -1
        if pos_limit - pos > self.index_interval:  # skip over indexed batches
            p = self.offset_index.last_before(pos_limit, offset_limit)
            if p > pos:
                pos = p
        while pos < end_pos:
            b = self.peek(pos)
            if b is None:
                break
            size = b[2]
            if size < HEADER_SIZE:
                break
            if b[0] >= offset_limit or pos + size > pos_limit:
                if pos + size <= end_pos:
                    self._hint = (pos, b[0], b[1], size)
                return pos, b[0]
            pos += size
        return pos, -1

    def scan(
        self, start: int = 0, end: int | None = None, *, validate: bool = True
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Yield (file position, header, buffer) for each batch in [start, end), reading in
        large chunks; header.position indexes into buffer. Raises CorruptRecordError with
        ``.position`` set at the first invalid or incomplete batch."""
        end = self.size if end is None else end
        pos = start
        f = self.file  # held while scanning (a cleaner or recovery thread)
        while pos < end:
            want = min(scan_buffer_size, end - pos)
            mv = memoryview(self.fs.pread(f.fd, want, pos))
            n = len(mv)
            p = 0
            while n - p >= HEADER_SIZE:
                size = _LEN.unpack_from(mv, p + 8)[0] + LOG_OVERHEAD
                if size < HEADER_SIZE or p + size > n:
                    break
                try:
                    h = validate_batch(mv, p, check_crc=validate)
                except CorruptRecordError as e:
                    e.position = pos + p
                    raise
                yield pos + p, h, mv
                p += size
            if p == 0:
                # one batch larger than the chunk, or an incomplete/garbage tail
                size = _LEN.unpack_from(mv, 8)[0] + LOG_OVERHEAD if n >= 12 else 0
                if n < HEADER_SIZE or size < HEADER_SIZE or pos + size > end:
                    err = CorruptRecordError(f"{self.log_path}: incomplete batch at position {pos}")
                    err.position = pos
                    raise err
                mv = memoryview(self.fs.pread(f.fd, size, pos))
                try:
                    h = validate_batch(mv, 0, check_crc=validate)
                except CorruptRecordError as e:
                    e.position = pos
                    raise
                yield pos, h, mv
                p = size
            pos += p

    # ------------------------------------------------------------------ writing
    def would_overflow(self, last_offset: int) -> bool:
        return last_offset - self.base_offset > _INT32_MAX

    def append(self, buffers: list, infos: list[tuple[int, int, int, int]], size: int | None = None) -> None:
        """Write ``buffers`` (``size`` bytes in all) at the end of the file in one call, then
        index the batches.

        ``infos``: per batch (position relative to this write, last offset, max timestamp,
        size)."""
        base = self.size
        f = self.file  # held across the write (the cleaner appends in its thread)
        self.fs.pwritev(f.fd, buffers, base, size)
        for rel, last, max_ts, sz in infos:
            self._index_batch(base + rel, last, max_ts, sz)
        self._tail = (base + infos[0][0], self.next_offset)
        self.next_offset = infos[-1][1] + 1

    def _index_batch(self, pos: int, last_offset: int, max_ts: int, size: int) -> None:
        if self.rolling_timestamp is None:
            self.rolling_timestamp = max_ts
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = last_offset
        if self.bytes_since_index > self.index_interval:
            self.offset_index.append(last_offset, pos)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += size
        self.size = pos + size

    def recover(
        self, on_batch: Callable[[int, BatchHeader, memoryview], None] | None = None, start_offset: int | None = None
    ) -> int:
        """Validate every batch, rebuild both indexes, truncate at the first invalid batch.
        Returns the number of bytes truncated."""
        self.offset_index.reset()
        self.time_index.reset()
        self._hint = self._tail = None
        f = self.file
        self.size_on_disk = self.fs.fsize(f.fd)
        file_size = self.size_on_disk
        self.size = 0
        self.bytes_since_index = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.rolling_timestamp = None
        self.next_offset = self.base_offset
        expected = self.base_offset if start_offset is None else start_offset
        valid = 0
        try:
            for pos, h, mv in self.scan(0, file_size):
                if h.base_offset < expected or self.would_overflow(h.last_offset):
                    e = CorruptRecordError(f"{self.log_path}: offset {h.base_offset} out of order at {pos}")
                    e.position = pos
                    raise e
                self._index_batch(pos, h.last_offset, h.max_timestamp, h.size)
                self.next_offset = expected = h.next_offset
                valid = pos + h.size
                if on_batch is not None:
                    on_batch(pos, h, mv)
        except CorruptRecordError:
            pass
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.size = valid
        truncated = file_size - valid
        if truncated:
            self.fs.ftruncate(f.fd, valid)
        self.flushed_size = min(self.flushed_size, valid)
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove batches with base offset >= offset. Returns bytes removed."""
        found = self.translate(offset, self.size)
        if found is None:
            return 0
        pos = found[0]  # the batch holding ``offset`` goes too (as Kafka's LogSegment.truncateTo)
        removed = self.size - pos
        if removed <= 0:
            return 0
        self._hint = None
        self._tail = None
        self.fs.ftruncate(self.fd, pos)
        self.offset_index.truncate_to_offset(offset)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_to(offset)
        # recompute bookkeeping from the remaining tail
        self.size = pos
        self.flushed_size = min(self.flushed_size, pos)
        ts, ts_off = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = ts, ts_off
        _, p = self.offset_index.last_entry()
        self.bytes_since_index = pos - p
        nxt = self.base_offset
        while p < pos:
            h = self.read_header(p)
            if h is None:  # cannot be: [p, pos) holds whole batches, read before
                raise CorruptRecordError(f"{self.log_path}: no batch header at position {p} (below {pos})")
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            nxt = h.next_offset
            p += h.size
        self.next_offset = max(nxt, self.base_offset)
        if pos == 0:
            self.rolling_timestamp = None
        return removed

    def flush(self) -> None:
        """fsync the log and write+fsync the indexes (called from the flush thread)."""
        size = self.size
        self.fs.fsync(self.file.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        self.flushed_size = max(self.flushed_size, size)

    def on_roll(self) -> None:
        """Becoming inactive: final time index entry, trim the preallocated indexes."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.trim()
        self.time_index.trim()

    def largest_timestamp(self) -> int:
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.created_ms

    # ------------------------------------------------------------------ files
    def rename_suffix(self, new_suffix: str) -> None:
        for attr, ext in (("log_path", ".log"), ("index_path", ".index"), ("timeindex_path", ".timeindex")):
            old = getattr(self, attr)
            new = os.path.join(self.dir, segment_name(self.base_offset) + ext + new_suffix)
            if self.fs.exists(old):
                self.fs.rename(old, new)
            setattr(self, attr, new)
        self.offset_index.path = self.index_path
        self.time_index.path = self.timeindex_path
        self.txn_index.rename(os.path.join(self.dir, segment_name(self.base_offset) + ".txnindex" + new_suffix))
        self.suffix = new_suffix

    def delete_files(self) -> None:
        self.close()
        for p in (self.log_path, self.index_path, self.timeindex_path, self.txn_index.path):
            self.fs.remove(p)

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size}, next={self.next_offset})"


def new_segment(fs: FileSystem, directory: str, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
    """A new empty segment of a log with ``config``, rolling ``segment.jitter.ms`` early at most."""
    seg = LogSegment.create(
        fs,
        directory,
        base_offset,
        index_bytes=config.segment_index_bytes,
        index_interval=config.index_interval_bytes,
        now_ms=now_ms,
    )
    seg.roll_jitter = random.randrange(config.segment_jitter_ms) if config.segment_jitter_ms > 0 else 0
    return seg


def open_segment(fs: FileSystem, directory: str, base_offset: int, config: LogConfig, suffix: str = "") -> LogSegment:
    """An existing segment of a log with ``config`` (see `LogSegment.open`)."""
    seg = LogSegment.open(
        fs,
        directory,
        base_offset,
        index_bytes=config.segment_index_bytes,
        index_interval=config.index_interval_bytes,
        suffix=suffix,
    )
    seg.roll_jitter = 0
    return seg
