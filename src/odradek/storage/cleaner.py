"""Log compaction (cleanup.policy=compact / compact,delete). Runs in a worker thread.

One pass over a log:
1. The cleanable range ends at the first uncleanable offset: the active segment's base, the
   first open transaction, the high watermark, the checkpointed recovery point (odradek's
   rule: a cleaned segment's holes are never above it, see loader.py) and the first segment
   younger than min.compaction.lag.ms, rounded down to a segment boundary. The dirty section starts at
   the cleaner checkpoint. Skip unless dirty/total >= min.cleanable.dirty.ratio (or a
   delete horizon or max.compaction.lag.ms is due).
2. Build key -> latest offset over the dirty section, whole segments in order while the map
   holds at most log.cleaner.dedupe.buffer.size * log.cleaner.io.buffer.load.factor / 24
   keys (Kafka's accounting: a 16-byte key hash + an 8-byte offset per entry; we keep the
   keys themselves, so real memory is larger). When a segment does not fit, this pass
   cleans only up to it and the next pass goes on from there; the first dirty segment is
   always mapped whole, so a pass never makes no progress.
3. Rewrite the cleanable segments, in groups that fit one segment, keeping each record that
   has no later offset for its key; offsets never change; batch structure (base offset,
   lastOffsetDelta, producer id/epoch/base sequence, codec) is kept. A batch that loses all
   records is dropped unless it is its producer's last batch (kept empty, like Kafka, to
   preserve sequence state). Tombstones get a delete horizon (now + delete.retention.ms,
   KIP-534: attribute bit 6, horizon stored as baseTimestamp) and are dropped by a later
   pass after it.
   Transactions (Kafka's CleanedTransactionMetadata): the aborted transactions overlapping a
   segment come from the transaction indexes; every record of an aborted transaction's data
   batches is removed (a batch is dropped, or kept empty when it is its producer's last), and
   never enters the offset map (an aborted value does not shadow a committed one). A marker
   stays while data of its transaction remains: an ABORT whose data this pass saw (and
   removed) is kept with its ``.txnindex`` entry copied to the cleaned segment; a COMMIT whose
   transaction had batches in this pass is kept. A marker with no data left gets a delete
   horizon (now + delete.retention.ms, as a tombstone) and a later pass after it removes it
   (an empty batch stays when the marker is its producer's last record with its current
   epoch, to keep the epoch for fencing). The cleaned segment's ``.txnindex`` holds only the
   entries of markers kept with their data.
4. Crash-safe swap: write <base>.log.cleaned (+ indexes), fsync, rename to .swap, rename the
   old segments to .deleted, rename .swap to the final name. Recovery deletes .cleaned,
   and completes a .swap (see loader.py).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from odradek.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, DELETE_HORIZON_MASK, build_batch, decode_records

from .config import LONG_MAX
from .log import Log
from .producer_state import control_type
from .segment import LogSegment
from .txn_index import AbortedTxn

__all__ = ["clean_log", "CleanStats"]

log = logging.getLogger("odradek.storage")


@dataclass
class CleanStats:
    first_dirty: int
    end: int
    segments_in: int
    segments_out: int
    bytes_in: int
    bytes_out: int
    records_removed: int


class _TxnCleaning:
    """Which transactional batches of a cleaning pass go (Kafka's CleanedTransactionMetadata).
    Fed every batch in offset order; `add` the aborted transactions of each segment first."""

    def __init__(self) -> None:
        self.pending: deque[AbortedTxn] = deque()  # by first offset, not yet reached
        self.seen: set[tuple[int, int]] = set()
        self.aborted: dict[int, list] = {}  # producer id -> [AbortedTxn, last offset of a batch seen or -1]
        self.committed: set[int] = set()  # producer ids whose open (not aborted) transaction had batches here
        self.kept_index: list[AbortedTxn] = []  # entries of the ABORT markers kept with their data

    def add(self, txns: list[AbortedTxn]) -> None:
        new = [t for t in txns if (t.producer_id, t.first_offset) not in self.seen]
        if new:
            self.seen.update((t.producer_id, t.first_offset) for t in new)
            self.pending = deque(sorted([*self.pending, *new], key=lambda t: t.first_offset))

    def _reach(self, offset: int) -> None:
        pending = self.pending
        while pending and pending[0].first_offset <= offset:
            t = pending.popleft()
            self.aborted.setdefault(t.producer_id, [t, -1])

    def on_data(self, h) -> bool:
        """True: the batch belongs to an aborted transaction (its records go)."""
        self._reach(h.last_offset)
        if not h.is_transactional:
            return False
        state = self.aborted.get(h.producer_id)
        if state is not None:
            state[1] = h.last_offset
            return True
        self.committed.add(h.producer_id)
        return False

    def on_control(self, h, ctype: int | None) -> bool:
        """True: the marker may go (no data of its transaction left), once past its horizon."""
        self._reach(h.last_offset)
        if ctype is None:
            return True  # an empty control batch: already cleaned
        pid = h.producer_id
        if ctype == CONTROL_ABORT:
            state = self.aborted.pop(pid, None)
            if state is not None and state[1] >= 0:
                self.kept_index.append(state[0])
                return False
            return True
        if ctype == CONTROL_COMMIT:
            if pid in self.committed:
                self.committed.discard(pid)
                return False
            return True
        return False


def _scan_delete_horizon(lg: Log, segs) -> int | None:
    best = None
    for seg in segs:
        for _, h, _ in seg.scan(0, seg.size, validate=False):
            if h.attributes & DELETE_HORIZON_MASK:
                hz = h.base_timestamp
                best = hz if best is None else min(best, hz)
    return best


def _first_uncleanable(lg: Log, segs, now: int) -> int:
    cfg = lg.config
    fuo = segs[-1].base_offset
    unstable = lg.producer_state.first_unstable_offset()
    if unstable is not None:
        fuo = min(fuo, unstable)
    fuo = min(fuo, lg.high_watermark)
    # only what a crash cannot take: recovery reads the segments above the checkpointed
    # recovery point as written in order, a hole there being a lost tail (loader.py)
    fuo = min(fuo, lg.checkpointed_recovery_point)
    if cfg.min_compaction_lag_ms > 0:
        for seg in segs[:-1]:
            if seg.size and now - seg.largest_timestamp() < cfg.min_compaction_lag_ms:
                fuo = min(fuo, seg.base_offset)
                break
    return fuo


def clean_log(
    lg: Log, now: int, *, force: bool = False, stop=lambda: False, max_keys: int | None = None
) -> CleanStats | None:
    """One cleaning pass; None when there is nothing (worth) cleaning. OSError propagates.

    ``max_keys`` bounds the key -> offset map (Kafka's dedupe buffer): dirty segments are
    mapped whole, in order, while they fit; cleaning then stops where mapping stopped (the
    first dirty segment is always mapped, so every pass makes progress)."""
    cfg = lg.config
    segs = lg.segments
    if len(segs) < 2:
        return None
    fuo = _first_uncleanable(lg, segs, now)
    n = 0
    while n < len(segs) - 1 and segs[n + 1].base_offset <= fuo:
        n += 1
    if n == 0:
        return None
    group_all = list(segs[:n])
    end = segs[n].base_offset
    first_dirty = max(lg.cleaner_checkpoint, lg.log_start_offset, group_all[0].base_offset)
    dirty_bytes = sum(s.size for i, s in enumerate(group_all) if segs[i + 1].base_offset > first_dirty)
    total = sum(s.size for s in group_all)
    if lg.min_delete_horizon is None:
        lg.min_delete_horizon = _scan_delete_horizon(lg, group_all) or -1
    horizon_due = lg.min_delete_horizon >= 0 and now >= lg.min_delete_horizon
    lag_due = False
    if cfg.max_compaction_lag_ms < LONG_MAX:
        for i, s in enumerate(group_all):
            if (
                segs[i + 1].base_offset > first_dirty
                and s.size
                and s.rolling_timestamp is not None
                and now - s.rolling_timestamp > cfg.max_compaction_lag_ms
            ):
                lag_due = True
    if not force:
        if dirty_bytes == 0 and not horizon_due:
            return None
        if total and dirty_bytes / total < cfg.min_cleanable_dirty_ratio and not (horizon_due or lag_due):
            return None

    # 2. offset map over the dirty section, whole segments while the map stays within
    # max_keys (log.cleaner.dedupe.buffer.size); the segments after it wait for the next pass
    map_txns = _TxnCleaning()
    map_txns.add(lg.aborted_transactions(first_dirty, end))
    offset_map, stop_at = _build_offset_map(group_all, first_dirty, max_keys, map_txns)
    partial = stop_at < len(group_all)
    if partial:
        log.info(
            "%s: offset map full (%d keys, limit %d): cleaning up to offset %d this pass",
            lg.dir,
            len(offset_map),
            max_keys,
            group_all[stop_at].base_offset,
        )
        group_all = group_all[:stop_at]
        end = segs[stop_at].base_offset
        total = sum(s.size for s in group_all)

    # 3. group segments and rewrite
    groups: list[list[LogSegment]] = []
    cur: list[LogSegment] = []
    cur_size = 0
    for seg in group_all:
        nxt_off = seg.next_offset
        if cur and (cur_size + seg.size > cfg.segment_bytes or nxt_off - cur[0].base_offset > 2**31 - 1):
            groups.append(cur)
            cur, cur_size = [], 0
        cur.append(seg)
        cur_size += seg.size
    if cur:
        groups.append(cur)

    last_batches = lg.producer_state.last_batch_offsets()
    last_epochs = {pid: e.epoch for pid, e in lg.producer_state.producers.items() if not e.batches}
    stats = CleanStats(first_dirty, end, len(group_all), 0, total, 0, 0)
    min_horizon = -1
    for group in groups:
        if stop():
            break
        new, removed, hz = _clean_group(lg, group, offset_map, (last_batches, last_epochs), now)
        stats.records_removed += removed
        if hz >= 0:
            min_horizon = hz if min_horizon < 0 else min(min_horizon, hz)
        if lg.replace_segments(group, new, now):
            stats.segments_out += 1
            stats.bytes_out += new.size
        else:
            log.info("%s: segments changed during cleaning, discarded cleaned segment", lg.dir)
            return stats
    lg.cleaner_checkpoint = max(lg.cleaner_checkpoint, end)
    lg.min_delete_horizon = None if partial else min_horizon  # None: rescan the whole log next time
    log.info(
        "%s: cleaned offsets [%d, %d): %d segments, %d -> %d bytes, %d records removed",
        lg.dir,
        group_all[0].base_offset,
        end,
        stats.segments_in,
        stats.bytes_in,
        stats.bytes_out,
        stats.records_removed,
    )
    return stats


def _build_offset_map(
    group: list[LogSegment], first_dirty: int, max_keys: int | None, txns: _TxnCleaning
) -> tuple[dict[bytes, int], int]:
    """key -> latest offset over the dirty part of ``group``, records of aborted
    transactions left out. Returns the map and the index of the first segment left out
    (``len(group)`` when all fit)."""
    offset_map: dict[bytes, int] = {}
    first = True
    for i, seg in enumerate(group):
        if seg.next_offset <= first_dirty and seg.base_offset < first_dirty:
            continue
        seg_map: dict[bytes, int] = {}
        new_keys = 0
        room = None if max_keys is None or first else max_keys - len(offset_map)
        first = False
        for _, h, mv in seg.scan(0, seg.size, validate=False):
            if h.last_offset < first_dirty:
                continue
            if h.is_control:
                txns.on_control(h, control_type(mv, h))
                continue
            if txns.on_data(h):
                continue
            for r in decode_records(mv, h.position):
                k = r.key
                if r.offset >= first_dirty and k is not None:
                    if room is not None and k not in seg_map and k not in offset_map:
                        new_keys += 1
                        if new_keys > room:
                            return offset_map, i
                    seg_map[k] = r.offset
        offset_map.update(seg_map)
    return offset_map, len(group)


def _clean_group(lg: Log, group: list[LogSegment], offset_map, last_records, now: int):
    cfg = lg.config
    last_batches, last_epochs = last_records
    txns = _TxnCleaning()
    new = LogSegment.create(
        lg.fs,
        lg.dir,
        group[0].base_offset,
        index_bytes=cfg.segment_index_bytes,
        index_interval=cfg.index_interval_bytes,
        now_ms=now,
        suffix=".cleaned",
    )
    removed = 0
    min_hz = -1
    segs = lg.segments
    try:
        for seg in group:
            nxt = next((s.base_offset for s in segs if s.base_offset > seg.base_offset), seg.next_offset)
            txns.add(lg.aborted_transactions(seg.base_offset, nxt))
            with seg.pin_lock:
                seg.pins += 1
            try:
                for _, h, mv in seg.scan(0, seg.size, validate=False):
                    raw = mv[h.position : h.position + h.size]
                    if h.is_control:
                        out, dropped, hz = _clean_marker(
                            h, raw, txns.on_control(h, control_type(mv, h)), last_epochs, now, cfg.delete_retention_ms
                        )
                    else:
                        out, dropped, hz = _clean_batch(
                            h, raw, offset_map, last_batches, now, cfg.delete_retention_ms, txns.on_data(h)
                        )
                    removed += dropped
                    if hz >= 0:
                        min_hz = hz if min_hz < 0 else min(min_hz, hz)
                    if out is None:
                        continue
                    max_ts = h.max_timestamp if out is raw else _max_ts(out)
                    new.append([out], [(0, h.last_offset, max_ts, len(out))], len(out))
            finally:
                with seg.pin_lock:
                    seg.pins -= 1
        for entry in txns.kept_index:
            new.txn_index.append(entry)
        new.on_roll()
        new.flush()
        new.rename_suffix(".swap")
        lg.fs.fsync_dir(lg.dir)
    except BaseException:
        new.delete_files()
        raise
    return new, removed, min_hz


def _max_ts(batch: bytes | memoryview) -> int:
    import struct

    return struct.unpack_from(">q", batch, 35)[0]


def _clean_marker(h, raw, can_discard: bool, last_epochs, now: int, delete_retention_ms: int):
    """A control batch: (bytes to write or None, records removed, its delete horizon or -1)."""
    if not can_discard:
        return raw, 0, -1
    keep_empty = last_epochs.get(h.producer_id) == h.producer_epoch  # its producer's last record
    if h.record_count == 0:  # emptied by an earlier pass
        return (raw if keep_empty else None), 0, -1
    horizon = h.delete_horizon_ms
    if horizon >= 0 and now >= horizon:
        if not keep_empty:
            return None, h.record_count, -1
        records: list = []
        dropped = h.record_count
    elif horizon >= 0:
        return raw, 0, horizon
    else:
        records = decode_records(raw)
        dropped = 0
        horizon = now + delete_retention_ms
    out = build_batch(
        records,
        base_offset=h.base_offset,
        compression=h.compression,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=True,
        timestamp_type=h.timestamp_type,
        partition_leader_epoch=h.partition_leader_epoch,
        last_offset_delta=h.last_offset_delta,
        max_timestamp=h.max_timestamp,
        delete_horizon_ms=horizon if records else None,
    )
    return out, dropped, horizon if records else -1


def _clean_batch(h, raw, offset_map, last_batches, now, delete_retention_ms, aborted: bool = False):
    """A data batch: (bytes to write or None, records removed, its delete horizon or -1).
    ``aborted``: it belongs to an aborted transaction (every record goes)."""
    records = decode_records(raw)
    horizon = h.delete_horizon_ms
    retained = []
    has_tombstone = False
    for r in records if not aborted else ():
        if r.key is not None and offset_map.get(r.key, -1) > r.offset:
            continue
        if r.value is None and horizon >= 0 and now >= horizon:
            continue
        retained.append(r)
        if r.value is None:
            has_tombstone = True
    dropped = len(records) - len(retained)
    if not dropped and (not has_tombstone or horizon >= 0):
        return raw, 0, horizon if has_tombstone else -1
    if not retained and not (h.producer_id >= 0 and last_batches.get(h.producer_id) == h.last_offset):
        return None, dropped, -1
    new_hz = (horizon if horizon >= 0 else now + delete_retention_ms) if has_tombstone else None
    out = build_batch(
        retained,
        base_offset=h.base_offset,
        compression=h.compression,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        timestamp_type=h.timestamp_type,
        partition_leader_epoch=h.partition_leader_epoch,
        last_offset_delta=h.last_offset_delta,
        max_timestamp=h.max_timestamp if h.timestamp_type else None,
        delete_horizon_ms=new_hz,
    )
    return out, dropped, new_hz if new_hz is not None else -1
