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
4. the leader-epoch checkpoint is loaded;
5. unclean stop only (no clean-shutdown marker), or a ``.txnindex`` that failed its checks
   (then from that segment): every batch from the segment holding the recovery point on is
   validated (framing, magic, CRC32C, offsets increasing), the indexes are rebuilt, the
   leader-epoch cache is rebuilt from the batch headers, and the log is cut at the first
   invalid or incomplete batch (later segments are deleted). The transaction indexes of these
   segments are rebuilt too: the producer state is rebuilt up to the first of them (step 8's
   way), then each batch replayed updates it, and each ABORT marker that ends a transaction
   adds its entry, with the last stable offset of that moment (Kafka's recoverSegment);
6. an empty directory gets its first segment, at the log start offset;
7. offsets: log end offset from the last segment; log start offset, recovery point and high
   watermark from the checkpoints, clamped to what is there; the epoch cache is trimmed to them;
8. producer state: the newest valid snapshot at or below the log end offset, then a replay of
   the batch headers after it (`rebuild_producer_state`, which truncation uses too);
9. unclean stop only: the recovered state is made durable (segments fsynced, epoch checkpoint
   written), so the recovery point becomes the log end offset.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from odradek.protocol.records import CONTROL_MASK

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
        self.epoch_cache.load()
        bad_txn_index = [s.base_offset for s in ordered if not s.txn_index_ok]
        if bad_txn_index:
            log.warning("%s: rebuilding the transaction index from offset %d", self.dir, bad_txn_index[0])
            recovery_point = min(recovery_point, bad_txn_index[0])
            clean = False
        if not clean and ordered:
            self._recover(ordered, recovery_point, log_start_offset)
        created = not ordered
        if created:
            ordered = [new_segment(self.fs, self.dir, max(log_start_offset, 0), self.config, now_ms)]
        leo = ordered[-1].next_offset
        start = min(max(log_start_offset, ordered[0].base_offset), leo)
        loaded = LoadedLog(
            segments=ordered,
            log_start_offset=start,
            log_end_offset=leo,
            recovery_point=leo if clean else min(max(recovery_point, 0), leo),
            high_watermark=min(max(high_watermark, start), leo),
            created_segment=created,
        )
        self.epoch_cache.truncate_from_end(leo)
        self.epoch_cache.truncate_from_start(start)
        active = ordered[-1]
        active.offset_index.resize(active.offset_index.max_entries * active.offset_index.ENTRY)
        active.time_index.resize(active.time_index.max_entries * active.time_index.ENTRY)
        rebuild_producer_state(self.producer_state, ordered, start, leo)
        if not clean:
            # make the recovered state durable, then everything up to LEO is recovered
            for seg in ordered:
                if seg.flushed_size < seg.size or seg.rebuilt_index:
                    seg.flush()
            self.epoch_cache.dirty = True
            self.epoch_cache.save()
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

    def _recover(self, ordered: list[LogSegment], recovery_point: int, log_start_offset: int) -> None:
        """Step 5, unclean shutdown: revalidate everything from the segment holding the recovery
        point; cut ``ordered`` (in place) where the valid log ends."""
        start = 0
        for i, seg in enumerate(ordered):
            if seg.base_offset <= recovery_point:
                start = i
        expected = ordered[start].base_offset
        truncated_bytes = sum(s.truncated_bytes for s in ordered)
        batches_seen = 0
        epoch_cache = self.epoch_cache
        producers = self.producer_state
        rebuild_producer_state(producers, ordered[:start], max(log_start_offset, 0), expected)
        seg = ordered[start]

        def on_batch(pos, h, mv):
            nonlocal batches_seen
            batches_seen += 1
            if h.partition_leader_epoch >= 0:
                epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            if h.producer_id >= 0:
                c = control_record(mv, h)
                done = producers.update(h, None if c is None else c[0], -1 if c is None else c[1])
                if done is not None:
                    if done.aborted:
                        lso = producers.last_stable_offset_after(done)
                        seg.txn_index.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))
                    producers.complete_txn(done)

        epoch_cache.truncate_from_end(ordered[start].base_offset)
        cut_at = None
        for i in range(start, len(ordered)):
            seg = ordered[i]
            if seg.base_offset < expected:
                cut_at = i
                break
            seg.txn_index.reset()
            dropped = seg.recover(on_batch, start_offset=expected)
            seg.rebuilt_index = True
            expected = seg.next_offset
            if dropped:
                truncated_bytes += dropped
                cut_at = i + 1
                break
        if cut_at is not None:
            for seg in ordered[cut_at:]:
                truncated_bytes += seg.size
                log.warning("%s: deleting segment %s beyond the recovered log end", self.dir, seg.log_path)
                seg.delete_files()
            del ordered[cut_at:]
            if not ordered:
                return
        if truncated_bytes:
            log.warning(
                "%s: recovery truncated %d bytes (log end offset now %d)",
                self.dir,
                truncated_bytes,
                ordered[-1].next_offset,
            )
        else:
            log.info(
                "%s: recovered %d batches after offset %d, nothing truncated", self.dir, batches_seen, recovery_point
            )


def rebuild_producer_state(
    producer_state: ProducerStateManager, segments, log_start_offset: int, to_offset: int
) -> None:
    """Producer state as of ``to_offset``: the newest valid snapshot at or below it (later ones
    are deleted), then the batches of ``segments`` from there (or from the log start offset)
    replayed up to ``to_offset``."""
    snap = producer_state.load_latest(to_offset)
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
