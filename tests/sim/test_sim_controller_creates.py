"""The controller creates partition states asking which partition znodes exist all at once.

`ControllerWrites.state_units` made two blocking `exists` per new partition (its topic's
partitions znode, its own), one round trip after another: 20,000 round trips before the first
write of a 10,000-partition CreateTopics. Here the real `ControllerWrites` creates 1,000 states
against the simulated ZooKeeper, whose client counts reads in flight and charges reads sent
together one round trip: the `exists` go ten at a time, the whole takes a fraction of 2,000
round trips, and every state is written (partition znodes already there, from an earlier
attempt, are not created again)."""

from __future__ import annotations

import asyncio
import uuid

from odradek.cluster import zk_layout as L
from odradek.cluster.controller_writes import ControllerWrites
from odradek.testing.sim.loop import Node

from .test_sim_zookeeper import as_node, run

TOPICS, PARTITIONS = 2, 500


def test_partition_states_are_created_with_their_exists_pipelined():
    async def main(loop, net, zk):  # noqa: ANN001
        admin = zk.client(Node("admin"), 60000)
        admin.create(L.CLUSTER_ID, L.encode_cluster_id("sim-cluster"), makepath=True)
        admin.create(L.broker_path(1), b"{}", makepath=True)
        creates = []
        for t in range(TOPICS):
            name = f"t{t}"
            a = L.TopicAssignment(uuid.uuid4(), {p: (1,) for p in range(PARTITIONS)}, {}, {})
            admin.create(L.topic_path(name), L.encode_topic(a), makepath=True)
            creates += [(name, p, L.PartitionState(1, 0, (1,), 1, None)) for p in range(PARTITIONS)]
        # an earlier attempt made t0's partitions znode and some partitions' znodes, not their states
        for p in range(0, PARTITIONS, 7):
            admin.create(L.partition_path("t0", p), b"", makepath=True)

        node = Node("b1")
        c = zk.client(node, 60000)
        writes = ControllerWrites(c, 1)
        elected = await as_node(node, asyncio.to_thread(writes.elect))
        assert elected is not None
        writes.fence(*elected)
        rtt = net.base_latency("b1", "zk") + net.base_latency("zk", "b1")
        t0 = loop.elapsed
        refused = await as_node(node, asyncio.to_thread(writes.write_states, creates, []))
        took = loop.elapsed - t0
        n = TOPICS * PARTITIONS
        print(f"{n} states created in {took:.3f} s (round trip {rtt * 1000:.2f} ms), {c.max_reads_in_flight} in flight")
        assert refused == {}
        assert c.max_reads_in_flight == 10  # blocking, one at a time, before
        assert took < 2 * n * rtt / 4, (took, rtt)  # ~n/10 round trips for the exists, not 2n
        for t in range(TOPICS):
            for p in range(PARTITIONS):
                data, _ = admin.get(L.partition_state_path(f"t{t}", p))
                assert L.decode_partition_state(f"t{t}", p, data).leader == 1

    run(main)
