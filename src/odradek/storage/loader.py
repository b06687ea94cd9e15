"""Loading one partition's log from its directory, with recovery after an unclean stop
(Kafka's ``LogLoader``).

`LogLoader.load` reads the directory and returns a `LoadedLog` (segments and offsets) that the
`Log` adopts; it fills the log's `LeaderEpochCache` and `ProducerStateManager` on the way.
Steps, in order:

1. leftovers of interrupted work go: ``.deleted``, ``.cleaned`` and ``.tmp`` files;
2. every ``<base>.log`` is opened (`LogSegment.open`: files trusted, an index that is missing or
   fails its checks is rebuilt from the log);
3. interrupted cleaner swaps are completed: a ``.log.swap`` replaces every segment whose base
   offset falls in its offset range (Kafka's rule) and takes its final name; leftover ``.swap``
   files and indexes without a log go;
4. the leader-epoch checkpoint is loaded; when it is missing, empty or malformed and the log
   has data, the cache is rebuilt from the batch headers (the first batch of each segment,
   and every batch of a segment in which the epoch changes) and written back;
5. a segment whose ``.txnindex`` failed its checks is recovered alone (step 6's way, that one
   segment), as Kafka's loadSegmentFiles recovers a segment with a corrupt index;
6. unclean stop only (no clean-shutdown marker): the *unflushed* segments, from the one holding
   the recovery point to the end, are recovered, as Kafka's recoverLog: every batch is validated
   (framing, magic, CRC32C, offsets increasing), the indexes are rebuilt, the leader-epoch
   cache entries from there on come from the batch headers, and at the first invalid or
   incomplete batch the segment is cut and the unflushed segments after it are deleted; so are
   they after a segment that ends before the next one's base offset (a hole: the segment lost
   its unflushed tail to a power cut while the file of the segment rolled after it survived;
   Kafka's loader accepts such a hole, odradek takes the log end to be there). No legitimate
   hole lies there: the cleaner rewrites only segments below the checkpointed recovery point
   (cleaner.py), and the leader assigns consecutive offsets. A follower of a compacted topic
   can roll at a batch past its log end (whole batches cleaned away on its leader): after an
   unclean stop it drops the segments after such a boundary above its recovery point, and
   fetches them again. The
   segments below the recovery point were flushed (fsynced) before it moved there, and are
   not read: a checksum error in one of them is not looked for here (Kafka's rule too; a
   follower's fetch or a consumer's CRC check finds it). The transaction indexes of the
   recovered segments are rebuilt as well: the producer state is rebuilt up to the first of
   them (step 9's way), then each batch replayed updates it, and each ABORT marker that ends a
   transaction adds its entry, with the last stable offset of that moment (Kafka's
   recoverSegment);
7. an empty directory gets its first segment, at the log start offset;
8. offsets: log end offset from the last segment; log start offset, recovery point and high
   watermark from the checkpoints, clamped to what is there; the epoch cache is trimmed to them;
9. producer state: the newest valid snapshot at or below the log end offset, then a replay of
   the batch headers after it (`rebuild_producer_state`, which truncation uses too);
10. when recovery cut nothing (the common case: a kill -9, the page cache kept every byte),
    nothing is fsynced here, as Kafka's loader (its recoverLog keeps the recovery point at
    min(checkpoint, log end), and writes the leader-epoch checkpoint without a sync): the
    recovery point stays where it is, the segments read again are marked unflushed
    (``flushed_size``), so the log's next flush fsyncs them before it moves the point, and until
    then the next unclean stop reads them again; the epoch checkpoint is written and fsynced by
    that flush (its entries from the recovery point on are rebuilt from the batches if lost).
    Three fsyncs per partition with data above its recovery point took a restarted broker
    35 s of its 49 s back into the ISRs at 2,000 partitions. When recovery cut something, what
    it changed is made durable (the recovered segments fsynced, the epoch checkpoint written)
    and the recovery point becomes the log end offset.

`LoadedLog.recovered` names the segments step 6 read, and how many bytes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.protocol.records import CONTROL_MASK, HEADER_SIZE, BatchHeader

from .checkpoint import LeaderEpochCache
from .config import LogConfig
from .fs import FileSystem
from .producer_state import ProducerStateManager, control_record
from .segment import LogSegment, new_segment, offset_from_name, open_segment
from .txn_index import AbortedTxn

__all__ = ["LogLoader", "LoadedLog", "rebuild_producer_state"]

log = logging.getLogger("odradek.storage")

_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".tmp")


@dataclass(slots=True)
class LoadedLog:
    """A log's state as found on disk (after recovery)."""

    segments: list[LogSegment]  # ascending base offsets; the last one is the active segment
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    high_watermark: int
    created_segment: bool  # the directory was empty: its first segment is new (fsync the directory)
    recovered: list[tuple[int, int]] = field(default_factory=list)  # (base offset, bytes read) step 6 read


class LogLoader:
    """Loads one log directory. ``epoch_cache`` and ``producer_state`` belong to the log being
    loaded; they are filled in place."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        config: LogConfig,
        epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
    ) -> None:
        self.fs = fs
        self.dir = directory
        self.config = config
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        self.truncated_bytes = 0  # cut from the segments while loading (indexes' checks, step 6)

    def load(
        self,
        *,
        now_ms: int,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        clean: bool = False,
    ) -> LoadedLog:
        """Load the directory. ``clean``: the clean-shutdown marker was found (files trusted);
        the offsets come from the log directory's checkpoints; ``now_ms`` dates a new segment."""
        ordered = self._open_segments()
        self.truncated_bytes = sum(s.truncated_bytes for s in ordered)  # and step 6's cuts
        epochs = self.epoch_cache
        if not epochs.load() and any(s.size for s in ordered):
            self._rebuild_epoch_cache(ordered)
        # the first unflushed segment: the one holding the recovery point (unclean stop only)
        first_unflushed = None
        if not clean and ordered:
            first_unflushed = max((i for i, s in enumerate(ordered) if s.base_offset <= recovery_point), default=0)
        log_start_offset = max(log_start_offset, 0)
        for i, seg in enumerate(ordered):
            if not seg.txn_index_ok and (first_unflushed is None or i < first_unflushed):
                log.warning("%s: rebuilding the transaction index of segment %d", self.dir, seg.base_offset)
                self._recover_segment(ordered, i, log_start_offset)
        recovered: list[tuple[int, int]] = []
        if first_unflushed is not None:
            recovered = self._recover_unflushed(ordered, first_unflushed, recovery_point, log_start_offset)
        created = not ordered
        if created:
            ordered = [new_segment(self.fs, self.dir, log_start_offset, self.config, now_ms)]
        leo = ordered[-1].next_offset
        start = min(max(log_start_offset, ordered[0].base_offset), leo)
        loaded = LoadedLog(
            segments=ordered,
            log_start_offset=start,
            log_end_offset=leo,
            recovery_point=leo if clean else min(max(recovery_point, 0), leo),
            high_watermark=min(max(high_watermark, start), leo),
            created_segment=created,
            recovered=recovered,
        )
        epochs.truncate_from_end(leo)
        epochs.truncate_from_start(start)
        active = ordered[-1]
        active.offset_index.resize(active.offset_index.max_entries * active.offset_index.ENTRY)
        active.time_index.resize(active.time_index.max_entries * active.time_index.ENTRY)
        rebuild_producer_state(self.producer_state, ordered, start, leo)
        if not clean and not self.truncated_bytes:
            # nothing cut: the recovery point stays where it is (as Kafka's), and the segments
            # read again are fsynced by the log's next flush (flushed_size says not yet), not one
            # by one here (10,000 partitions: 30,000 fsyncs at every restart after a kill -9)
            read = {base for base, _ in recovered}
            for seg in ordered:
                if seg.base_offset in read and seg.size:
                    seg.flushed_size = 0
                elif seg.flushed_size < seg.size or (seg.rebuilt_index and seg.base_offset not in read):
                    seg.flush()
            if epochs.dirty:
                epochs.write()  # entries at or above the recovery point: rebuilt from the batches if lost
            return loaded
        # recovery cut something: made durable; after an unclean stop everything up to LEO is then recovered
        for seg in ordered:
            if seg.flushed_size < seg.size or seg.rebuilt_index:
                seg.flush()
        if epochs.dirty or not clean:
            epochs.write(sync=True)
        if not clean:
            loaded.recovery_point = leo
        return loaded

    def _open_segments(self) -> list[LogSegment]:
        """Steps 1-3: the segments in the directory, ascending, swaps completed."""
        fs = self.fs
        for name in fs.listdir(self.dir):
            if name.endswith(_LEFTOVER_SUFFIXES):
                fs.remove(os.path.join(self.dir, name))
        names = fs.listdir(self.dir)
        segs: dict[int, LogSegment] = {}
        for name in sorted(names):
            if name.endswith(".log"):
                segs[offset_from_name(name)] = open_segment(fs, self.dir, offset_from_name(name), self.config)
        # complete interrupted cleaner swaps (Kafka's rule: the .swap replaces every segment
        # whose base offset falls in its offset range)
        for name in sorted(n for n in names if n.endswith(".log.swap")):
            base = offset_from_name(name)
            swap = open_segment(fs, self.dir, base, self.config, ".swap")
            end = max(swap.next_offset, base + 1)
            for b in [b for b in segs if base <= b < end]:
                segs.pop(b).delete_files()
            swap.rename_suffix("")
            segs[base] = swap
            log.info("%s: completed interrupted segment swap at offset %d", self.dir, base)
        for name in fs.listdir(self.dir):
            if name.endswith(".swap") or (
                name.endswith((".index", ".timeindex", ".txnindex")) and offset_from_name(name) not in segs
            ):
                fs.remove(os.path.join(self.dir, name))
        ordered = [segs[b] for b in sorted(segs)]
        for seg in ordered:
            if seg.rebuilt_index:
                log.warning(
                    "%s: rebuilt missing or corrupt index of %s%s",
                    self.dir,
                    seg.log_path,
                    f", truncated {seg.truncated_bytes} bytes" if seg.truncated_bytes else "",
                )
        return ordered

    def _rebuild_epoch_cache(self, ordered: list[LogSegment]) -> None:
        """Step 4: the leader-epoch cache from the batch headers. Epochs never decrease along a
        log, so a segment whose first batch has the epoch of the next segment's first batch holds
        that epoch only; the others (and the last) are walked batch by batch."""
        epochs = self.epoch_cache
        firsts = [s.read_header(0) if s.size else None for s in ordered]
        walked = 0
        for i, seg in enumerate(ordered):
            first = firsts[i]
            if first is None:
                continue
            nxt = next((h for h in firsts[i + 1 :] if h is not None), None)
            if nxt is not None and nxt.partition_leader_epoch == first.partition_leader_epoch:
                if first.partition_leader_epoch > epochs.latest_epoch:
                    epochs.assign(first.partition_leader_epoch, first.base_offset)
                continue
            walked += 1
            pos = 0
            while pos < seg.size:
                h = seg.read_header(pos)
                if h is None or h.size < HEADER_SIZE or pos + h.size > seg.size:
                    break
                if h.partition_leader_epoch > epochs.latest_epoch:
                    epochs.assign(h.partition_leader_epoch, h.base_offset)
                pos += h.size
        log.warning(
            "%s: leader-epoch-checkpoint missing, empty or malformed: rebuilt from the batch headers "
            "(%d segments, %d walked batch by batch): %s",
            self.dir,
            len(ordered),
            walked,
            epochs.entries,
        )

    def _replayer(self, seg_of: Callable[[], LogSegment]) -> Callable[[int, BatchHeader, memoryview], None]:
        """What recovery does with each valid batch: the leader-epoch cache learns its epoch, the
        producer state replays it, and an ABORT marker that ends a transaction adds its entry to
        the transaction index of the segment being recovered (``seg_of()``)."""
        epochs, producers = self.epoch_cache, self.producer_state

        def on_batch(pos: int, h: BatchHeader, mv: memoryview) -> None:
            if h.partition_leader_epoch >= 0:
                epochs.assign(h.partition_leader_epoch, h.base_offset)
            if h.producer_id >= 0:
                c = control_record(mv, h)
                done = producers.update(h, None if c is None else c[0], -1 if c is None else c[1])
                if done is not None:
                    if done.aborted:
                        lso = producers.last_stable_offset_after(done)
                        seg_of().txn_index.append(
                            AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso)
                        )
                    producers.complete_txn(done)

        return on_batch

    def _recover_segment(self, ordered: list[LogSegment], i: int, log_start_offset: int) -> None:
        """Step 5: recover segment ``i`` alone (its indexes, transaction index included, rebuilt;
        cut at its first invalid batch, the segments after it kept, as Kafka's recoverSegment)."""
        seg = ordered[i]
        rebuild_producer_state(
            self.producer_state, ordered[:i], log_start_offset, seg.base_offset, keep_later_snapshots=True
        )
        seg.txn_index.reset()
        dropped = seg.recover(self._replayer(lambda: seg))
        seg.rebuilt_index = True
        seg.txn_index_ok = True
        if dropped:
            log.warning("%s: segment %d cut at its first invalid batch (%d bytes)", self.dir, seg.base_offset, dropped)

    def _recover_unflushed(
        self, ordered: list[LogSegment], start: int, recovery_point: int, log_start_offset: int
    ) -> list[tuple[int, int]]:
        """Step 6, unclean stop: revalidate the segments from ``start`` (the one holding the
        recovery point) on; cut ``ordered`` (in place) where the valid log ends. Returns (base
        offset, bytes read) of each segment read."""
        expected = ordered[start].base_offset
        truncated_bytes = sum(s.truncated_bytes for s in ordered)
        rebuild_producer_state(self.producer_state, ordered[:start], log_start_offset, expected)
        current = [ordered[start]]
        on_batch = self._replayer(lambda: current[0])
        self.epoch_cache.truncate_from_end(expected)
        recovered: list[tuple[int, int]] = []
        cut_at = None
        for i in range(start, len(ordered)):
            seg = current[0] = ordered[i]
            if seg.base_offset < expected:
                cut_at = i
                break
            seg.txn_index.reset()
            size = seg.size
            dropped = seg.recover(on_batch, start_offset=expected)
            recovered.append((seg.base_offset, size))
            seg.rebuilt_index = True
            seg.txn_index_ok = True
            expected = seg.next_offset
            if dropped:
                truncated_bytes += dropped
                cut_at = i + 1
                break
            if i + 1 < len(ordered) and expected < ordered[i + 1].base_offset:
                # a hole above the recovery point: this segment lost its tail to a power cut
                # before the flush its roll asked for, the later one's file survived
                log.warning(
                    "%s: segment %d ends at offset %d, before the next segment (%d): its unflushed tail "
                    "was lost, the log ends there",
                    self.dir,
                    seg.base_offset,
                    expected,
                    ordered[i + 1].base_offset,
                )
                cut_at = i + 1
                break
        if cut_at is not None:
            for seg in ordered[cut_at:]:
                truncated_bytes += seg.size
                log.warning("%s: deleting unflushed segment %s beyond the recovered log end", self.dir, seg.log_path)
                seg.delete_files()
            del ordered[cut_at:]
        read = sum(n for _, n in recovered)
        self.truncated_bytes = truncated_bytes
        if truncated_bytes:
            log.warning(
                "%s: recovery from offset %d read %d segments (%d bytes), truncated %d bytes (log end offset %d)",
                self.dir,
                recovery_point,
                len(recovered),
                read,
                truncated_bytes,
                ordered[-1].next_offset,
            )
        else:
            log.info(
                "%s: recovery from offset %d read %d segments (%d bytes), nothing truncated",
                self.dir,
                recovery_point,
                len(recovered),
                read,
            )
        return recovered


def rebuild_producer_state(
    producer_state: ProducerStateManager,
    segments,
    log_start_offset: int,
    to_offset: int,
    *,
    keep_later_snapshots: bool = False,
) -> None:
    """Producer state as of ``to_offset``: the newest valid snapshot at or below it (later ones
    are deleted, unless ``keep_later_snapshots``: the log above ``to_offset`` stays as it is),
    then the batches of ``segments`` from there (or from the log start offset) replayed up to
    ``to_offset``."""
    snap = producer_state.load_latest(to_offset)
    if not keep_later_snapshots:
        producer_state.delete_snapshots(above=to_offset, keep_latest=False)
    start = log_start_offset if snap is None else max(snap, log_start_offset)
    if start < to_offset:
        _replay(producer_state, segments, start, to_offset)


def _replay(producer_state: ProducerStateManager, segments, from_offset: int, to_offset: int) -> None:
    """Replay the batch headers of ``segments`` in [from_offset, to_offset) into the producer
    state; a marker completes its transaction (the transaction indexes are not touched)."""
    for seg in segments:
        if seg.next_offset <= from_offset or seg.base_offset >= to_offset:
            continue
        start = seg.translate(from_offset, seg.size)
        if start is None:
            continue
        for _pos, h, mv in seg.scan(start[0], seg.size, validate=False):
            if h.base_offset >= to_offset:
                break
            if h.producer_id < 0:
                continue
            if h.attributes & CONTROL_MASK:
                c = control_record(mv, h)
                done = producer_state.update(h, None if c is None else c[0], -1 if c is None else c[1])
                if done is not None:
                    producer_state.complete_txn(done)
            else:
                producer_state.update(h)
