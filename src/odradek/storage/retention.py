"""Retention of one log (Kafka's UnifiedLog.deleteOldSegments and deleteRecords): which of its
oldest segments go, by ``retention.ms``, by ``retention.bytes`` and below the log start
offset, and DeleteRecords moving the log start offset.

Only segments wholly below the high watermark go, oldest first, never past the first one that
must stay; `Log.delete_segments` removes them (renamed ``.deleted``, closed and removed after
``file.delete.delay.ms``) and moves the log start offset to the first segment kept. Runs on the
event loop (`LogManager.run_retention`, and DeleteRecords); an OSError propagates to the `Log`
method that called, which takes the log directory offline."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import StorageOffsetOutOfRangeError

if TYPE_CHECKING:
    from .log import Log
    from .segment import LogSegment

__all__ = ["delete_old_segments", "delete_records"]

# (segment, the segment after it or None for the active one) -> may it go
_Predicate = Callable[["LogSegment", "LogSegment | None"], bool]


def delete_old_segments(lg: Log, now: int) -> int:
    """Retention by time, size, and log start offset. Returns how many segments were deleted."""
    cfg = lg.config
    n = 0
    if cfg.delete and cfg.retention_ms >= 0:
        n += _delete_oldest(lg, lambda s, nxt: now - s.largest_timestamp() > cfg.retention_ms, now, "retention.ms")
    if cfg.delete and cfg.retention_bytes >= 0:
        diff = [lg.size_bytes - cfg.retention_bytes]

        def by_size(s: LogSegment, nxt: LogSegment | None) -> bool:
            if diff[0] - s.size >= 0:
                diff[0] -= s.size
                return True
            return False

        n += _delete_oldest(lg, by_size, now, "retention.bytes")
    n += _delete_oldest(
        lg, lambda s, nxt: nxt is not None and nxt.base_offset <= lg.log_start_offset, now, "log start offset"
    )
    if n:
        lg.producer_state.delete_snapshots(below=lg.log_start_offset)
    return n


def delete_records(lg: Log, before_offset: int, now: int) -> int:
    """Move the log start offset to ``before_offset`` (at most the high watermark; possibly
    mid-segment), then delete the segments wholly below it. Returns the log start offset."""
    hw = lg.high_watermark
    if before_offset < 0 or before_offset > hw:
        raise StorageOffsetOutOfRangeError(f"cannot delete records before {before_offset}: high watermark is {hw}")
    if before_offset > lg.log_start_offset:
        lg.log_start_offset = before_offset
        lg.epoch_cache.truncate_from_start(before_offset)
        lg.log_start_dirty = True
        lg.producer_state.on_high_watermark_updated(before_offset)  # Kafka's onLogStartOffsetIncremented
        delete_old_segments(lg, now)
    return lg.log_start_offset


def _delete_oldest(lg: Log, predicate: _Predicate, now: int, reason: str) -> int:
    """Delete the oldest segments while ``predicate`` holds and they are wholly below the high
    watermark (an empty active segment never goes). Returns how many went."""
    segs = lg.segments
    leo, hw = lg.log_end_offset, lg.high_watermark
    victims = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        upper = nxt.base_offset if nxt is not None else leo
        if nxt is None and seg.size == 0:
            break
        if upper <= hw and predicate(seg, nxt):
            victims.append(seg)
        else:
            break
    if victims:
        lg.delete_segments(victims, now, reason)
    return len(victims)
