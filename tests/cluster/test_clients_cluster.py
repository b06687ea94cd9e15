"""The six real clients against a three-broker cluster: topic admin, produce/consume across
leaders on every broker, groups whose coordinator is on another broker, and a group that
keeps working when its coordinator's broker is killed."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from support.clients import keyed_records, unavailable_reason
from support.group_member import Member, split_ok, wait_until
from support.odradek_cluster import SESSION_MS, OdradekCluster


def create_topic(bootstrap: str, name: str, partitions: int, rf: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=20).values():
        f.result()


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(30) == 0


# one worker runs the module's tests (xdist --dist loadgroup): its cluster is module-scoped, started once
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("clients_cluster")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = OdradekCluster(
        tmp_path_factory.mktemp("clients-cluster"),
        brokers=3,
        overrides={"default.replication.factor": 3, "num.partitions": 3, "offsets.topic.num.partitions": 6},
    )
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    yield c
    c.stop()


def test_topic_admin_and_records_across_leaders(cluster, client):
    c = client(cluster.bootstrap)
    topic = f"cl-{client.name}-{uuid.uuid4().hex[:6]}"
    c.create_topic(topic, 3)
    snap = cluster.wait(
        lambda s: topic in s.topics and all(len(p.isr) == len(p.replicas) for p in s.topics[topic].partitions), 20
    )
    assert sorted(p.leader for p in snap.topics[topic].partitions) == [1, 2, 3]  # one leader per broker
    leaders = {p.partition: p.leader for p in snap.topics[topic].partitions}
    # every broker's metadata cache takes the new topic from ZooKeeper on its own: the broker a
    # client asks can name a leader a moment after the controller's snapshot does (as in Kafka)
    seen: list[dict] = []
    wait_until(
        lambda: seen.append(c.describe_topic(topic)) or seen[-1] == leaders, 10, lambda: f"{seen[-1:]} != {leaders}"
    )
    assert seen[-1] == leaders
    sent = keyed_records(1500, seq_header=not c.headers_per_run)  # kcat: one process per header set
    meta = c.produce(topic, sent)
    assert len(meta) == len(sent)
    got = c.consume(topic, expected=len(sent), timeout=60)
    assert sorted(r.content() for r in got) == sorted(r.content() for r in sent)
    c.delete_topic(topic)
    cluster.wait(lambda s: topic not in s.topics, 20, "the topic deleted")


KINDS = ["confluent", "kafka_python", "aiokafka", "java", "kafkajs"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_group_splits_partitions_led_by_every_broker(cluster, tmp_path, kind):
    reason = unavailable_reason(kind)
    if reason:
        pytest.skip(reason)
    topic = f"gs-{kind}"
    create_topic(cluster.bootstrap, topic, 6)
    values = [f"{kind}-{i}" for i in range(60)]
    produce(cluster.bootstrap, topic, values, 6)
    ms = [
        Member(kind, cluster.bootstrap, topic, f"g-{topic}", f"m{i}", session_timeout_ms=6000, log_dir=tmp_path)
        for i in range(2)
    ]
    try:
        wait_until(lambda: split_ok(ms, 6), 60, lambda: f"2-way split: {ms}", ms)
        wait_until(lambda: set(values) <= {v for m in ms for v in m.values}, 60, "every record", ms)
    finally:
        for m in ms:
            m.stop()


def test_a_group_keeps_working_when_its_coordinators_broker_is_killed(cluster):
    topic, group = "coord-kill", "g-coord-kill"
    create_topic(cluster.bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})

    def send(tag: str, n: int) -> list[bytes]:
        vals = [f"{tag}-{i}".encode() for i in range(n)]
        for v in vals:
            p.produce(topic, v)
        assert p.flush(30) == 0
        return vals

    first = send("first", 90)
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    c.subscribe([topic])
    seen: list[bytes] = []

    def read_until(vals: list[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not set(vals) <= set(seen) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
                c.commit(m, asynchronous=False)
        assert set(vals) <= set(seen), f"{len(set(vals) - set(seen))} not read"

    try:
        read_until(first, 60)
        from odradek.coordinator.group.records import partition_for

        offsets = cluster.snapshot().topics["__consumer_offsets"].partitions
        coordinator = offsets[partition_for(group, len(offsets))].leader
        cluster.brokers[coordinator].kill()
        cluster.wait(
            lambda s: (
                s.topics["__consumer_offsets"].partitions[partition_for(group, len(offsets))].leader
                not in (coordinator, -1)
            ),
            SESSION_MS / 1000 + 5,
            "a new coordinator",
        )
        second = send("second", 90)
        read_until(second, 60)
        # committed offsets survived on the new coordinator: nothing of the first batch again
        assert len(seen) == len(set(seen)), "records were read twice"
    finally:
        c.close()
        cluster.brokers[coordinator].start(timeout=40)
