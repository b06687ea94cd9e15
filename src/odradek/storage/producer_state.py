"""Idempotent / transactional producer state of one partition (Kafka's ProducerStateManager).

Per producer id: epoch, the last 5 batches (first seq, last seq, first offset, last offset),
the first offset of its ongoing transaction, the coordinator epoch of its last marker.

Transactions, as Kafka tracks them: a transactional data batch of a producer with no open
transaction starts one (``ongoing``, by first offset). A control batch (COMMIT or ABORT marker)
ends it: `record_appended` / `update` return a `CompletedTxn` for it (none for a marker of a
producer with no open transaction: an empty transaction changes nothing). The log then asks
`last_stable_offset_after` for the ABORT's ``.txnindex`` entry and calls `complete_txn`, which
moves the transaction to ``unreplicated`` until the high watermark passes its marker
(`on_high_watermark_updated`). The first unstable offset, which caps the last stable offset,
is the lowest first offset of both. Snapshots store each producer's open transaction, not the
completed ones (as Kafka's): after a reload, markers above the snapshot are replayed.

Snapshot file ``<20-digit offset>.snapshot`` (state as of that offset, i.e. after every batch
below it), big endian::

    b"ODPS" | version u16 = 1 | crc32c(body) u32 | body
    body = offset i64 | count i32 | count * entry
    entry = producer_id i64 | epoch i16 | coordinator_epoch i32 | txn_first_offset i64 (-1: none)
            | last_timestamp i64 | n u8 | n * (first_seq i32, last_seq i32, first_offset i64, last_offset i64)
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import insort
from typing import NamedTuple

from odradek.protocol.records import CONTROL_MASK, BatchHeader, crc32c, decode_records

from .errors import (
    StorageInvalidProducerEpochError,
    StorageOutOfOrderSequenceError,
    StorageTransactionCoordinatorFencedError,
)
from .fs import FileSystem

__all__ = ["ProducerStateManager", "ProducerEntry", "CompletedTxn", "SNAPSHOT_SUFFIX", "control_type", "control_record"]

log = logging.getLogger("odradek.storage")

SNAPSHOT_SUFFIX = ".snapshot"
NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1
_MAGIC = b"ODPS"
_HDR = struct.Struct(">4sHI")
_BODY_HDR = struct.Struct(">qi")
_ENTRY = struct.Struct(">qhiqqB")
_BATCH = struct.Struct(">iiqq")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker (Kafka's CompletedTxn): ``last_offset`` is the marker's."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerEntry:
    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "txn_first_offset", "last_timestamp")

    def __init__(self, producer_id: int, epoch: int = -1) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: list[tuple[int, int, int, int]] = []
        self.coordinator_epoch = -1
        self.txn_first_offset = -1
        self.last_timestamp = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1][3] if self.batches else -1


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def control_record(buffer, h: BatchHeader) -> tuple[int, int] | None:
    """(type, coordinator epoch) of the control record in the control batch ``h``
    (``h.position`` indexes ``buffer``): type 0 abort, 1 commit; the coordinator epoch -1 when
    the record has no readable value. None for a data batch, and for a control batch whose
    first record is missing or unreadable (a cleaned-out marker)."""
    if not h.is_control:
        return None
    try:
        recs = decode_records(buffer, h.position)
    except ValueError:
        return None
    if not recs or recs[0].key is None or len(recs[0].key) < 4:
        return None
    ctype = _CONTROL_KEY.unpack_from(recs[0].key, 0)[1]
    value = recs[0].value
    epoch = _CONTROL_VALUE.unpack_from(value, 0)[1] if value is not None and len(value) >= 6 else -1
    return ctype, epoch


def control_type(buffer, h: BatchHeader) -> int | None:
    """The type of the control record in the control batch ``h``: 0 abort, 1 commit (see
    `control_record`)."""
    c = control_record(buffer, h)
    return None if c is None else c[0]


class ProducerStateManager:
    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.dir = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # open transactions: first offset -> producer id
        # transactions ended by a marker at or above the high watermark: first offset -> (producer id, marker offset)
        self.unreplicated: dict[int, tuple[int, int]] = {}
        self._snapshots: list[int] | None = None  # snapshot file offsets; None: list the directory

    # ------------------------------------------------------------------ append path
    def find_duplicate(self, headers: list[BatchHeader], buffer=None, *, client: bool = True) -> tuple[int, int] | None:
        """Check the batches of one append in order (`check`); the original (first offset, last
        offset) of the first duplicate, or None. ``client=False`` (a coordinator's append):
        producer epochs are checked, sequences are not and nothing is a duplicate, as Kafka
        checks sequences of client appends only. Raises StorageInvalidProducerEpochError /
        StorageOutOfOrderSequenceError; with the appended ``buffer``, StorageTransactionCoordinatorFencedError
        for a marker of an older coordinator epoch than the producer's last (Kafka checks it
        for every leader append)."""
        pending: dict[int, tuple[int, int]] = {}
        for h in headers:
            if h.producer_id >= 0:
                if buffer is not None and h.attributes & CONTROL_MASK:
                    self._check_coordinator_epoch(buffer, h)
                dup = self.check(h, pending, client=client)
                if dup is not None:
                    return dup
        return None

    def _check_coordinator_epoch(self, buffer, h: BatchHeader) -> None:
        e = self.producers.get(h.producer_id)
        c = control_record(buffer, h)
        if e is not None and c is not None and e.coordinator_epoch > c[1]:
            raise StorageTransactionCoordinatorFencedError(
                f"producer {h.producer_id}: marker of coordinator epoch {c[1]} (zombie), "
                f"{e.coordinator_epoch} (current)"
            )

    def record_appended(
        self,
        buffer,
        headers: list[BatchHeader],
        written: list[tuple[int, int, int, int]],
        leader_epoch: int | None,
    ) -> list[CompletedTxn] | None:
        """Record the batches of one append as written. ``written``: per batch (position, last
        offset, max timestamp, size), as the log wrote them; ``leader_epoch``: the epoch stamped on
        them, None when they kept their own (replication). Returns the transactions the
        append's markers ended (None: none), for the log to index and `complete_txn` in
        order after the whole append, as Kafka does."""
        completed = None
        for h, info in zip(headers, written):
            if h.producer_id < 0:
                continue
            if not h.attributes & CONTROL_MASK:
                last = info[1]
                self.record(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.last_sequence,
                    last - h.last_offset_delta,
                    last,
                    info[2],
                    h.is_transactional,
                )
                continue
            c = control_record(buffer, h)
            if leader_epoch is not None:
                h = h._replace(
                    base_offset=info[1] - h.last_offset_delta,
                    max_timestamp=info[2],
                    partition_leader_epoch=leader_epoch,
                )
            done = self.update(h, None if c is None else c[0], -1 if c is None else c[1])
            if done is not None:
                if completed is None:
                    completed = [done]
                else:
                    completed.append(done)
        return completed

    def check(
        self, h: BatchHeader, pending: dict[int, tuple[int, int]], *, client: bool = True
    ) -> tuple[int, int] | None:
        """Validate one batch of an append against the state (and earlier batches of the
        same append in ``pending``: pid -> (epoch, last seq)). Returns the original
        (first offset, last offset) when the batch is a duplicate; raises
        StorageInvalidProducerEpochError / StorageOutOfOrderSequenceError."""
        pid = h.producer_id
        e = self.producers.get(pid)
        if (
            e is not None
            and e.batches
            and h.base_sequence == e.batches[-1][1] + 1
            and h.producer_epoch == e.epoch
            and not h.attributes & CONTROL_MASK
            and pid not in pending
            and client
        ):
            # the common case: the next batch of a known producer (no retained batch can
            # start at that sequence, so it is no duplicate)
            pending[pid] = (e.epoch, h.last_sequence)
            return None
        if pid in pending:
            cur_epoch, cur_last = pending[pid]
        elif e is not None:
            cur_epoch, cur_last = e.epoch, e.last_seq
            if client and h.producer_epoch == e.epoch and not h.is_control and h.base_sequence >= 0:
                last_seq = h.last_sequence
                for first_seq, lseq, first_off, last_off in e.batches:
                    if first_seq == h.base_sequence and lseq == last_seq:
                        return first_off, last_off
        else:
            cur_epoch, cur_last = -1, -1
        epoch = h.producer_epoch
        if epoch < cur_epoch:
            raise StorageInvalidProducerEpochError(
                f"producer {pid}: epoch {epoch} is older than the current epoch {cur_epoch}"
            )
        if h.is_control or not client:
            # A marker, or a coordinator's batch (the group coordinator's transactional offset
            # commits): epoch-checked only (Kafka checks sequences of client appends only).
            pending[pid] = (epoch, cur_last if epoch == cur_epoch else -1)
            return None
        seq = h.base_sequence
        if epoch != cur_epoch:
            if seq != 0 and cur_epoch != -1:
                raise StorageOutOfOrderSequenceError(
                    f"producer {pid}: new epoch {epoch} must start at sequence 0, got {seq}"
                )
        elif not _in_sequence(cur_last, seq):
            raise StorageOutOfOrderSequenceError(
                f"producer {pid} epoch {epoch}: out of order sequence {seq}, expected {cur_last + 1}"
            )
        pending[pid] = (epoch, h.last_sequence)
        return None

    def update(
        self, h: BatchHeader, control_type: int | None = None, coordinator_epoch: int = -1
    ) -> CompletedTxn | None:
        """Record an appended batch (with its final offsets). For a control batch,
        ``control_type`` and ``coordinator_epoch`` are its record's (see `control_record`;
        None: a marker whose record the cleaner removed, which ends nothing); the transaction
        it ends is returned (not yet completed: see `complete_txn`)."""
        if not h.is_control:
            self.record(
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.last_sequence,
                h.base_offset,
                h.last_offset,
                h.max_timestamp,
                h.is_transactional,
            )
            return None
        if control_type is None:
            return None  # an empty control batch: its transaction was cleaned away (Kafka skips it)
        pid = h.producer_id
        e = self.producers.get(pid)
        if e is None:
            e = self.producers[pid] = ProducerEntry(pid, h.producer_epoch)
        if h.producer_epoch != e.epoch:
            e.epoch = h.producer_epoch
            e.batches.clear()
        e.last_timestamp = h.max_timestamp
        if coordinator_epoch >= 0:
            e.coordinator_epoch = coordinator_epoch
        first = e.txn_first_offset
        if first < 0:
            return None
        e.txn_first_offset = -1
        return CompletedTxn(pid, first, h.base_offset, control_type == 0)

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """The last stable offset once ``txn`` is complete (Kafka's lastStableOffset): the first
        offset of the earliest open transaction of another producer, else the marker's offset
        + 1. Asked before `complete_txn`."""
        others = [first for first, pid in self.ongoing.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        """``txn`` ended: it stays unstable until the high watermark passes its marker."""
        self.ongoing.pop(txn.first_offset, None)
        self.unreplicated[txn.first_offset] = (txn.producer_id, txn.last_offset)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the high watermark are stable now
        (also called with the log start offset when it moves, as Kafka's
        onLogStartOffsetIncremented)."""
        if self.unreplicated:
            done = [first for first, (_pid, last) in self.unreplicated.items() if last < high_watermark]
            for first in done:
                del self.unreplicated[first]

    def record(
        self,
        pid: int,
        epoch: int,
        base_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        transactional: bool,
    ) -> None:
        """Record an appended data batch (``update`` for one that is not a control batch)."""
        e = self.producers.get(pid)
        if e is None:
            e = self.producers[pid] = ProducerEntry(pid, epoch)
        if epoch != e.epoch:
            e.epoch = epoch
            e.batches.clear()
        e.last_timestamp = max_timestamp
        if base_seq >= 0:
            b = e.batches
            b.append((base_seq, last_seq, first_offset, last_offset))
            if len(b) > NUM_BATCHES_TO_RETAIN:
                del b[0]
        if transactional and e.txn_first_offset < 0:
            e.txn_first_offset = first_offset
            self.ongoing[first_offset] = pid

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle longer than `producer.id.expiration.ms` (by their last
        batch timestamp), except those with an open transaction. Returns how many."""
        cutoff = now_ms - expiration_ms
        gone = [pid for pid, e in self.producers.items() if e.txn_first_offset < 0 and 0 <= e.last_timestamp < cutoff]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def first_unstable_offset(self) -> int | None:
        """The lowest first offset of an open transaction or of a completed one whose marker the
        high watermark has not passed (Kafka's firstUnstableOffset); None when there is none."""
        ongoing = self.ongoing
        unreplicated = self.unreplicated
        if not ongoing:  # asked on every fetch: no scan over all producers
            return min(unreplicated) if unreplicated else None
        first = min(ongoing)
        return min(first, min(unreplicated)) if unreplicated else first

    def last_batch_offsets(self) -> dict[int, int]:
        """producer id -> last offset of its latest batch (compaction keeps those batches)."""
        return {pid: e.last_offset for pid, e in self.producers.items() if e.batches}

    # ------------------------------------------------------------------ snapshots
    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files, ascending. Listed from the directory once, then
        kept up to date by take_snapshot/remove_snapshot (a roll must not list a directory
        of thousands of segment files)."""
        if self._snapshots is None:
            out = []
            for name in self.fs.listdir(self.dir):
                if name.endswith(SNAPSHOT_SUFFIX):
                    try:
                        out.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                    except ValueError:
                        pass
            self._snapshots = sorted(out)
        return list(self._snapshots)

    def remove_snapshot(self, offset: int) -> None:
        offs, self._snapshots = self._snapshots, None  # unknown if the removal fails
        self.fs.remove(self.snapshot_path(offset))
        if offs is not None:
            if offset in offs:
                offs.remove(offset)
            self._snapshots = offs

    def retain_snapshots(self, n: int) -> None:
        """Remove all but the newest ``n`` snapshots."""
        for off in self.snapshot_offsets()[:-n]:
            self.remove_snapshot(off)

    def encode(self, offset: int) -> bytes:
        parts = [_BODY_HDR.pack(offset, len(self.producers))]
        for e in self.producers.values():
            parts.append(
                _ENTRY.pack(
                    e.producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset, e.last_timestamp, len(e.batches)
                )
            )
            parts.extend(_BATCH.pack(*b) for b in e.batches)
        body = b"".join(parts)
        return _HDR.pack(_MAGIC, 1, crc32c(body)) + body

    @staticmethod
    def decode(data: bytes) -> tuple[int, dict[int, ProducerEntry]]:
        if len(data) < _HDR.size + _BODY_HDR.size:
            raise ValueError("snapshot too short")
        magic, version, crc = _HDR.unpack_from(data, 0)
        body = memoryview(data)[_HDR.size :]
        if magic != _MAGIC or version != 1 or crc32c(body) != crc:
            raise ValueError("bad snapshot header or CRC")
        offset, count = _BODY_HDR.unpack_from(body, 0)
        p = _BODY_HDR.size
        producers = {}
        for _ in range(count):
            pid, epoch, cepoch, txn, last_ts, n = _ENTRY.unpack_from(body, p)
            p += _ENTRY.size
            e = ProducerEntry(pid, epoch)
            e.coordinator_epoch, e.txn_first_offset, e.last_timestamp = cepoch, txn, last_ts
            for _ in range(n):
                e.batches.append(_BATCH.unpack_from(body, p))
                p += _BATCH.size
            producers[pid] = e
        return offset, producers

    def take_snapshot(self, offset: int, *, sync: bool = False) -> None:
        offs = self.snapshot_offsets()
        self._snapshots = None  # unknown if the write fails half way
        self.fs.write_file_atomic(self.snapshot_path(offset), self.encode(offset), sync=sync)
        if offset not in offs:
            insort(offs, offset)
        self._snapshots = offs

    def sync_snapshot(self, offset: int) -> None:
        """fsync the snapshot at ``offset`` if there is one (taken at a roll without fsync; the
        roll's flush makes it durable, as Kafka's flushProducerStateSnapshot), from a worker
        thread: it reads no state of ours. Raises OSError."""
        try:
            fd = self.fs.open(self.snapshot_path(offset))
        except FileNotFoundError:  # none at that offset, or deleted meanwhile (retention, truncation)
            return
        try:
            self.fs.fsync(fd)
        finally:
            self.fs.close(fd)

    def load_latest(self, max_offset: int) -> int | None:
        """Load the newest valid snapshot at or below ``max_offset``; return its offset."""
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = {}
        for off in reversed(self.snapshot_offsets()):
            if off > max_offset:
                continue
            try:
                snap_off, producers = self.decode(self.fs.read_file(self.snapshot_path(off)))
                if snap_off != off:
                    raise ValueError("offset mismatch")
            except (ValueError, struct.error) as e:
                log.warning("%s: ignoring corrupt producer snapshot %d: %s", self.dir, off, e)
                self.remove_snapshot(off)
                continue
            self.producers = producers
            self.ongoing = {e.txn_first_offset: pid for pid, e in producers.items() if e.txn_first_offset >= 0}
            return off
        return None

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None, keep_latest: bool = True) -> None:
        offs = self.snapshot_offsets()
        latest = offs[-1] if offs else None
        for off in offs:
            if (below is not None and off < below and not (keep_latest and off == latest)) or (
                above is not None and off > above
            ):
                self.remove_snapshot(off)
