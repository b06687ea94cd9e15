"""A group coordinator cut from ZooKeeper (a proxy between it and ZooKeeper; clients and its
peers still reach it) past its session, beside Apache Kafka 3.9 in ZooKeeper mode (issue 25,
docs/cluster.md "A coordinator cut from ZooKeeper").

Offset 5 is committed through the coordinator C; C is cut from ZooKeeper until its session
expires and another broker leads the group's `__consumer_offsets` partition; offset 9 is
committed through that new coordinator; then C itself is asked OffsetFetch. odradek's C
answers NOT_COORDINATOR (it stopped acting as coordinator); Kafka's answers 5 from its old
offsets, below the 9 already acknowledged (its coordinators resign only when the controller's
LeaderAndIsr reaches them, which a cut broker gets once registered again)."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.fault_workload import ClusterFactory, create_topic
from support.odradek_cluster import KafkaZkCluster
from support.proxy import TcpProxy

from odradek.client.aio import AIOConsumer
from odradek.client.consumer.subscription import TopicPartition
from odradek.coordinator.codec import partition_for
from odradek.protocol.errors import ErrorCode

# serial, the whole module: a coordinator cut from ZooKeeper past its session, as the fault modules
# (scripts/test.sh)
pytestmark = [pytest.mark.cluster, pytest.mark.serial]

TOPIC = "fenced"
OFFSETS = "__consumer_offsets"
OFFSET_FETCH = 9


@pytest.fixture
def make_cluster(tmp_path):
    with ClusterFactory(tmp_path) as make:
        yield make


def _kafka_with_zookeeper_proxies(tmp_path) -> tuple[KafkaZkCluster, dict[int, TcpProxy]]:  # noqa: ANN001
    reason = KafkaZkCluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    c = KafkaZkCluster(tmp_path / "kafka")
    zk = c.kafka.zookeeper
    assert zk is not None
    proxies = {n.node_id: TcpProxy(("127.0.0.1", zk.port)).start() for n in c.kafka.nodes}
    for n in c.kafka.nodes:
        n.configure({**n.properties, "zookeeper.connect": f"127.0.0.1:{proxies[n.node_id].port}"})
    return c, proxies


def _group_led_by_other_than_controller(c) -> tuple[str, int, int]:  # noqa: ANN001
    """A group id whose coordinator is not the controller: (group, offsets partition, coordinator)."""
    snap = c.snapshot()
    offsets = snap.topics[OFFSETS].partitions
    for i in range(200):
        group = f"fence-{i}"
        p = partition_for(group, len(offsets))
        leader = offsets[p].leader
        if leader not in (-1, snap.controller_id):
            return group, p, leader
    raise AssertionError("every group's coordinator is the controller")


def _consumer(bootstrap: str, group: str) -> AIOConsumer:
    return AIOConsumer(
        config={
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 200,
        }
    )


async def _commit(bootstrap: str, group: str, offset: int) -> None:
    c = _consumer(bootstrap, group)
    await c.start()
    try:
        await c.commit({TopicPartition(TOPIC, 0): offset}, timeout=60)
    finally:
        await c.close(autocommit=False)


async def _offset_fetch(bootstrap: str, node: int, group: str) -> tuple[int, int]:
    """OffsetFetch sent to broker `node` itself: (error code, committed offset of partition 0)."""
    c = _consumer(bootstrap, group)
    await c.start()
    try:
        data = {"group_id": group, "require_stable": True, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
        resp = await c.cluster.send(node, OFFSET_FETCH, data, timeout=10)
        code = int(getattr(resp, "error_code", 0))
        p = resp.topics[0].partitions[0] if resp.topics else None
        if p is not None and not code:
            code = int(p.error_code)
        return code, int(p.committed_offset) if p is not None else -1
    finally:
        await c.close(autocommit=False)


@pytest.mark.parametrize("kind", ["odradek", pytest.param("kafka39", marks=pytest.mark.kafka_case)])
def test_a_coordinator_cut_from_zookeeper_past_its_session(make_cluster, tmp_path, request, kind):
    if kind == "kafka39":
        c, proxies = _kafka_with_zookeeper_proxies(tmp_path)
        make_cluster.made.append(c)  # stopped with the others
        request.addfinalizer(lambda: [proxy.stop() for proxy in proxies.values()])
        c.start()
    else:
        c = make_cluster(zookeeper_proxies=True)
        proxies = c.zk_proxies
    create_topic(c, TOPIC, [[1, 2, 3]])
    asyncio.run(_commit(c.bootstrap, "warm-up", 1))  # creates __consumer_offsets
    c.wait(lambda s: OFFSETS in s.topics and all(p.leader >= 0 for p in s.topics[OFFSETS].partitions), 60)
    group, p, coord = _group_led_by_other_than_controller(c)
    asyncio.run(_commit(c.bootstrap, group, 5))
    assert asyncio.run(_offset_fetch(c.brokers[coord].bootstrap, coord, group)) == (0, 5)

    proxies[coord].cut()
    try:
        c.wait(
            lambda s: s.broker(coord) is None and s.topics[OFFSETS].partitions[p].leader not in (coord, -1),
            c.session_ms / 1000 + 30,
            f"broker {coord}'s session gone and {OFFSETS}-{p} led by another broker",
        )
        others = ",".join(b.bootstrap for i, b in c.brokers.items() if i != coord)
        asyncio.run(_commit(others, group, 9))  # acknowledged by the new coordinator
        time.sleep(1)
        answer = asyncio.run(_offset_fetch(c.brokers[coord].bootstrap, coord, group))
    finally:
        proxies[coord].heal()
    if kind == "odradek":
        assert answer[0] == ErrorCode.not_coordinator, answer
    else:  # Kafka's cut coordinator answers from its old offsets, below the 9 acknowledged since
        assert answer == (0, 5), answer
    c.wait(lambda s: s.broker(coord) is not None, 60, f"broker {coord} registered again")
    assert asyncio.run(_committed(c.bootstrap, group)) == 9  # what the group has, once healed


async def _committed(bootstrap: str, group: str) -> int:
    c = _consumer(bootstrap, group)
    await c.start()
    try:
        answer = await c.committed([TopicPartition(TOPIC, 0)], timeout=60)
        om = answer.get(TopicPartition(TOPIC, 0))
        return om.offset if om is not None else -1
    finally:
        await c.close(autocommit=False)
