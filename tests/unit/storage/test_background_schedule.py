"""The log manager's background duties fall due on the monotonic clock, not the wall clock.

Simulator seed 5173 (issue 25): broker 3's wall clock stepped back two hours 5 s into the run;
its log manager had set the cleaner's next pass (and retention, the checkpoints) at a wall-clock
time, now two hours away, so its compacted replica was never cleaned while the other two were,
and the replicas differed below the high watermark. Kafka schedules these duties on its
scheduler's monotonic clock (a ScheduledThreadPoolExecutor) and its cleaner backs off with a
timed wait: a wall clock set back or forward moves none of them.
"""

from __future__ import annotations

import asyncio

from support.background import running, wait_until
from support.batches import batch

from odradek.protocol.records import Record, build_batch
from odradek.storage import LogConfig
from odradek.storage.checkpoint import REPLICATION, read_offsets

TWO_HOURS_MS = 7_200_000


def _replication_checkpoint(m) -> dict:
    path = f"{m.log_dirs[0]}/{REPLICATION}"
    return read_offsets(m.fs, path) if m.fs.exists(path) else {}


def test_the_high_watermark_checkpoint_comes_on_time_after_the_wall_clock_steps_back(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    for _ in range(3):
        lg.append(batch(1, ts=clock.ms))
    lg.high_watermark = 3
    clock.step(-TWO_HOURS_MS)  # before the loop sets its schedule: its first deadline is 5 s away

    async def main() -> None:
        async with running(m, 0.002):
            await asyncio.sleep(0.01)
            clock.step(-TWO_HOURS_MS)  # and again while it runs
            clock.advance(m.high_watermark_checkpoint_interval_ms)
            await wait_until(lambda: bool(_replication_checkpoint(m)), 0.8, 0.002)

    asyncio.run(main())
    assert _replication_checkpoint(m) == {("t", 0): 3}


def test_a_wall_clock_stepped_forward_makes_no_duty_due_early(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(1, ts=clock.ms))
    lg.high_watermark = 1

    async def main() -> None:
        async with running(m, 0.002):
            await asyncio.sleep(0.01)
            clock.step(TWO_HOURS_MS)
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert _replication_checkpoint(m) == {}  # 5 s have not passed


def test_the_cleaner_runs_after_its_backoff_though_the_wall_clock_stepped_back(make_mgr, clock):
    """Seed 5173's replica: a compacted log with rolled segments to clean, the wall clock two hours
    back since the loop started; after log.cleaner.backoff.ms it is cleaned as on the others."""
    m = make_mgr()
    cfg = LogConfig(segment_bytes=600, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    lg = m.create_log("t", 0, cfg)
    for i in range(30):
        lg.append(build_batch([Record(-1, clock.ms + i, b"k%d" % (i % 3), b"v%d-" % i + b"x" * 60)]))
    lg.high_watermark = lg.log_end_offset
    assert len(lg.segments) > 2

    async def main() -> None:
        async with running(m, 0.002):
            await asyncio.sleep(0.01)
            clock.step(-TWO_HOURS_MS)
            clock.advance(m.cleaner_backoff_ms)
            await wait_until(lambda: lg.cleaner_checkpoint > 0, 1.0, 0.002)

    asyncio.run(main())
    assert lg.cleaner_checkpoint == lg.active_segment.base_offset
