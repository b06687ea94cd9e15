"""Partition reassignment: replicas move to other brokers while the topic keeps serving; a
replication-factor-1 move copies the data first."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from support.odradek_cluster import OdradekCluster
from support.raw import RawConnection

from odradek.protocol import messages

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path):
    c = OdradekCluster(tmp_path, brokers=3, overrides={"replica.lag.time.max.ms": 2000})
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    yield c
    c.stop()


def reassign(c: OdradekCluster, moves: dict[tuple[str, int], tuple[int, ...] | None]):
    mod = messages.module_of(messages.request_class(45, 0))
    topics: dict[str, list] = {}
    for (t, p), replicas in moves.items():
        topics.setdefault(t, []).append(mod.ReassignablePartition(partition_index=p, replicas=replicas))
    body = tuple(mod.ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())
    snap = c.snapshot()
    with RawConnection(c.brokers[next(b for b in (1, 2, 3) if b != snap.controller_id)].bootstrap) as conn:
        # sent to a broker that is not the controller: it passes the request on
        return conn.call(45, 0, timeout=30000, topics=body)


def count(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "count", "enable.auto.commit": False})
    try:
        for attempt in range(20):  # right after a move the client's metadata may still name the old leader
            try:
                _low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
                break
            except KafkaException:
                if attempt == 19:
                    raise
                time.sleep(0.5)
        c.assign([TopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < high and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def test_a_replication_factor_1_partition_moves_with_its_data(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("mover", 1, 1)], operation_timeout=20).values():
        f.result()
    src = cluster.snapshot().topics["mover"].partitions[0].leader
    dst = next(b for b in (1, 2, 3) if b != src)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    sent = [f"v{i}".encode() for i in range(2000)]
    for v in sent:
        p.produce("mover", v)
    assert p.flush(30) == 0
    r = reassign(cluster, {("mover", 0): (dst,)})
    assert int(r.error_code) == 0 and int(r.responses[0].partitions[0].error_code) == 0
    snap = cluster.wait(lambda s: s.topics["mover"].partitions[0].replicas == (dst,), 30, "the move to complete")
    assert snap.topics["mover"].partitions[0].leader == dst
    assert count(cluster.bootstrap, "mover", 0) == sent
    deadline = time.monotonic() + 10  # the old replica's log goes (renamed -delete, then removed)
    while (cluster.brokers[src].log_dirs / "mover-0").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (cluster.brokers[src].log_dirs / "mover-0").exists()


def test_a_move_under_writes_loses_nothing_and_lists_as_ongoing(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("busy", 2, 2)], operation_timeout=20).values():
        f.result()
    before = {p.partition: p.replicas for p in cluster.snapshot().topics["busy"].partitions}
    target = {p: tuple(b for b in (1, 2, 3) if b not in reps) + reps[:1] for p, reps in before.items()}
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    acked = []
    for i in range(3000):
        p.produce(
            "busy", f"a{i}".encode(), partition=i % 2, on_delivery=lambda e, m: e is None and acked.append(m.value())
        )
    p.flush(30)
    r = reassign(cluster, {("busy", part): reps for part, reps in target.items()})
    assert all(int(x.error_code) == 0 for t in r.responses for x in t.partitions)
    for i in range(3000, 4000):
        p.produce(
            "busy", f"a{i}".encode(), partition=i % 2, on_delivery=lambda e, m: e is None and acked.append(m.value())
        )
    assert p.flush(30) == 0
    cluster.wait(
        lambda s: all(tuple(x.replicas) == target[x.partition] for x in s.topics["busy"].partitions), 30, "the moves"
    )
    got = count(cluster.bootstrap, "busy", 0) + count(cluster.bootstrap, "busy", 1)
    assert len(acked) == 4000 and set(acked) <= set(got) and len(got) == len(set(got))


def test_a_reassignment_written_to_zookeeper_by_kafkas_tools_is_carried_out(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic("legacy", 1, 1)], operation_timeout=20).values():
        f.result()
    src = cluster.snapshot().topics["legacy"].partitions[0].leader
    dst = next(b for b in (1, 2, 3) if b != src)
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start()
    try:
        doc = {"version": 1, "partitions": [{"topic": "legacy", "partition": 0, "replicas": [dst]}]}
        zk.create("/admin/reassign_partitions", json.dumps(doc).encode())
        cluster.wait(lambda s: s.topics["legacy"].partitions[0].replicas == (dst,), 30, "the legacy move")
        deadline = time.monotonic() + 5
        while zk.exists("/admin/reassign_partitions") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not zk.exists("/admin/reassign_partitions")
    finally:
        zk.stop()
