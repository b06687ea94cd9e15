"""The ZooKeeper cache's start reads the topics and their partitions' states many at a time.

Kafka's ZooKeeperClient sends its reads asynchronously, at most `zookeeper.max.in.flight.requests`
(10) on their way (`handleRequests`); the cache did one blocking round trip per znode, one after
the other: 10,000 round trips for 10,000 partitions at every broker's start. Here the real
`ZkCache` starts against the simulated ZooKeeper, whose client counts the reads in flight and
charges reads sent together one round trip: the start keeps ten reads in flight, takes a
fraction of the one-at-a-time start's time, and ends with what one plain reading of the znodes
gives (`read_view`); watches set by the pipelined reads, including those of states not yet
created, see later changes."""

from __future__ import annotations

import asyncio
import uuid

from odradek.cluster import zk_layout as L
from odradek.cluster.zk_cache import ZkCache, read_view
from odradek.testing.sim.loop import Node
from odradek.testing.sim.zk import SimZkClient

from .test_sim_zookeeper import as_node, run

TOPICS, PARTITIONS = 4, 250
NO_STATE = {("t1", 7), ("t3", 249)}  # assignments whose state the controller has not written yet


def state(leader: int, epoch: int = 0) -> bytes:
    return L.encode_partition_state(L.PartitionState(leader, epoch, (1, 2, 3), 1, None))


def topic(partitions: int) -> bytes:
    return L.encode_topic(L.TopicAssignment(uuid.uuid4(), {p: (1, 2, 3) for p in range(partitions)}, {}, {}))


def populate(c: SimZkClient) -> None:
    c.create(L.CLUSTER_ID, L.encode_cluster_id("sim-cluster"), makepath=True)
    for t in range(TOPICS):
        name = f"t{t}"
        c.create(L.topic_path(name), topic(PARTITIONS), makepath=True)
        for p in range(PARTITIONS):
            if (name, p) not in NO_STATE:
                c.create(L.partition_state_path(name, p), state(1 + p % 3), makepath=True)
    c.create(L.topic_config_path("t2"), L.encode_config({"retention.ms": "1000"}), makepath=True)


def same_state(cache: ZkCache, reader: SimZkClient) -> None:
    got, want = cache.view(), read_view(reader)
    assert got.topics == want.topics
    assert got.states == want.states
    assert {t: c for t, c in got.topic_configs.items() if c} == {t: c for t, c in want.topic_configs.items() if c}


async def start(node: Node, c: SimZkClient, loop, max_in_flight: int) -> tuple[ZkCache, float]:  # noqa: ANN001
    cache = ZkCache(c, 1, "PLAINTEXT", lambda: None, max_in_flight=max_in_flight)
    t0 = loop.elapsed
    await as_node(node, asyncio.to_thread(cache.start))
    return cache, loop.elapsed - t0


def test_the_cache_starts_with_ten_reads_in_flight_and_ends_with_what_zookeeper_holds():
    async def main(loop, net, zk):  # noqa: ANN001
        admin = zk.client(Node("admin"), 60000)
        populate(admin)
        reader = zk.client(Node("reader"), 60000)

        piped_node, one_node = Node("b1"), Node("b2")
        piped_client, one_client = zk.client(piped_node, 60000), zk.client(one_node, 60000)
        piped, piped_s = await start(piped_node, piped_client, loop, 10)
        one, one_s = await start(one_node, one_client, loop, 1)

        assert piped_client.max_reads_in_flight == 10
        assert one_client.max_reads_in_flight == 1
        assert piped_client.reads_in_flight == one_client.reads_in_flight == 0
        n = TOPICS * PARTITIONS
        assert len(piped.view().states) == n - len(NO_STATE)
        same_state(piped, reader)
        same_state(one, reader)
        assert piped.view().states == one.view().states
        print(f"start: {piped_s:.3f} s with 10 reads in flight, {one_s:.3f} s one at a time")
        assert piped_s * 5 < one_s, (piped_s, one_s)  # ~n/10 round trips against ~n

        # The watches the pipelined reads set: a state written later, a state changed, a new topic.
        admin.create(L.partition_state_path("t1", 7), state(2), makepath=True)
        admin.set(L.partition_state_path("t0", 0), state(3, epoch=5))
        admin.create(L.topic_path("t9"), topic(30), makepath=True)
        for p in range(30):
            admin.create(L.partition_state_path("t9", p), state(1), makepath=True)
        await asyncio.sleep(1.0)
        view = piped.view()
        assert view.states[("t1", 7)].state.leader == 2
        assert view.states[("t0", 0)].state.leader_epoch == 5
        assert len([k for k in view.states if k[0] == "t9"]) == 30
        same_state(piped, reader)
        same_state(one, reader)
        assert piped_client.max_reads_in_flight == 10

        # A topic deleted: its watch ends (its function returned False); made again, it is read again.
        admin.delete(L.topic_path("t9"), recursive=True)
        await asyncio.sleep(1.0)
        assert "t9" not in piped.view().topics and not [k for k in piped.view().states if k[0] == "t9"]
        admin.create(L.topic_path("t9"), topic(5), makepath=True)
        for p in range(5):
            admin.create(L.partition_state_path("t9", p), state(3), makepath=True)
        await asyncio.sleep(1.0)
        assert sorted(p for t, p in piped.view().states if t == "t9") == list(range(5))
        same_state(piped, reader)
        same_state(one, reader)
        piped.stop()
        one.stop()

    run(main)
