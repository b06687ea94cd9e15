"""Topic deletion on a cluster (issue 25): done once, answered once every broker has dropped
the topic, and a deleted topic stays deleted.

Three odradek brokers and a real ZooKeeper; the librdkafka sequence also runs against
Apache Kafka 3.9 in ZooKeeper mode (the reference: what it answered in the same sequence is
in docs/cluster.md, "Deleting a topic").

- DeleteTopics of several topics answers quickly (no 0.5 s stall per controller step: the
  controller deleted `/admin/delete_topics/<topic>` again after it was gone, its ZooKeeper
  transaction failed and it waited), and when it does, no broker's Metadata lists them.
- While a deletion is in progress (here held open by a paused broker that cannot drop the
  topic), every Metadata says UNKNOWN_TOPIC_OR_PARTITION, auto-creation by a client that
  still has the topic in its metadata answers LEADER_NOT_AVAILABLE and creates nothing,
  CreateTopics answers TOPIC_ALREADY_EXISTS ("marked for deletion"), DeleteTopics times out
  with REQUEST_TIMED_OUT; once the paused broker's session expires the deletion completes.
- librdkafka's test 0033 sequence: a consumer with `allow.auto.create.topics=true` that
  subscribed to the topics by regex stays alive while they are deleted; nothing brings them
  back, and a later regex subscription is assigned none of them.
"""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from support.odradek_cluster import SESSION_MS, OdradekCluster
from support.raw import RawConnection, nested

from odradek.protocol.errors import ErrorCode
from odradek.storage import OSFileSystem
from odradek.storage.checkpoint import read_partition_metadata

# serial, the whole module: timed: deletions within 10 s, a timeout of 1 s answered within 3, a
# paused broker's session expiry
pytestmark = [pytest.mark.cluster, pytest.mark.serial]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = OdradekCluster(tmp_path_factory.mktemp("deletion"), brokers=3, overrides={"num.partitions": 2})
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    yield c
    c.stop()


def create(bootstrap: str, names: list[str], partitions: int = 2, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, partitions, rf) for n in names], operation_timeout=20).values():
        f.result()
    p = Producer({"bootstrap.servers": bootstrap})
    for n in names:
        for i in range(10):
            p.produce(n, f"{n}-{i}".encode())
    assert p.flush(30) == 0


def metadata(bootstrap: str, names: list[str], *, auto_create: bool = False) -> dict[str, int]:
    """Each topic's error code in a Metadata v9 answer of one broker."""
    with RawConnection(bootstrap) as conn:
        r = conn.call(
            3,
            9,
            topics=tuple(nested(3, 9, "MetadataRequestTopic", name=n) for n in names),
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    return {t.name: int(t.error_code) for t in r.topics}


def delete_topics(bootstrap: str, names: list[str], timeout_ms: int) -> dict[str, int]:
    with RawConnection(bootstrap) as conn:
        r = conn.call(20, 4, topic_names=tuple(names), timeout=datetime.timedelta(milliseconds=timeout_ms))
    return {t.name: int(t.error_code) for t in r.responses}


def create_topic(bootstrap: str, name: str) -> tuple[int, str | None]:
    """CreateTopics v5 of one topic at one broker: (error code, message)."""
    with RawConnection(bootstrap) as conn:
        topic = nested(
            19, 5, "CreatableTopic", name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
        )
        r = conn.call(19, 5, topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)
    return int(r.topics[0].error_code), r.topics[0].error_message


def test_deleting_topics_answers_once_every_broker_has_dropped_them_and_without_stalls(cluster):
    names = [f"gone-{i}-{uuid.uuid4().hex[:6]}" for i in range(5)]
    create(cluster.bootstrap, names)
    marks = {i: len(b.log_path.read_text(errors="replace")) for i, b in cluster.brokers.items()}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    took = []
    for n in names:  # one at a time, as librdkafka's tests do: each waits on the previous one's steps
        started = time.monotonic()
        admin.delete_topics([n], operation_timeout=10)[n].result()
        took.append(time.monotonic() - started)
        for b in cluster.brokers.values():  # at once: no broker still lists it
            assert metadata(b.bootstrap, [n]) == {n: ErrorCode.unknown_topic_or_partition}, b.bootstrap
    print(f"DeleteTopics answered in {[f'{t * 1000:.0f} ms' for t in took]}")
    assert max(took) < 2.0, took
    cluster.wait(lambda s: not any(n in s.topics for n in names), 10, "the topics gone")
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start()
    try:
        deadline = time.monotonic() + 10
        while zk.get_children("/admin/delete_topics") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zk.get_children("/admin/delete_topics") == []
        assert not [n for n in names if zk.exists(f"/brokers/topics/{n}") or zk.exists(f"/config/topics/{n}")]
    finally:
        zk.stop()
    for i, b in cluster.brokers.items():
        logged = b.log_path.read_text(errors="replace")[marks[i] :]
        assert "controller step failed" not in logged and "Traceback" not in logged, f"broker {i}:\n{logged[-3000:]}"


def test_many_topics_deleted_in_one_request_within_its_timeout(cluster):
    """librdkafka's test 0045_subscribe_many_updates deletes its 100 topics of 4 partitions in
    one DeleteTopics (operation timeout 25 s); on 3 brokers odradek timed out (each topic waited
    for the previous one's controller step, 0.5 s more each). Here 60 topics of 4 partitions."""
    names = [f"many-{i}-{uuid.uuid4().hex[:6]}" for i in range(60)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(n, 4, 2) for n in names], operation_timeout=60).values():
        f.result()
    started = time.monotonic()
    for f in admin.delete_topics(names, operation_timeout=25, request_timeout=30).values():
        f.result()
    took = time.monotonic() - started
    print(f"60 topics of 4 partitions deleted in {took:.2f} s")
    assert took < 10, took
    listed = {
        (i, n)
        for i, b in cluster.brokers.items()
        for n, code in metadata(b.bootstrap, names).items()
        if code != ErrorCode.unknown_topic_or_partition
    }
    if listed:
        i, n = sorted(listed)[0]
        lines = [line for line in cluster.brokers[i].log_path.read_text(errors="replace").splitlines() if n in line]
        raise AssertionError(f"still listed after DeleteTopics answered: {sorted(listed)}\n" + "\n".join(lines))


def test_a_topic_being_deleted_is_not_created_again(cluster):
    """Broker 3 paused (SIGSTOP) cannot drop the topic, so the deletion stays in progress until
    its ZooKeeper session expires: what clients see meanwhile is checked, then the end."""
    name = f"held-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap, [name])
    topic_id = cluster.snapshot().topics[name].topic_id
    paused = 3
    cluster.pause(paused)
    try:
        others = [b.bootstrap for i, b in cluster.brokers.items() if i != paused]
        started = time.monotonic()
        assert delete_topics(others[0], [name], 1000) == {name: ErrorCode.request_timed_out}
        assert 0.9 < time.monotonic() - started < 3
        for b in others:
            assert metadata(b, [name]) == {name: ErrorCode.unknown_topic_or_partition}
            # a client that still has it in its metadata, with auto-creation on (as librdkafka's)
            assert metadata(b, [name], auto_create=True) == {name: ErrorCode.leader_not_available}
        code, message = create_topic(others[0], name)
        assert code == ErrorCode.topic_already_exists and "marked for deletion" in (message or ""), (code, message)
        snap = cluster.snapshot()
        assert name not in snap.topics  # left out of everyone's metadata
        zk = KazooClient(hosts=cluster.zookeeper.connect)
        zk.start()
        try:
            assert zk.exists(f"/brokers/topics/{name}") and zk.exists(f"/admin/delete_topics/{name}")
            # the paused broker's session expires: it serves nothing, the deletion completes
            deadline = time.monotonic() + SESSION_MS / 1000 + 10
            while zk.exists(f"/admin/delete_topics/{name}") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not zk.exists(f"/admin/delete_topics/{name}") and not zk.exists(f"/brokers/topics/{name}")
        finally:
            zk.stop()
    finally:
        cluster.resume(paused)
    cluster.wait(lambda s: len(s.brokers) == 3, SESSION_MS / 1000 + 20, "broker 3 back")
    # the name is free again: a new topic (a new id), not the old one back
    assert metadata(others[0], [name], auto_create=True)[name] in (0, ErrorCode.leader_not_available)
    snap = cluster.wait(lambda s: name in s.topics, 10, "the new topic")
    assert snap.topics[name].topic_id != topic_id
    new_id = snap.topics[name].topic_id
    fs = OSFileSystem()
    deadline = time.monotonic() + 20  # the resumed broker drops the old topic's logs
    while True:
        dirs = [d for d in cluster.brokers[paused].log_dirs.iterdir() if d.name.startswith(f"{name}-")]
        stray = [
            d.name for d in dirs if not d.name.endswith("-delete") and read_partition_metadata(fs, str(d)) != new_id
        ]
        if not stray or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not stray, f"logs of the deleted topic left on broker {paused}: {stray}"


@pytest.fixture(params=["odradek", pytest.param("kafka39-zookeeper", marks=pytest.mark.kafka_case)])
def target(request, cluster):
    if request.param == "odradek":
        return cluster.bootstrap
    return request.getfixturevalue("kafka39_zk_cluster").bootstrap


def test_librdkafka_0033_deleted_topics_stay_deleted(target):
    """librdkafka's test 0033 in Python: a consumer with auto-creation on and a 5 s metadata
    refresh subscribes by regex, is assigned the topics, closes (its handle stays alive, as
    the test deletes its topics with it); the topics are deleted one by one. Nothing creates
    them again, and a new regex subscription is assigned none of them. Kafka 3.9 (ZooKeeper
    mode) passes the same test."""
    gid = uuid.uuid4().hex[:8]
    names = [f"regex_sub_{i}_{gid}" for i in range(3)]
    create(target, names, partitions=1, rf=1)
    conf = {
        "bootstrap.servers": target,
        "group.id": gid,
        "topic.metadata.refresh.interval.ms": 5000,
        "allow.auto.create.topics": True,
        "session.timeout.ms": 6000,
    }
    pattern = f"^regex_sub_.*_{gid}"
    first = Consumer(conf)
    assigned: list[list[str]] = []
    first.subscribe([pattern], on_assign=lambda c, ps: assigned.append(sorted({p.topic for p in ps})))
    deadline = time.monotonic() + 30
    while not assigned and time.monotonic() < deadline:
        first.poll(0.2)
    assert assigned and assigned[-1] == names, assigned
    first.close()
    # Closing drops the connection to the group coordinator, and librdkafka asks at once for
    # every topic its handle knows, with auto-creation ("Requesting metadata for 3/3 topics:
    # broker down", 60 ms after close here). Landing after a deletion had completed, that
    # request created the topic again (1 run in 6), as it would on Kafka: auto-creation after a
    # deletion creates the topic (docs/cluster.md). The deletion starts once it is answered.
    time.sleep(1)
    admin = AdminClient({"bootstrap.servers": target})
    for n in names:
        admin.delete_topics([n], operation_timeout=10)[n].result()
    # gone from the metadata of the broker asked (Kafka's brokers learn of a deletion through
    # UpdateMetadata, a moment after DeleteTopics answers), then past the closed consumer's next
    # metadata refresh: still gone
    deadline = time.monotonic() + 15
    while [n for n in names if n in admin.list_topics(timeout=10).topics] and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(6)
    assert not [n for n in names if n in admin.list_topics(timeout=10).topics], "a deleted topic came back"
    second = Consumer({**conf, "group.id": gid + "-again"})
    got: list[list[str]] = []
    second.subscribe([pattern], on_assign=lambda c, ps: got.append(sorted({p.topic for p in ps})))
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        second.poll(0.2)
    second.close()
    assert not [t for a in got for t in a], got
    del first
