"""The replica manager as the coordinators' partitions (coordinator/partitions.py): a batch
appended at once as leader at the shard's epoch, and a wait for its commit that the high
watermark, a lost leadership or a timeout ends. Over real logs (tmp_path), broker 2's
fetches through `ReplicaManager.read(..., replica_id=2)`."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from support.batches import batch

from odradek.broker.config import BrokerConfig
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.protocol.errors import ErrorCode, KafkaError

TOPIC_ID = uuid.uuid4()


def snapshot(leader: int, isr: tuple[int, ...] = (1, 2), leader_epoch: int = 0, configs: dict | None = None):
    part = PartitionInfo(0, leader, (1, 2), isr, leader_epoch=leader_epoch)
    return ClusterSnapshot("c", 1, (), {"t": TopicInfo("t", TOPIC_ID, (part,), configs or {})})


async def leading(log_manager, configs: dict | None = None) -> tuple[ReplicaManager, ClusterSnapshot]:
    rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)
    s = snapshot(1, configs=configs)
    await rm.on_metadata(MetadataDelta(EMPTY_SNAPSHOT, s))
    return rm, s


def code(exc: pytest.ExceptionInfo[KafkaError]) -> int:
    return exc.value.code


def test_appends_at_once_and_each_waits_for_the_high_watermark_to_pass_it(log_manager):
    async def main():
        rm, _ = await leading(log_manager)
        assert rm.append_as_leader("t", 0, 0, batch(2)) == (0, 1)
        assert rm.append_as_leader("t", 0, 0, batch(3)) == (2, 4)  # no wait for the first's commit
        first = asyncio.ensure_future(rm.wait_for_commit("t", 0, 1, 5000))
        second = asyncio.ensure_future(rm.wait_for_commit("t", 0, 4, 5000))
        await asyncio.sleep(0.02)
        assert not first.done() and not second.done()
        assert rm.read("t", 0, 2, 1 << 20, min_one=True, replica_id=2).error_code == 0  # the follower has the first
        await asyncio.wait_for(first, 1)
        await asyncio.sleep(0.02)
        assert not second.done()
        assert rm.read("t", 0, 5, 1 << 20, min_one=True, replica_id=2).error_code == 0
        await asyncio.wait_for(second, 1)
        await rm.wait_for_commit("t", 0, 0, 0)  # already committed: at once, whatever the timeout

    asyncio.run(main())


def test_an_append_at_another_leader_epoch_or_off_the_leader_is_refused(log_manager):
    async def main():
        rm, s = await leading(log_manager)
        with pytest.raises(KafkaError) as e:
            rm.append_as_leader("t", 0, 1, batch(1))
        assert code(e) == ErrorCode.unknown_leader_epoch
        s2 = snapshot(1, leader_epoch=2)
        await rm.on_metadata(MetadataDelta(s, s2))
        with pytest.raises(KafkaError) as e:
            rm.append_as_leader("t", 0, 0, batch(1))
        assert code(e) == ErrorCode.fenced_leader_epoch
        await rm.on_metadata(MetadataDelta(s2, snapshot(2, leader_epoch=3)))
        with pytest.raises(KafkaError) as e:
            rm.append_as_leader("t", 0, 3, batch(1))
        assert code(e) == ErrorCode.not_leader_or_follower
        with pytest.raises(KafkaError) as e:
            rm.append_as_leader("t", 1, 0, batch(1))
        assert code(e) == ErrorCode.unknown_topic_or_partition
        assert rm.get_partition("t", 0).log_end_offset == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_a_wait_for_commit_fails_on_lost_leadership_and_times_out(log_manager):
    async def main():
        rm, s = await leading(log_manager)
        rm.append_as_leader("t", 0, 0, batch(1))
        with pytest.raises(KafkaError) as e:
            await rm.wait_for_commit("t", 0, 0, 30)
        assert code(e) == ErrorCode.request_timed_out
        assert rm.get_partition("t", 0).log_end_offset == 1  # type: ignore[union-attr]  # (it stays)
        waiting = asyncio.ensure_future(rm.wait_for_commit("t", 0, 0, 5000))
        await asyncio.sleep(0.01)
        await rm.on_metadata(MetadataDelta(s, snapshot(2, leader_epoch=1)))
        with pytest.raises(KafkaError) as e:
            await asyncio.wait_for(waiting, 1)
        assert code(e) == ErrorCode.not_leader_or_follower
        assert len(rm.produce_purgatory) == 0

    asyncio.run(main())


def test_a_write_that_makes_its_log_due_for_a_flush_is_committed_once_flushed(log_manager):
    async def main():
        rm, _ = await leading(log_manager, {"flush.messages": "3"})
        part = rm.get_partition("t", 0)
        assert part is not None
        rm.append_as_leader("t", 0, 0, batch(1))  # not due
        assert rm.read("t", 0, 1, 1 << 20, min_one=True, replica_id=2).error_code == 0
        await rm.wait_for_commit("t", 0, 0, 5000)
        assert part.log.recovery_point == 0
        assert rm.append_as_leader("t", 0, 0, batch(2)) == (1, 2)  # 3 unflushed: due
        assert rm.read("t", 0, 3, 1 << 20, min_one=True, replica_id=2).error_code == 0
        await rm.wait_for_commit("t", 0, 2, 5000)
        assert part.log.recovery_point == 3

    asyncio.run(main())
