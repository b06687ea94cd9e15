"""The coordinators' writes on one partition with a follower in the ISR: appended one right
after the other, each answered once the high watermark passes it (coordinator/runtime.py,
"Commit-then-reply, pipelined"). Before, a write on a partition was appended only once the
previous one was committed, so transactional ids, or groups, that share a partition waited
for each other's replication.

Real parts: a ReplicaManager over a real LogManager leading the coordinator's partition with
broker 2 in the ISR; broker 2's fetches are `ReplicaManager.read(..., replica_id=2)`, the path
a follower's Fetch takes, which moves the high watermark.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.coordinator.group import GroupConfig, GroupCoordinator
from odradek.coordinator.group.records import OFFSETS_TOPIC
from odradek.coordinator.group.requests import OffsetCommitRequest, OffsetEntry
from odradek.coordinator.txn import TransactionCoordinator, TxnConfig
from odradek.coordinator.txn.records import TXN_STATE_TOPIC
from odradek.protocol.errors import ErrorCode as E
from odradek.storage import LogConfig, LogManager

TOPIC_ID = uuid.uuid4()


@pytest.fixture
def log_manager(tmp_path):
    m = LogManager([str(tmp_path / "logs")], LogConfig())
    m.load()
    yield m
    m.shutdown()


def snapshot(topic: str, leader: int, leader_epoch: int = 0) -> ClusterSnapshot:
    part = PartitionInfo(0, leader, (1, 2), (1, 2), leader_epoch=leader_epoch)
    return ClusterSnapshot("c", 1, (), {topic: TopicInfo(topic, TOPIC_ID, (part,), {})})


async def lead(rm: ReplicaManager, topic: str) -> ClusterSnapshot:
    """Broker 1 leads partition 0 of `topic`, broker 2 in its ISR."""
    s = snapshot(topic, 1)
    await rm.on_metadata(MetadataDelta(EMPTY_SNAPSHOT, s))
    return s


def follower_fetch(rm: ReplicaManager, topic: str, offset: int) -> None:
    """Broker 2 fetches from `offset`: it has everything below it."""
    assert rm.read(topic, 0, offset, 1 << 20, min_one=True, replica_id=2).error_code == 0


async def until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def test_transactional_ids_sharing_a_partition_do_not_wait_for_each_others_replication(log_manager):
    async def main():
        rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)
        pids = iter(range(1000, 2000))

        async def next_pid() -> int:
            return next(pids)

        class NoMarkers:
            async def write_markers(self, *args: object) -> bool:
                return True

        txns = TransactionCoordinator(TxnConfig(num_partitions=1), rm, lambda: asyncio.sleep(0), next_pid, NoMarkers())
        await txns.start()
        rm.add_leadership_listener(txns)
        await lead(rm, TXN_STATE_TOPIC)
        part = rm.get_partition(TXN_STATE_TOPIC, 0)
        assert part is not None
        inits = [asyncio.ensure_future(txns.init_producer_id(tid, 60000)) for tid in ("tx-a", "tx-b", "tx-c")]
        # each id's InitProducerId record is in the log at once, none committed or answered yet
        await until(lambda: part.log_end_offset == 3)
        await asyncio.sleep(0.05)
        assert part.high_watermark == 0 and not any(i.done() for i in inits)
        follower_fetch(rm, TXN_STATE_TOPIC, 1)  # the follower has the first record only
        await until(lambda: inits[0].done())
        await asyncio.sleep(0.02)
        assert inits[0].result() == (0, 1000, 0) and not inits[1].done() and not inits[2].done()
        follower_fetch(rm, TXN_STATE_TOPIC, 3)
        assert await asyncio.wait_for(asyncio.gather(*inits), 5) == [(0, 1000, 0), (0, 1001, 0), (0, 1002, 0)]
        await txns.stop()

    asyncio.run(main())


def test_groups_sharing_a_partition_commit_together_and_a_lost_leadership_fails_what_waits(log_manager):
    async def main():
        rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)
        groups = GroupCoordinator(GroupConfig(num_partitions=1), rm, lambda: asyncio.sleep(0))
        await groups.start()
        rm.add_leadership_listener(groups)
        s1 = await lead(rm, OFFSETS_TOPIC)
        part = rm.get_partition(OFFSETS_TOPIC, 0)
        assert part is not None

        def commit(group: str, offset: int) -> asyncio.Future:
            req = OffsetCommitRequest(group, offsets=(OffsetEntry("t", 0, offset),))
            return asyncio.ensure_future(groups.commit_offsets(req))

        first = [commit(f"g{i}", 10 + i) for i in range(3)]
        await until(lambda: part.log_end_offset == 3)
        assert not any(c.done() for c in first)
        follower_fetch(rm, OFFSETS_TOPIC, 3)
        assert await asyncio.wait_for(asyncio.gather(*first), 5) == [{("t", 0): 0}] * 3
        assert groups.fetch_offsets("g2", [("t", [0])]) == (0, [("t", [(0, 12, -1, "", 0)])])

        # two more wait for the follower when broker 2 takes the leadership: both fail at once
        waiting = [commit("g0", 20), commit("g1", 21)]
        await until(lambda: part.log_end_offset == 5)
        await rm.on_metadata(MetadataDelta(s1, snapshot(OFFSETS_TOPIC, 2, leader_epoch=1)))
        assert await asyncio.wait_for(asyncio.gather(*waiting), 1) == [{("t", 0): int(E.not_coordinator)}] * 2
        assert groups.group_error("g0") == E.not_coordinator
        await groups.stop()

    asyncio.run(main())
