"""Log: one partition's segments; append, read, roll, flush, truncate.

Around it: validator.py decides what an append writes (checks, offset assignment), loader.py
opens a log directory and recovers it after an unclean stop, producer_state.py keeps the
idempotent/transactional producer state, txn_index.py each segment's aborted transactions,
checkpoint.py the leader-epoch cache, retention.py which old segments go (and DeleteRecords).

Transactions: an append whose markers end transactions indexes each aborted one in the active
segment's ``.txnindex`` (with the last stable offset of that moment) before the producer state
completes it, for every origin (leader, replication), as Kafka's UnifiedLog.append; the
last stable offset is the high watermark capped by the first unstable offset.
`collect_aborted_transactions` answers a read_committed fetch.

Threading: append/read/roll/retention run on the event-loop thread. ``flush`` and the
cleaner run in worker threads; they never mutate the segment list except under
``self.lock`` (cleaner swap), and readers take the immutable ``segments`` tuple without
locking (copy-on-write).
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

from odradek.protocol.errors import InvalidRecordError
from odradek.protocol.records import CONTROL_MASK, decode_records

from . import retention
from .checkpoint import PARTITION_METADATA, LeaderEpochCache, read_partition_metadata, write_partition_metadata
from .config import LogConfig
from .errors import KafkaStorageError, StorageError, StorageInconsistentTopicIdError, StorageOffsetOutOfRangeError
from .file_cache import OpenFile
from .fs import FileSystem
from .loader import LogLoader, rebuild_producer_state
from .log_dir import LogDirState, parse_log_dir_name
from .producer_state import CompletedTxn, ProducerStateManager
from .segment import LogSegment, new_segment
from .txn_index import AbortedTxn
from .validator import BatchValidator, ValidatedBatches, WritePlan

__all__ = ["Log", "LogDirState", "FileRegion", "ReadResult", "AppendInfo", "AppendOrigin", "parse_log_dir_name"]

log = logging.getLogger("odradek.storage")

_SNAPSHOTS_KEPT = 4
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)  # the process's or the system's open-file limit
_INT32_MAX = 2**31 - 1


class AppendOrigin(enum.Enum):
    """Who appends (Kafka's AppendOrigin). Only a coordinator may append control batches
    (transaction markers) as leader; a client's are refused (INVALID_RECORD, as Kafka's
    LogValidator). Replicated batches (``assign_offsets=False``) are taken as the leader
    wrote them."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class FileRegion(NamedTuple):
    """Bytes of a segment file for a Fetch to send. ``file`` keeps the descriptor open until
    the region is gone, whatever the file cache (file_cache.py) does meanwhile."""

    fd: int
    position: int
    length: int
    file: OpenFile | None = None


# A single batch of at most this many bytes, just appended, is kept in memory until the high
# watermark passes it: the followers' Fetches that copy it are answered from those bytes (no
# index walk, no header peeks, no pread). One per partition at most, only while unreplicated.
RECENT_BATCH_BYTES = 1024


@dataclass(slots=True)
class ReadResult:
    regions: list[FileRegion | bytes]  # bytes: the recently appended batch, as it is in the file
    size: int
    first_offset: int  # base offset of the first batch returned; -1 when empty
    next_offset: int  # the offset after the batches returned (where the next read starts); -1 when empty
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


@dataclass(slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False
    needs_flush: bool = False


class Log:
    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        dir_state: LogDirState,
        clock=time.time,
    ) -> None:
        self.fs = fs
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.dir_state = dir_state
        self.clock = clock
        self.lock = threading.RLock()
        self.segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._view: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())
        self.log_start_offset = 0
        self._leo = 0
        self._hw = 0
        # (segment, position, base offset, next offset, bytes) of the last append when it was
        # one batch of at most RECENT_BATCH_BYTES, until the high watermark passes it
        self._recent: tuple[LogSegment, int, int, int, bytes] | None = None
        self.recovery_point = 0  # everything below it is flushed (fsynced); recovery starts at its segment
        # the one on disk, where recovery would start (the cleaner's bound; set by the LogManager
        # when it writes the file, which it does after a truncation that went below it)
        self.checkpointed_recovery_point = 0
        self.last_flush_ms = self._now()
        # a roll asks for everything below the new segment to be flushed, off the event loop
        # (Kafka's flushUptoOffsetExclusive(newSegment.baseOffset)); -1: nothing asked
        self.pending_flush_offset = -1
        self.on_flush_request: Callable[[Log], None] | None = None  # the LogManager runs the flush
        # a truncation asks for its directory's recovery-point checkpoint to be written before it
        # returns when the file holds a point above the new one (Kafka's LogManager.truncateTo)
        self.on_truncation: Callable[[Log], None] | None = None
        self._truncations = 0  # a flush that raced a truncation leaves the recovery point alone
        self.recovered_at_load: list[tuple[int, int]] = []  # (base offset, bytes) of each segment recovery read
        self.producer_state = ProducerStateManager(fs, directory)
        self.epoch_cache = LeaderEpochCache(fs, directory)
        self.topic_id: uuid.UUID | None = None  # from partition.metadata; set by assign_topic_id
        self.cleaner_checkpoint = 0
        self.min_delete_horizon: int | None = None  # None: unknown (scan on next cleaning)
        self.closed = False
        self._log_start_dirty = False
        self.on_log_start_moved: Callable[[Log], None] | None = None  # the LogManager checkpoints it soon
        self._dir_dirty = False
        self._metadata_unsynced = False  # partition.metadata written, not yet fsynced
        self.parent_unsynced = False  # a new directory whose entry in the log dir is not yet fsynced
        self._validator: BatchValidator | None = None  # built from self.config (rebuilt when it changes)
        # (the segment tuple it was computed from, its segments whose .txnindex has entries);
        # None: recompute (see aborted_transactions)
        self._txn_segments: tuple[tuple[LogSegment, ...], tuple[LogSegment, ...]] | None = None

    def __repr__(self) -> str:
        return f"Log({self.topic}-{self.partition}, {self.log_start_offset}..{self._leo})"

    # ------------------------------------------------------------------ helpers
    def _now(self) -> int:
        return int(self.clock() * 1000)

    def _check_online(self) -> None:
        if self.dir_state.offline:
            raise KafkaStorageError(f"log directory {self.dir_state.path} is offline")
        if self.closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    def _fail(self, exc: BaseException) -> NoReturn:
        if isinstance(exc, OSError) and exc.errno in OUT_OF_DESCRIPTORS:
            # a file (re)opened by the file cache: nothing was written, the directory is sound,
            # only this request fails (KAFKA_STORAGE_ERROR: a client retries)
            raise KafkaStorageError(f"out of file descriptors in {self.dir}: {exc}") from exc
        self.dir_state.fail(exc)
        raise KafkaStorageError(f"I/O error in {self.dir}: {exc}") from exc

    def _set_segments(self, segs) -> None:
        segs = tuple(segs)
        bases = tuple(s.base_offset for s in segs)
        self._view = (segs, bases)  # one assignment: a reader never pairs new segments with old bases
        self._recent = None
        self.segments = segs
        self._bases = bases

    def _new_segment(self, base: int, now_ms: int) -> LogSegment:
        seg = new_segment(self.fs, self.dir, base, self.config, now_ms)
        self._dir_dirty = True
        return seg

    # ------------------------------------------------------------------ properties
    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = hw = min(max(value, self.log_start_offset), self._leo)
        recent = self._recent
        if recent is not None and hw >= recent[3]:
            self._recent = None
        if self.producer_state.unreplicated:
            self.producer_state.on_high_watermark_updated(hw)

    @property
    def last_stable_offset(self) -> int:
        fuo = self.producer_state.first_unstable_offset()
        return self._hw if fuo is None else min(fuo, self._hw)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def segment_count(self) -> int:
        return len(self.segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self.recovery_point

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_start_dirty(self) -> bool:
        """The log start offset moved since the last checkpoint write (set: ``on_log_start_moved``)."""
        return self._log_start_dirty

    @log_start_dirty.setter
    def log_start_dirty(self, dirty: bool) -> None:
        self._log_start_dirty = dirty
        if dirty and self.on_log_start_moved is not None:
            self.on_log_start_moved(self)

    def update_config(self, cfg: LogConfig) -> None:
        self.config = cfg

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        fs: FileSystem,
        directory: str,
        config: LogConfig,
        dir_state: LogDirState,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        clean: bool = False,
        clock=time.time,
    ) -> Log:
        """Open the log in ``directory`` (see loader.py); an empty directory gets its first segment."""
        parsed = parse_log_dir_name(os.path.basename(directory.rstrip("/")))
        if parsed is None:
            raise StorageError(f"not a log directory name: {directory}")
        self = cls(fs, directory, parsed[0], parsed[1], config, dir_state, clock)
        loaded = LogLoader(fs, directory, config, self.epoch_cache, self.producer_state).load(
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            high_watermark=high_watermark,
            clean=clean,
            now_ms=self._now(),
        )
        self._set_segments(loaded.segments)
        self._leo = loaded.log_end_offset
        self.log_start_offset = loaded.log_start_offset
        self.recovery_point = loaded.recovery_point
        self.checkpointed_recovery_point = min(max(recovery_point, 0), loaded.log_end_offset)
        self.recovered_at_load = loaded.recovered
        self._hw = loaded.high_watermark
        self.producer_state.on_high_watermark_updated(self._hw)
        self._dir_dirty = loaded.created_segment
        self.epoch_cache.write_through = True
        try:
            self.topic_id = read_partition_metadata(fs, directory)
        except (ValueError, UnicodeDecodeError) as e:
            log.warning(
                "%s: ignoring malformed partition.metadata (rewritten once the topic id is known): %s", directory, e
            )
        return self

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Record the partition's topic id in ``partition.metadata`` (Kafka's file, which Kafka
        needs to open the directory) when it is not there yet. A directory that names another
        topic id raises StorageInconsistentTopicIdError, as in Kafka: it holds another topic's data."""
        if self.topic_id == topic_id:
            return
        if self.topic_id is not None:
            raise StorageInconsistentTopicIdError(
                f"{self.dir}: partition.metadata has topic id {self.topic_id}, the metadata says {topic_id}"
            )
        self._check_online()
        try:
            # not fsynced here (Kafka fsyncs it off the request path too): the log's next flush
            # does, with the directory; lost to a power cut, it is written again from the metadata
            write_partition_metadata(self.fs, self.dir, topic_id, sync=False)
        except OSError as e:
            self._fail(e)
        self.topic_id = topic_id
        self._metadata_unsynced = self._dir_dirty = True

    # ------------------------------------------------------------------ append
    def append(
        self,
        batches,
        *,
        leader_epoch: int = 0,
        now_ms: int | None = None,
        validate: bool = True,
        assign_offsets: bool = True,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Append already-framed v2 batches: validate, check producer state, assign offsets, write.

        ``validate``: framing, magic, counts, CRC32C; for a producer's append also size, timestamp
        bounds and keys on compacted topics (validator.py). ``assign_offsets=False`` (a follower's
        copy: framing and CRC only) keeps the batches' offsets and epochs, which must start at or
        after the log end. ``origin``: a CLIENT's control batches are refused (InvalidRecordError)."""
        if self.dir_state.offline or self.closed:
            self._check_online()
        validator = self._validator
        if validator is None or validator.config is not self.config:
            validator = self._validator = BatchValidator(self.config, f"{self.topic}-{self.partition}")
        now = int(self.clock() * 1000) if now_ms is None else now_ms
        checked = validator.validate(batches, now, check=validate, assign_offsets=assign_offsets)
        if checked.has_producer_ids and assign_offsets:
            # (a follower's copy keeps what its leader accepted: no duplicate or sequence checks,
            # only the producer state recorded below, as Kafka's replication origin does)
            if origin is AppendOrigin.CLIENT:
                for h in checked.headers:
                    if h.attributes & CONTROL_MASK:
                        raise InvalidRecordError(
                            f"Clients are not allowed to write control records in topic partition "
                            f"{self.topic}-{self.partition}"
                        )
                    if h.producer_id >= 0 and h.base_sequence < 0:
                        raise InvalidRecordError(
                            f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id}"
                        )
            dup = self.producer_state.find_duplicate(
                checked.headers, checked.buffer, client=origin is AppendOrigin.CLIENT
            )
            if dup is not None:
                return AppendInfo(dup[0], dup[1], -1, self.log_start_offset, 0, True, False)
        plan = checked.assign_offsets(self._leo, leader_epoch) if assign_offsets else checked.keep_offsets(self._leo)
        self._write(plan, now)
        self._record_append(checked, plan, leader_epoch if assign_offsets else None)
        return AppendInfo(
            plan.first_offset,
            plan.next_offset - 1,
            checked.log_append_time,
            self.log_start_offset,
            plan.record_count,
            False,
            plan.next_offset - self.recovery_point >= self.config.flush_messages,
        )

    def _write(self, plan: WritePlan, now: int) -> None:
        """Write ``plan`` at the end of the active segment, rolling first when it is due."""
        seg = self.segments[-1]
        try:
            if self._should_roll(seg, plan.size, plan.first_offset, plan.next_offset - 1, now):
                seg = self._roll(now, plan.first_offset)
            seg.append(plan.buffers, plan.batches, plan.size)
        except OSError as e:
            self._recent = None
            self._fail(e)
        if len(plan.batches) == 1 and plan.size <= RECENT_BATCH_BYTES:
            data = b"".join(plan.buffers)
            self._recent = (seg, seg.size - plan.size, plan.first_offset, plan.next_offset, data)
        else:
            self._recent = None

    def _record_append(self, checked: ValidatedBatches, plan: WritePlan, leader_epoch: int | None) -> None:
        """After the write: producer state, leader-epoch cache, log end offset. ``leader_epoch``:
        the epoch stamped on the batches, None when they kept their own (replication)."""
        if checked.has_producer_ids:
            completed = self.producer_state.record_appended(checked.buffer, checked.headers, plan.batches, leader_epoch)
            if completed is not None:
                self._complete_txns(completed)
        ec = self.epoch_cache
        try:
            if leader_epoch is not None:
                if leader_epoch > ec.latest_epoch:
                    ec.assign(leader_epoch, plan.first_offset)  # written at once
            else:
                for h in checked.headers:
                    if h.partition_leader_epoch > ec.latest_epoch:
                        ec.assign(h.partition_leader_epoch, h.base_offset)
        except OSError as e:
            self._fail(e)
        self._leo = plan.next_offset

    def _complete_txns(self, completed: list[CompletedTxn]) -> None:
        """Index the aborted ones in the active segment (where the append went), then complete
        them in the producer state, in order (Kafka's UnifiedLog.append)."""
        ps = self.producer_state
        seg = self.segments[-1]
        for txn in completed:
            if txn.aborted:
                lso = ps.last_stable_offset_after(txn)
                try:
                    seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
                except OSError as e:
                    self._fail(e)
                self._txn_segments = None
            ps.complete_txn(txn)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of each aborted transaction with data in [start_offset,
        upper_bound_offset), from the transaction indexes of the segment holding
        ``start_offset`` and the ones after it, until an entry's last stable offset reaches
        the upper bound (Kafka's collectAbortedTransactions). Costs one test when the log has
        no aborted transaction."""
        return self._collect(start_offset, upper_bound_offset, True)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The index entries `collect_aborted_transactions` names."""
        return self._collect(start_offset, upper_bound_offset, False)

    def _collect(self, start_offset: int, upper_bound_offset: int, pairs: bool) -> list:
        all_segs = self.segments
        cached = self._txn_segments
        if cached is None or cached[0] is not all_segs:
            cached = self._txn_segments = (all_segs, tuple(s for s in all_segs if s.txn_index.entries))
        out: list = []
        for seg in cached[1]:
            # a segment wholly below start_offset has no entry whose marker is at or above it
            if seg.next_offset > start_offset and seg.txn_index.collect(start_offset, upper_bound_offset, out, pairs):
                break
        return out

    def _should_roll(self, seg: LogSegment, size: int, first_offset: int, last_offset: int, now: int) -> bool:
        if seg.size == 0:
            return first_offset != seg.base_offset and first_offset > seg.base_offset
        cfg = self.config
        rolling_ts = seg.rolling_timestamp
        if rolling_ts is None or rolling_ts < 0:
            rolling_ts = seg.created_ms
        return (
            seg.size > cfg.segment_bytes - size
            or now - rolling_ts > cfg.segment_ms - seg.roll_jitter
            or len(seg.offset_index) >= seg.offset_index.max_entries
            or len(seg.time_index) >= seg.time_index.max_entries
            or last_offset - seg.base_offset > _INT32_MAX
        )

    def _roll(self, now: int, base: int | None = None) -> LogSegment:
        """A new active segment at ``base`` (default: the log end offset), as Kafka's
        UnifiedLog.roll: a producer snapshot at ``base``, the old segment's indexes trimmed,
        and a flush of everything below ``base`` asked of ``on_flush_request`` (the LogManager
        runs it in a worker thread, and the recovery point follows)."""
        with self.lock:
            base = self._leo if base is None else base
            old = self.segments[-1]
            if old.size == 0:
                # empty active segment: just replace it at the new base
                old.delete_files()
                new = self._new_segment(base, now)
                self._set_segments(self.segments[:-1] + (new,))
                return new
            self.producer_state.take_snapshot(base)
            self.producer_state.retain_snapshots(_SNAPSHOTS_KEPT)
            old.on_roll()
            new = self._new_segment(base, now)
            self._set_segments(self.segments + (new,))
        if base > self.pending_flush_offset:
            self.pending_flush_offset = base
        if self.on_flush_request is not None:
            self.on_flush_request(self)
        return new

    def roll(self) -> None:
        self._check_online()
        try:
            self._roll(self._now())
        except OSError as e:
            self._fail(e)

    # ------------------------------------------------------------------ read
    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> ReadResult:
        if self.dir_state.offline or self.closed:
            self._check_online()
        segs, bases = self._view
        leo = self._leo
        lso = self.log_start_offset
        if offset < lso or offset > leo:
            raise StorageOffsetOutOfRangeError(
                f"offset {offset} out of range [{lso}, {leo}] for {self.topic}-{self.partition}"
            )
        limit = leo if max_offset is None or max_offset > leo else max_offset
        recent = self._recent
        if recent is not None and recent[2] == offset and recent[3] <= limit:
            # a follower copying what was just appended: the bytes written, when that batch is
            # still the active segment's last
            seg, pos, base, nxt, data = recent
            size = len(data)
            if segs[-1] is seg and seg.size == pos + size and (size <= max_bytes or min_one_batch):
                return ReadResult([data], size, base, nxt, lso, leo, self._hw)
        regions: list[FileRegion | bytes] = []
        total = 0
        first = next_offset = -1
        n = len(segs)
        # a consumer near the end reads the active segment: no search
        i = n - 1 if offset >= bases[-1] else max(bisect_right(bases, offset) - 1, 0)
        try:
            while i < n and offset < limit:
                seg = segs[i]
                i += 1
                end_pos = seg.size
                found = seg.translate(offset, end_pos)
                if found is None:
                    continue
                start, base, last, size = found
                if base >= limit:
                    break
                stop, nxt = seg.batches_end(start, size, start + (max_bytes - total), limit, end_pos)
                if stop == start:
                    if regions or not min_one_batch:
                        break
                    stop, nxt = start + size, last + 1
                if first < 0:
                    first = base
                f = seg.file
                regions.append(FileRegion(f.fd, start, stop - start, f))
                total += stop - start
                next_offset = nxt if nxt >= 0 else seg.next_offset
                if stop < end_pos or total >= max_bytes:
                    break
                offset = seg.next_offset
        except OSError as e:
            self._fail(e)
        return ReadResult(regions, total, first, next_offset, lso, leo, self._hw)

    def read_bytes(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytes:
        res = self.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        try:
            return b"".join(r if isinstance(r, bytes) else os.pread(r.fd, r.length, r.position) for r in res.regions)
        except OSError as e:
            self._fail(e)

    # ------------------------------------------------------------------ offsets by time
    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """First offset whose record timestamp >= ts_ms, with that timestamp. Special
        targets: -2 earliest (log start, -1), -1 latest (LEO, -1), -3 max timestamp."""
        self._check_online()
        if ts_ms == -2:
            return self.log_start_offset, -1
        if ts_ms == -1:
            return self._leo, -1
        if ts_ms == -3:
            return self.max_timestamp_offset()
        try:
            return self._offset_for_timestamp(ts_ms)
        except OSError as e:
            self._fail(e)

    def _offset_for_timestamp(self, ts: int):
        lso = self.log_start_offset
        for seg in self.segments:
            if seg.max_timestamp < ts or seg.next_offset <= lso:
                continue
            start_off = max(seg.time_index.lookup(ts), lso, seg.base_offset)
            _, pos = seg.offset_index.lookup(start_off)
            end = seg.size
            while pos < end:
                h = seg.read_header(pos)
                if h is None:
                    break
                if h.max_timestamp >= ts and h.last_offset >= lso:
                    for r in decode_records(seg.read(pos, h.size)):
                        if r.timestamp >= ts and r.offset >= lso:
                            return r.offset, r.timestamp
                pos += h.size
        return None

    def max_timestamp_offset(self) -> tuple[int, int]:
        self._check_online()
        best = None
        for seg in self.segments:
            if seg.size and seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return -1, -1
        try:
            found = best.translate(best.offset_of_max_timestamp, best.size)
            if found is not None:
                for r in decode_records(best.read(found[0], found[3])):
                    if r.timestamp == best.max_timestamp:
                        return r.offset, r.timestamp
        except OSError as e:
            self._fail(e)
        return best.offset_of_max_timestamp, best.max_timestamp

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        self._check_online()
        return self.epoch_cache.end_offset_for(epoch, self._leo)

    @property
    def latest_epoch(self) -> int:  # the newest leader epoch in the cache (-1: none)
        return self.epoch_cache.latest_epoch

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """A new leader records its epoch at election (Kafka's maybeAssignEpochStartOffset)."""
        self._check_online()
        try:
            self.epoch_cache.assign(epoch, start_offset)  # writes the checkpoint at once
        except OSError as e:
            self._fail(e)

    # ------------------------------------------------------------------ flush
    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding data below ``up_to`` (default: the log end offset), the
        leader-epoch checkpoint and the producer snapshot at ``up_to``, then move the recovery
        point to ``up_to`` (unless the log was truncated meanwhile). Safe to run in a worker
        thread while the event loop appends."""
        self._check_online()
        target = self._leo if up_to is None else min(up_to, self._leo)
        truncations = self._truncations
        try:
            if target > self.recovery_point or self._dir_dirty:
                for seg in self.segments:
                    if seg.base_offset >= target and seg.base_offset > self.recovery_point:
                        break
                    if seg.deleted or (seg.flushed_size >= seg.size and seg.next_offset <= self.recovery_point):
                        continue
                    with seg.pin_lock:
                        if seg.deleted:
                            continue
                        seg.pins += 1
                    try:
                        seg.flush()
                    finally:
                        with seg.pin_lock:
                            seg.pins -= 1
                if self._metadata_unsynced:
                    self._metadata_unsynced = False
                    fd = self.fs.open(os.path.join(self.dir, PARTITION_METADATA))
                    try:
                        self.fs.fsync(fd)
                    finally:
                        self.fs.close(fd)
                if self._dir_dirty:
                    self._dir_dirty = False
                    self.fs.fsync_dir(self.dir)
                if self.parent_unsynced:
                    self.parent_unsynced = False
                    self.fs.fsync_dir(os.path.dirname(self.dir))
                self.producer_state.sync_snapshot(target)
            self.epoch_cache.sync()
        except OSError as e:
            if self.closed:
                return
            self._fail(e)
        with self.lock:
            if target > self.recovery_point and truncations == self._truncations:
                self.recovery_point = target
            if self.pending_flush_offset <= self.recovery_point:
                self.pending_flush_offset = -1
        self.last_flush_ms = self._now()

    # ------------------------------------------------------------------ retention
    def _schedule_segment_delete(self, segs: list[LogSegment], now: int) -> None:
        for seg in segs:
            seg.rename_suffix(".deleted")
            seg.deleted = True
            self.dir_state.schedule_delete(now + self.config.file_delete_delay_ms, seg)

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention by time, size, and log start offset (retention.py). Returns segments deleted."""
        self._check_online()
        try:
            return retention.delete_old_segments(self, self._now() if now_ms is None else now_ms)
        except OSError as e:
            self._fail(e)

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: the log start offset moves to ``before_offset`` (at most the high
        watermark), the segments wholly below it go (retention.py). Returns the log start offset."""
        self._check_online()
        try:
            return retention.delete_records(self, before_offset, self._now())
        except OSError as e:
            self._fail(e)

    def delete_segments(self, victims: list[LogSegment], now: int, reason: str) -> None:
        """Delete ``victims``, the oldest segments (retention.py chose them; when they are all of
        them, a new active segment is rolled first), and move the log start offset to the first
        segment kept."""
        with self.lock:
            if len(victims) == len(self.segments):
                self._roll(now)
            keep = [s for s in self.segments if s not in victims]
            self._set_segments(keep)
            self._schedule_segment_delete(victims, now)
            new_start = max(self.log_start_offset, keep[0].base_offset)
            if new_start != self.log_start_offset:
                self.log_start_offset = new_start
                self.producer_state.on_high_watermark_updated(new_start)
                self.epoch_cache.truncate_from_start(new_start)
                self.log_start_dirty = True
        log.info("%s: deleted %d segment(s) by %s; log start offset %d", self.dir, len(victims), reason, new_start)

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (follower truncation); when something was
        removed, ``on_truncation`` then checkpoints the recovery points of the log directory if
        the file's is above the new one, so that recovery after a power cut re-reads what is
        written above ``offset`` from now on."""
        self._check_online()
        if offset >= self._leo:  # Kafka: an epoch taken at election and never written in goes anyway
            try:
                self.epoch_cache.truncate_from_end(self._leo)  # writes the checkpoint at once
            except OSError as e:
                self._fail(e)
            return
        now = self._now()
        try:
            with self.lock:
                segs = list(self.segments)
                if offset < segs[0].base_offset or offset < self.log_start_offset:
                    victims = segs
                    new = self._new_segment(offset, now)
                    self._set_segments([new])
                    self._schedule_segment_delete(victims, now)
                    self.log_start_offset = offset
                else:
                    keep = [s for s in segs if s.base_offset < offset] or [segs[0]]
                    victims = [s for s in segs if s not in keep]
                    self._set_segments(keep)
                    self._schedule_segment_delete(victims, now)
                    active = keep[-1]
                    active.truncate_to(offset)
                    active.offset_index.resize(active.offset_index.max_entries * 8)
                    active.time_index.resize(active.time_index.max_entries * 12)
                self._leo = offset
                self._truncations += 1
                self._recent = None
                self.recovery_point = min(self.recovery_point, offset)
                self._hw = min(self._hw, offset)
                self.cleaner_checkpoint = min(self.cleaner_checkpoint, offset)
                self.epoch_cache.truncate_from_end(offset)
                self._txn_segments = None
                rebuild_producer_state(self.producer_state, self.segments, self.log_start_offset, offset)
                self.producer_state.on_high_watermark_updated(self._hw)
        except OSError as e:
            self._fail(e)
        if self.on_truncation is not None:
            self.on_truncation(self)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and start empty at ``offset`` (a follower that fell below its
        leader's log start offset: what it has is no longer anywhere else)."""
        self._check_online()
        now = self._now()
        try:
            with self.lock:
                victims = list(self.segments)
                self._set_segments([self._new_segment(offset, now)])
                self._schedule_segment_delete(victims, now)
                self._truncations += 1
                self.log_start_offset = self._leo = self.recovery_point = self._hw = offset
                self.cleaner_checkpoint = offset
                self.log_start_dirty = True
                self.epoch_cache.clear()
                rebuild_producer_state(self.producer_state, self.segments, offset, offset)
        except OSError as e:
            self._fail(e)
        if self.on_truncation is not None:
            self.on_truncation(self)

    # ------------------------------------------------------------------ close
    def close(self, *, clean: bool = True) -> None:
        """Flush, snapshot producer state at LEO, close files. With ``clean`` the indexes are
        trimmed as on roll."""
        if self.closed:
            return
        try:
            if clean and not self.dir_state.offline:
                self.flush()
                active = self.segments[-1]
                active.on_roll()
                active.offset_index.flush()
                active.time_index.flush()
                self.producer_state.take_snapshot(self._leo, sync=True)
        except (OSError, StorageError) as e:
            if not self.dir_state.offline:
                self.dir_state.fail(e)
        finally:
            self.closed = True
            for seg in self.segments:
                try:
                    seg.close()
                except OSError:
                    pass

    # ------------------------------------------------------------------ cleaner hooks
    def replace_segments(self, old: list[LogSegment], new: LogSegment, now: int) -> bool:
        """Swap cleaned segment ``new`` (files suffixed .swap) in for ``old``.

        Order (crash safe, see recovery): old files -> .deleted, .swap -> final names.
        Returns False (and discards ``new``) when ``old`` changed meanwhile."""
        with self.lock:
            segs = list(self.segments)
            if not all(any(o is s for s in segs) for o in old) or old[-1] is segs[-1]:
                new.delete_files()
                return False
            i = next(k for k, s in enumerate(segs) if s is old[0])
            for o in old:
                o.rename_suffix(".deleted")
                o.deleted = True
            new.rename_suffix("")
            segs[i : i + len(old)] = [new]
            self._set_segments(segs)
            for o in old:
                self.dir_state.schedule_delete(now + self.config.file_delete_delay_ms, o)
            return True
