"""A follower's idle partitions in an incremental fetch session (fetch_session.read_partitions
with Partition's IdleFollower): a partition whose last read found the follower caught up, in
the ISR, with nothing to send is not read again while the leader's state that read saw holds;
only the follower's fetch times move, as Kafka's read would move them. Anything that changes
what a read would answer reads it again: an append, a high watermark or log start offset
moved, the follower's fetch asking something else, a new leader epoch or metadata, the
follower out of the ISR. The real ReplicaManager over real logs; the answer side as the Fetch
handler does it (CachedPartition.must_respond)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from support.batches import batch

from odradek.broker.config import BrokerConfig
from odradek.broker.fetch_session import CachedPartition, read_partitions
from odradek.broker.partition import Isolation
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.protocol.errors import ErrorCode

TOPIC_ID = uuid.uuid4()
FOLLOWER = 2


def snapshot(partitions: int, *, isr: tuple[int, ...] = (1, 2, 3), leader_epoch: int = 0) -> ClusterSnapshot:
    infos = tuple(
        PartitionInfo(p, 1, (1, 2, 3), isr, leader_epoch=leader_epoch, partition_epoch=leader_epoch)
        for p in range(partitions)
    )
    return ClusterSnapshot("c", 1, (), {"t": TopicInfo("t", TOPIC_ID, infos, {})})


class Session:
    """A follower's incremental session on broker 1, the leader: its partitions' cached state,
    each fetch read as the handler reads it and answered as it answers (the partitions with news)."""

    def __init__(self, rm: ReplicaManager, partitions: int, *, incremental: bool = True) -> None:
        self.rm = rm
        self.incremental = incremental
        self.cps = [CachedPartition(0, 1 << 20) for _ in range(partitions)]
        self.reads = 0
        real = rm.read

        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            self.reads += 1
            return real(*args, **kwargs)

        rm.read = counted  # type: ignore[method-assign]

    def fetch(self, now_ms: int, *, update: bool = True, replica_epoch: int = -1) -> dict[int, tuple[int, int, bool]]:
        """One fetch: {partition answered: (error code, high watermark, records returned)}."""
        targets = [("t", "t", p, cp) for p, cp in enumerate(self.cps)]
        results, _total, _errors = read_partitions(
            self.rm,
            targets,
            1 << 20,
            now_ms,
            by_id=False,
            isolation=Isolation.HIGH_WATERMARK,
            replica_id=FOLLOWER,
            replica_epoch=replica_epoch,
            update_fetch_state=update,
            incremental=self.incremental,
        )
        answered = {}
        for _key, _name, cp, pr, _r in results:
            news = cp.answers(pr)
            if news or not self.incremental:
                answered[pr.partition] = (pr.error_code, pr.high_watermark, bool(pr.records))
        return answered


@pytest.fixture
def rm(log_manager):
    rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)
    asyncio.run(rm.on_metadata(MetadataDelta(EMPTY_SNAPSHOT, snapshot(4))))
    return rm


@pytest.fixture
def now(rm) -> int:
    """The time of the first fetch: after the partitions started their followers' clocks (at the
    real time of their creation)."""
    return int(time.time() * 1000) + 1


def caught_up(rm: ReplicaManager, follower: int, partition: int, offset: int, now_ms: int) -> None:
    """Another follower's fetch from `offset` (moves the high watermark)."""
    r = rm.read("t", partition, offset, 1 << 20, min_one=True, replica_id=follower, now_ms=now_ms)
    assert r.error_code == 0


def test_an_idle_partition_is_read_once_and_then_only_its_follower_times_move(rm, now):
    s = Session(rm, 4)
    assert s.fetch(now) == {p: (0, 0, False) for p in range(4)} and s.reads == 4
    st = rm.partitions[("t", 0)].followers[FOLLOWER]
    for i in range(1, 11):
        assert s.fetch(now + i * 500) == {}
    assert s.reads == 4, "idle partitions read again"
    assert st.last_fetch_ms == now + 5000 and st.last_caught_up_ms == now + 5000
    # a fetch woken from the purgatory reads the same, and moves nothing (Kafka's DelayedFetch)
    assert s.fetch(now + 9000, update=False) == {} and st.last_fetch_ms == now + 5000


def test_idle_partitions_cost_one_read_each_over_many_fetches(log_manager):
    now = int(time.time() * 1000) + 60_000
    rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)
    asyncio.run(rm.on_metadata(MetadataDelta(EMPTY_SNAPSHOT, snapshot(500))))
    s = Session(rm, 500)
    for i in range(20):
        s.fetch(now + i)
    assert s.reads == 500  # 10,000 before: each fetch read every partition of the session


def test_an_append_a_high_watermark_and_a_log_start_offset_are_news(rm, now):
    s = Session(rm, 4)
    s.fetch(now)
    part = rm.partitions[("t", 1)]
    part.append_as_leader(batch(3), now, 1)
    assert s.fetch(now + 1) == {1: (0, 0, True)}  # records: read, answered
    # the follower takes them (its next fetch names the new offset), the other one too: the
    # high watermark moves, and the follower that had it is told
    s.cps[1].asked(3, 1 << 20, -1, -1)  # the follower's next request names it at its new offset
    reads = s.reads
    assert s.fetch(now + 2) == {} and s.reads == reads + 1  # read (a new position), nothing new to tell
    caught_up(rm, 3, 1, 3, now + 3)
    assert part.log.high_watermark == 3
    assert s.fetch(now + 4) == {1: (0, 3, False)}
    assert s.fetch(now + 5) == {}
    reads = s.reads
    rm.delete_records("t", 1, 2)  # the log start moves: news
    assert s.fetch(now + 6) == {1: (0, 3, False)} and s.reads == reads + 1
    assert s.fetch(now + 7) == {} and s.reads == reads + 1


def test_a_fetch_that_asks_something_else_is_read(rm, now):
    s = Session(rm, 2)
    s.fetch(now)
    reads = s.reads
    s.cps[0].asked(0, 1 << 20, 5, -1)  # a leader epoch this leader does not have yet
    assert s.fetch(now + 1) == {0: (ErrorCode.unknown_leader_epoch, -1, False)} and s.reads == reads + 1
    s.cps[0].asked(0, 1 << 20, 0, -1)
    s.cps[1].asked(7, 1 << 20, -1, -1)  # beyond the log end
    got = s.fetch(now + 2)
    assert got[1][0] == ErrorCode.offset_out_of_range and s.reads == reads + 3
    s.cps[1].asked(0, 1 << 20, -1, -1)
    s.fetch(now + 3)
    reads = s.reads
    s.fetch(now + 4, replica_epoch=7)  # the follower's broker restarted (KIP-903's broker epoch)
    assert s.reads == reads + 2


def test_new_metadata_a_new_leader_epoch_and_a_follower_out_of_the_isr_are_read(rm, now):
    s = Session(rm, 2)
    s.fetch(now)
    reads = s.reads
    # the follower out of the ISR (the controller's new state): read, and its position forgotten
    asyncio.run(rm.on_metadata(MetadataDelta(rm.snapshot, snapshot(4, isr=(1, 3)))))
    s.fetch(now + 1)
    assert s.reads == reads + 2
    reads = s.reads
    s.fetch(now + 2)  # not in the ISR: not idle, read each time (its fetches propose it back)
    assert s.reads == reads + 2
    # a new leader epoch: the follower's fetch at the old one is fenced, read and answered
    asyncio.run(rm.on_metadata(MetadataDelta(rm.snapshot, snapshot(4, leader_epoch=1))))
    for cp in s.cps:
        cp.asked(0, 1 << 20, 0, -1)
    got = s.fetch(now + 3)
    assert got == {p: (ErrorCode.fenced_leader_epoch, -1, False) for p in range(2)}


def test_a_position_forgotten_or_a_log_directory_gone_is_read(rm, now):
    s = Session(rm, 2)
    s.fetch(now)
    reads = s.reads
    rm.partitions[("t", 0)].followers[FOLLOWER].forget_position()
    s.fetch(now + 1)
    assert s.reads == reads + 1
    reads = s.reads
    rm.partitions[("t", 1)].log.dir_state.offline = True  # the one log directory: both partitions'
    s.fetch(now + 2)
    assert s.reads == reads + 2  # whatever the read answers there, it is read


def test_a_full_fetch_reads_every_partition(rm, now):
    s = Session(rm, 3, incremental=False)
    s.fetch(now)
    s.fetch(now + 1)
    assert s.reads == 6
