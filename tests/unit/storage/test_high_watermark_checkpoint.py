"""High watermarks are checkpointed every replica.high.watermark.checkpoint.interval.ms (5 s by
default, as Kafka's ReplicaManager schedules its "highwatermark-checkpoint" task), not only with
the recovery points every log.flush.offset.checkpoint.interval.ms (60 s)."""

from __future__ import annotations

import asyncio
import os

from support.batches import batch

from odradek.broker.config import BrokerConfig
from odradek.storage import LogConfig
from odradek.storage.checkpoint import RECOVERY_POINT, REPLICATION, read_offsets
from odradek.storage.config import LogManagerConfig


def test_the_setting_is_declared_with_kafkas_default_and_reaches_the_log_manager():
    assert BrokerConfig({})["replica.high.watermark.checkpoint.interval.ms"] == 5000
    cfg = BrokerConfig({"replica.high.watermark.checkpoint.interval.ms": "750"})
    assert LogManagerConfig.from_broker(cfg).high_watermark_checkpoint_interval_ms == 750


def test_high_watermarks_are_checkpointed_on_their_own_interval(make_mgr, clock):
    m = make_mgr()
    m.reconfigure(LogManagerConfig.from_broker(BrokerConfig({})))
    m.tick_seconds = 0.005
    lg = m.create_log("t", 0, LogConfig())
    for _ in range(3):
        lg.append(batch(1, ts=clock.ms))
    lg.high_watermark = 3
    d = m.log_dirs[0]

    def checkpointed(name: str) -> dict:
        path = os.path.join(d, name)
        return read_offsets(m.fs, path) if m.fs.exists(path) else {}

    async def main():
        task = asyncio.create_task(m.run())
        try:
            await asyncio.sleep(0.05)
            assert checkpointed(REPLICATION).get(("t", 0)) is None  # not yet 5 s
            clock.advance(5000)
            for _ in range(400):
                await asyncio.sleep(0.005)
                if checkpointed(REPLICATION).get(("t", 0)) == 3:
                    break
            assert checkpointed(REPLICATION) == {("t", 0): 3}
            assert checkpointed(RECOVERY_POINT) == {}  # the others wait for their 60 s
            lg.append(batch(1, ts=clock.ms))
            lg.high_watermark = 4
            clock.advance(5000)
            for _ in range(400):
                await asyncio.sleep(0.005)
                if checkpointed(REPLICATION).get(("t", 0)) == 4:
                    break
            assert checkpointed(REPLICATION) == {("t", 0): 4}
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    asyncio.run(main())
