"""odradek's consumer commits only what it owns in the generation it commits under (Java's
ConsumerCoordinator: generationIfStable, onJoinPrepare's lost partitions), with a broker in
this process. Simulator seeds 8660 and 16808: a member the group had dropped kept its old
assignment and positions, rejoined, and committed them under the new generation (mid-rebalance,
or after the rejoin) while another member owned the partitions: the group's offset went back."""

from __future__ import annotations

import asyncio

import pytest
from support.inprocess import InProcessBroker

from odradek.client import errors as E
from odradek.client.aio import AIOAdmin, AIOConsumer, AIOProducer, NewTopic
from odradek.client.consumer.subscription import TopicPartition

SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.replication.factor": "1"}


class Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list]] = []

    def on_partitions_revoked(self, tps):
        self.calls.append(("revoked", list(tps)))

    def on_partitions_assigned(self, tps):
        self.calls.append(("assigned", list(tps)))

    def on_partitions_lost(self, tps):
        self.calls.append(("lost", list(tps)))


def test_a_dropped_member_loses_its_partitions_and_commits_nothing_mid_rebalance(tmp_path):
    async def main() -> None:
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound[0][1]}"}
            async with AIOAdmin(conf) as admin:
                await admin.create_topics([NewTopic("t", 2, 1)])
            async with AIOProducer(conf, linger_ms=0) as p:
                for i in range(10):
                    await p.send_and_wait("t", b"v%d" % i, partition=i % 2)
            listener = Listener()
            c = AIOConsumer(
                config={**conf, "group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False}
            )
            await c.start()
            try:
                c.subscribe(["t"], listener=listener)
                got = 0
                for _ in range(40):
                    got += len(await c.poll(0.2))
                    if got == 10:
                        break
                assert got == 10
                g = c.group
                await c.commit({TopicPartition("t", 0): 5, TopicPartition("t", 1): 5})
                # mid-rebalance (a JoinGroup answered, its SyncGroup not yet): nothing is sent
                g.stable = False
                with pytest.raises(E.RebalanceInProgressError):
                    await c.commit({TopicPartition("t", 0): 1})
                g.stable = True
                # the group dropped the member (what UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION do)
                g.generation = -1
                g.need_rejoin = True
                with pytest.raises(E.CommitFailedError):
                    await c.commit({TopicPartition("t", 0): 1})
                listener.calls.clear()
                for _ in range(40):
                    await c.poll(0.2)
                    if g.stable and g.generation >= 0 and c.assignment():
                        break
                # lost, not revoked; the positions come again from the committed offsets
                assert listener.calls[0] == ("lost", [TopicPartition("t", 0), TopicPartition("t", 1)])
                assert ("revoked", [TopicPartition("t", 0), TopicPartition("t", 1)]) not in listener.calls
                assert {tp.partition: await c.position(tp) for tp in c.assignment()} == {0: 5, 1: 5}
                committed = await c.committed(TopicPartition("t", 0))
                assert committed.offset == 5
            finally:
                await c.close(autocommit=False)

    asyncio.run(main())
