"""Seed 11860 of the long run (issue 25): `unavailable`, faults kill, config, slow-link.

What happened: b3, killed at 3.26 s and restarted at 9.06 s, started under a slow link to
ZooKeeper (0.8 s each way from 5.50 s). Its metadata store's start (`ZkCache.start`: the
persistent paths, the cluster id, the watches and every topic's and partition's znode: 40
blocking reads from one thread) ran at 14.05 s; the simulator charged each read the round
trip of that moment (1.6 s) and summed them into one delay of 64 s, fixed when the function
ran. The faults were healed at 15.2 s, but the delay was not shortened: b3 was still
"starting" when the settle time ran out (a minute later), never registered, and its
partitions' ISRs stayed without it.

Not a broker bug: kazoo sends a thread's calls one after the other, each at the link's
latency when it is sent, so a real broker's remaining reads are fast once the link is. The
fix is the simulator's (`SimLoop.charge`/`costs_changed`, `Network.set_latency`, ZooKeeper's
commit time): round trips not yet begun take the cost of the moment they begin.
"""

from __future__ import annotations

import asyncio
import uuid

from odradek.cluster import zk_layout as L
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zookeeper import ZooKeeperMetadataStore
from odradek.testing.sim.loop import NODE, Node, SimLoop, simulated_world
from odradek.testing.sim.net import Network
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed
from odradek.testing.sim.trace import Trace
from odradek.testing.sim.zk import ZK, SimZooKeeper


def test_seed_11860_the_broker_back_from_kill_registers_once_the_slow_link_heals():
    r = run_seed(11860, PROFILES["ci"])
    assert [f.kind for f in r.schedule] == ["kill", "config", "slow-link"]  # the seed's faults, as found
    assert r.ok, r.report()


def test_the_stores_start_under_a_slow_link_ends_soon_after_the_link_heals():
    """The real ZooKeeperMetadataStore starts (a topic of 30 partitions: more than 30 reads) and
    registers over a 0.8 s link healed after 3 s: registered within a couple of round trips of
    the heal, not after all its reads at 1.6 s each."""

    async def main(loop: SimLoop, net: Network, zk: SimZooKeeper) -> float:
        admin = zk.client(Node("admin"), 6000)
        admin.create(L.CLUSTER_ID, L.encode_cluster_id("c1"), makepath=True)
        assignment = L.TopicAssignment(uuid.uuid4(), {p: (1,) for p in range(30)}, {}, {})
        admin.create(L.topic_path("t"), L.encode_topic(assignment), makepath=True)
        for p in range(30):
            state = L.PartitionState(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)
            admin.create(L.partition_state_path("t", p), L.encode_partition_state(state), makepath=True)
        node = Node("b1")
        c = zk.client(node, 60000)
        store = ZooKeeperMetadataStore(c, 1, session_timeout_ms=60000)  # type: ignore[arg-type]
        for a, b in (("b1", ZK), (ZK, "b1")):
            net.set_latency(a, b, 0.8)

        async def start() -> None:
            await store.start()
            await store.register_broker(BrokerInfo(1, "b1", 9092, None, (("PLAINTEXT", "b1", 9092),)))

        token = NODE.set(node)
        try:
            started = asyncio.ensure_future(start())
        finally:
            NODE.reset(token)
        await asyncio.sleep(3.0)
        assert not started.done()
        for a, b in (("b1", ZK), (ZK, "b1")):
            net.set_latency(a, b, None)
        healed = loop.elapsed
        await started
        assert len(store.snapshot.topics["t"].partitions) == 30
        return loop.elapsed - healed

    loop = SimLoop()
    asyncio.set_event_loop(loop)
    trace = Trace()
    net = Network(loop, 11860, trace)
    zk = SimZooKeeper(loop, net, trace)
    try:
        with simulated_world(loop, 11860):
            after_heal = loop.run_until_complete(main(loop, net, zk))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert after_heal < 2 * 1.6 + 0.5
