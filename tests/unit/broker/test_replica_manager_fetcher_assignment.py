"""A metadata change re-assigns the fetchers of the partitions it changed, not of every one.

Issue 28: creating 10,000 partitions on three brokers grew faster than linear. Each broker
walked every hosted partition on every metadata change to follow its leader again (in the
simulator, 59,269 `follow` calls for the sixth topic of 1,000, against 2,282 for the first): a
new topic's partition states arrive over many changes, each paying for the whole cluster. Now
only the changed partitions follow (a new leader, a new epoch, a stop), and every one when a
broker changed (a leader's new endpoint, a registration).
"""

from __future__ import annotations

import asyncio
import uuid

from odradek.broker.config import BrokerConfig
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import (
    EMPTY_SNAPSHOT,
    BrokerInfo,
    ClusterSnapshot,
    MetadataDelta,
    PartitionInfo,
    TopicInfo,
)

IDS = {t: uuid.uuid4() for t in ("a", "b")}
BROKERS = (BrokerInfo(1, "h1", 1, epoch=10), BrokerInfo(2, "h2", 2, epoch=20))


class Fetchers:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, int], int]] = []

    def follow(self, part, leader: BrokerInfo) -> None:  # noqa: ANN001
        self.calls.append(("follow", part.key, leader.port))

    def unfollow(self, key: tuple[str, int]) -> None:
        self.calls.append(("unfollow", key, -1))


def topic(name: str, n: int, leader: int = 2, epoch: int = 0) -> TopicInfo:
    return TopicInfo(name, IDS[name], tuple(PartitionInfo(p, leader, (1, 2), (1, 2), epoch) for p in range(n)))


def snap(*topics: TopicInfo, brokers: tuple[BrokerInfo, ...] = BROKERS) -> ClusterSnapshot:
    return ClusterSnapshot("c", 1, brokers, {t.name: t for t in topics})


def test_only_the_changed_partitions_follow_again_and_all_when_a_broker_changed(log_manager):
    async def main() -> None:
        fetchers = Fetchers()
        rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), fetchers=fetchers)  # type: ignore[arg-type]
        a = topic("a", 50)
        s1 = snap(a)
        await rm.on_metadata(MetadataDelta(EMPTY_SNAPSHOT, s1))
        assert sorted(k for _op, k, _port in fetchers.calls) == [("a", p) for p in range(50)]

        # a new topic of 3: its 3 partitions follow, topic a's 50 are left as they are
        fetchers.calls.clear()
        s2 = snap(a, topic("b", 3))
        await rm.on_metadata(MetadataDelta(s1, s2))
        assert sorted(fetchers.calls) == [("follow", ("b", p), 2) for p in range(3)]

        # one partition's leader moves here: it stops fetching; nothing else is touched
        fetchers.calls.clear()
        b = s2.topics["b"]
        moved = TopicInfo("b", b.topic_id, (PartitionInfo(0, 1, (1, 2), (1, 2), 1), *b.partitions[1:]))
        s3 = snap(a, moved)
        await rm.on_metadata(MetadataDelta(s2, s3))
        assert fetchers.calls == [("unfollow", ("b", 0), -1)]

        # the leader broker registered again on another port: every follower follows it there
        fetchers.calls.clear()
        s4 = snap(a, moved, brokers=(BROKERS[0], BrokerInfo(2, "h2", 3, epoch=21)))
        await rm.on_metadata(MetadataDelta(s3, s4))
        follows = sorted(k for op, k, port in fetchers.calls if op == "follow" and port == 3)
        assert follows == sorted([("a", p) for p in range(50)] + [("b", 1), ("b", 2)])
        assert [c for c in fetchers.calls if c[0] == "unfollow"] == [("unfollow", ("b", 0), -1)]

        # the topic deleted: its partitions stop fetching
        fetchers.calls.clear()
        await rm.on_metadata(MetadataDelta(s4, snap(a, brokers=s4.brokers)))
        assert sorted(fetchers.calls) == [("unfollow", ("b", p), -1) for p in range(3)]

    asyncio.run(main())
