"""Creating a topic costs the cluster the same whatever the partitions it already holds.

Issue 28: creating 10,000 partitions (ten topics of 1,000, RF 3) on three brokers took 77-196 s,
each topic longer than the one before: every change of the metadata cost O(all partitions).
Each broker built its snapshot from every partition state (`build_snapshot`), compared it with
the previous one and walked every hosted partition to follow its leader again; the controller
decided every partition again at every step (`reconcile_partition`). Here three simulated
brokers (the real code) create topics of 150 partitions one after another, and the work each
topic's creation does is counted: the PartitionInfo objects the brokers' snapshots build, the
fetchers' `follow` calls, the controller's decisions. The fourth topic may cost no more than
the first, within a margin, where before it cost about four times as much.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from odradek.broker.replication.fetcher import ReplicaFetcherManager
from odradek.client.aio import AIOAdmin, NewTopic
from odradek.cluster import controller as controller_module
from odradek.cluster import zookeeper as zookeeper_module
from odradek.testing.sim.cluster import SimCluster
from odradek.testing.sim.logcap import captured_logs
from odradek.testing.sim.loop import simulated_world
from odradek.testing.sim.run import SimOptions, _until
from odradek.testing.sim.workload import client_config

TOPICS, PARTITIONS = 4, 150


def test_the_work_of_creating_a_topic_does_not_grow_with_the_topics_before_it(tmp_path, monkeypatch):
    work: Counter[str] = Counter()

    def counting(name, fn):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            work[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(zookeeper_module, "PartitionInfo", counting("snapshot", zookeeper_module.PartitionInfo))
    monkeypatch.setattr(
        controller_module, "reconcile_partition", counting("decide", controller_module.reconcile_partition)
    )
    monkeypatch.setattr(ReplicaFetcherManager, "follow", counting("follow", ReplicaFetcherManager.follow))

    cluster = SimCluster(1, str(tmp_path), brokers=3, overrides=SimOptions().broker_overrides())
    loop = cluster.loop
    per_topic: list[Counter[str]] = []

    def healthy(topic: str) -> bool:
        views = cluster.partitions(topic)
        return len(views) == PARTITIONS and all(v.leader >= 0 and set(v.isr) == set(v.replicas) for v in views)

    async def main() -> None:
        for h in cluster.hosts.values():
            h.start()
        assert await _until(
            cluster,
            lambda: (
                all(h.running for h in cluster.hosts.values())
                and cluster.registered() == set(cluster.hosts)
                and cluster.controller() >= 0
            ),
            60,
        )
        await asyncio.sleep(1)
        for k in range(TOPICS):
            before = Counter(work)

            async def create(k: int = k) -> None:
                admin = AIOAdmin(client_config(cluster, f"admin-{k}"))
                await admin.start()
                try:
                    await admin.create_topics([NewTopic(f"t{k}", PARTITIONS, 3, {"min.insync.replicas": "2"})])
                finally:
                    await admin.close()

            await cluster.spawn(cluster.client_node(f"admin-{k}"), create())
            assert await _until(cluster, lambda k=k: healthy(f"t{k}"), 60), f"t{k} not healthy"
            await asyncio.sleep(2)  # every broker's metadata and fetchers settle
            per_topic.append(Counter(work) - before)

    asyncio.set_event_loop(loop)
    try:
        with simulated_world(loop, 1), captured_logs(lambda: loop.elapsed, logging.WARNING, False):
            loop.run_until_complete(main())
    finally:
        asyncio.set_event_loop(None)
        cluster.teardown()
    print("work per topic:", [dict(c) for c in per_topic])
    first, last = per_topic[0], per_topic[-1]
    for what in ("snapshot", "follow", "decide"):
        assert last[what] <= 1.5 * first[what] + PARTITIONS, (what, [c[what] for c in per_topic])
    # what a topic costs is about its own partitions: each broker builds each of them a few times
    assert last["snapshot"] <= 3 * PARTITIONS * 8, per_topic
    assert first["follow"] >= 2 * PARTITIONS  # every follower replica followed its leader


if __name__ == "__main__":
    pytest.main([__file__, "-s"])
