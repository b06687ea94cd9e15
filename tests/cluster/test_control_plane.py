"""Cluster mode's control plane: three real broker processes and a real ZooKeeper.

Registration in Kafka's layout, Kafka's assignment, clients following leaders, leadership
moving when a broker dies, a new controller when the controller dies, a deposed
controller's writes refused, topic deletion on every broker, a restarted broker leading its
partitions again, and ZooKeeper faults.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from support.odradek_cluster import SESSION_MS, OdradekCluster

pytestmark = [pytest.mark.cluster, pytest.mark.serial]  # timing: alone in its tier (tests/README.md)


@pytest.fixture
def cluster(tmp_path):
    c = OdradekCluster(tmp_path, brokers=3, overrides={"offsets.topic.replication.factor": 1})
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    yield c
    c.stop()


def create(c: OdradekCluster, name: str, partitions: int, rf: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, rf, config=config)], operation_timeout=20).values():
        f.result()


def produce(bootstrap: str, topic: str, n: int) -> list[tuple[bytes, bytes]]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    sent = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(n)]
    errors = []
    for k, v in sent:
        p.produce(topic, v, key=k, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors, errors
    return sent


def consume(bootstrap: str, topic: str, n: int, group: str, timeout: float = 40) -> list[tuple[bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value()))
    c.close()
    return got


def test_brokers_register_in_kafkas_zookeeper_layout(cluster):
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start()
    try:
        cid = json.loads(zk.get("/cluster/id")[0])
        assert cid["version"] == "1" and cid["id"]
        for i, b in cluster.brokers.items():
            data, stat = zk.get(f"/brokers/ids/{i}")
            reg = json.loads(data)
            assert stat.ephemeralOwner != 0
            assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{b.port}"] and reg["port"] == b.port
            meta = (b.log_dirs / "meta.properties").read_text()
            assert f"cluster.id={cid['id']}" in meta and f"node.id={i}" in meta
        controller = json.loads(zk.get("/controller")[0])
        assert controller["brokerid"] in cluster.brokers and zk.get("/controller")[1].ephemeralOwner
        assert int(zk.get("/controller_epoch")[0]) >= 1
    finally:
        zk.stop()


def test_partitions_spread_as_kafka_assigns_and_clients_follow_leaders(cluster):
    create(cluster, "spread", 6, 1)
    create(cluster, "triple", 3, 3, **{"retention.ms": "3600000"})
    snap = cluster.snapshot()
    leaders = Counter(p.leader for p in snap.topics["spread"].partitions)
    assert leaders == {1: 2, 2: 2, 3: 2}
    triple = snap.topics["triple"]
    assert sorted(p.replicas[0] for p in triple.partitions) == [1, 2, 3]
    assert all(sorted(p.replicas) == [1, 2, 3] and p.leader == p.replicas[0] for p in triple.partitions)
    assert triple.configs == {"retention.ms": "3600000"}
    sent = produce(cluster.bootstrap, "spread", 300)
    got = consume(cluster.bootstrap, "spread", 300, "g-spread")
    assert sorted(got) == sorted(sent)
    # every broker holds only the logs of the partitions it has a replica of
    for i, b in cluster.brokers.items():
        held = {d.name for d in b.log_dirs.iterdir() if d.name.startswith("spread-")}
        assert held == {f"spread-{p.partition}" for p in snap.topics["spread"].partitions if p.leader == i}


def test_a_killed_brokers_leadership_moves_within_the_session_timeout(cluster):
    create(cluster, "moving", 3, 3)
    victim = cluster.snapshot().topics["moving"].partitions[0].leader
    cluster.brokers[victim].kill()
    started = time.monotonic()
    snap = cluster.wait(
        lambda s: all(p.leader not in (victim, -1) for p in s.topics["moving"].partitions),
        SESSION_MS / 1000 + 5,
        "leaders to move",
    )
    took = time.monotonic() - started
    assert took < SESSION_MS / 1000 + 1, f"leaders moved after {took:.1f} s"
    assert all(victim not in p.isr for p in snap.topics["moving"].partitions)
    assert victim not in {b.node_id for b in snap.brokers}
    # clients follow the new leaders (RF 3 without replication yet: new data only)
    sent = produce(cluster.bootstrap, "moving", 30)
    assert len(sent) == 30


def test_the_controllers_death_elects_a_new_controller(cluster):
    first = cluster.snapshot().controller_id
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start()
    try:
        epoch = int(zk.get("/controller_epoch")[0])
        cluster.brokers[first].kill()
        snap = cluster.wait(lambda s: s.controller_id not in (first, -1), SESSION_MS / 1000 + 5, "a new controller")
        deadline = time.monotonic() + 5  # the new controller creates /controller, then increments the epoch
        while int(zk.get("/controller_epoch")[0]) == epoch and time.monotonic() < deadline:
            time.sleep(0.05)
        assert int(zk.get("/controller_epoch")[0]) == epoch + 1
        # the new controller acts: a topic created now gets leaders
        create(cluster, "after", 2, 1)
        assert all(p.leader in {b.node_id for b in snap.brokers} for p in cluster.snapshot().topics["after"].partitions)
    finally:
        zk.stop()


def test_deleting_a_topic_removes_it_from_zookeeper_and_every_broker(cluster):
    create(cluster, "doomed", 6, 1)
    produce(cluster.bootstrap, "doomed", 60)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics(["doomed"], operation_timeout=20)["doomed"].result()
    cluster.wait(lambda s: "doomed" not in s.topics, 10, "the topic to go")
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start()
    try:
        # DeleteTopics answers once every broker dropped the topic; the controller removes its
        # znodes right after (docs/cluster.md, "Deleting a topic")
        deadline = time.monotonic() + 10
        while zk.get_children("/admin/delete_topics") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not zk.exists("/brokers/topics/doomed") and not zk.exists("/config/topics/doomed")
        assert zk.get_children("/admin/delete_topics") == []
    finally:
        zk.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [d for b in cluster.brokers.values() for d in b.log_dirs.iterdir() if d.name.startswith("doomed-")]
        if not [d for d in left if not d.name.endswith("-delete")]:
            break
        time.sleep(0.1)
    assert not [d for d in left if not d.name.endswith("-delete")], left


def test_a_restarted_broker_leads_its_partitions_again(cluster):
    create(cluster, "solo", 3, 1)
    sent = produce(cluster.bootstrap, "solo", 90)
    victim = cluster.snapshot().topics["solo"].partitions[0].leader
    before = {p.partition: p.leader_epoch for p in cluster.snapshot().topics["solo"].partitions}
    cluster.brokers[victim].kill()
    snap = cluster.wait(
        lambda s: s.topics["solo"].partitions[0].leader == -1, SESSION_MS / 1000 + 5, "the partition to go offline"
    )
    assert snap.topics["solo"].partitions[0].isr == (victim,)  # the last in-sync replica is remembered
    cluster.brokers[victim].start(timeout=40)
    snap = cluster.wait(lambda s: s.topics["solo"].partitions[0].leader == victim, 15, "the broker to lead again")
    assert snap.topics["solo"].partitions[0].leader_epoch > before[0]
    got = consume(cluster.bootstrap, "solo", 90, "g-solo")
    assert sorted(got) == sorted(sent)


def test_a_broker_whose_session_expired_registers_again(cluster):
    cluster.pause(2)
    try:
        cluster.wait(lambda s: 2 not in {b.node_id for b in s.brokers}, SESSION_MS / 1000 + 5, "broker 2 to expire")
    finally:
        cluster.resume(2)
    cluster.wait(lambda s: 2 in {b.node_id for b in s.brokers}, 15, "broker 2 to register again")


def test_zookeeper_restarting_does_not_stop_brokers_serving_what_they_lead(cluster):
    create(cluster, "steady", 3, 1)
    produce(cluster.bootstrap, "steady", 30)
    cluster.zookeeper.kill()
    try:
        sent = produce(cluster.bootstrap, "steady", 30)  # leaders keep serving without ZooKeeper
        assert len(sent) == 30
    finally:
        cluster.zookeeper.start()
    cluster.wait(lambda s: len(s.brokers) == 3, 20, "the brokers back in ZooKeeper")
    got = consume(cluster.bootstrap, "steady", 60, "g-steady")
    assert len(got) == 60


def test_a_single_node_data_directory_refuses_to_join_a_cluster(cluster, tmp_path):
    data = tmp_path / "single"
    from support.broker import BrokerProcess

    single = BrokerProcess(tmp_path / "single-broker", {"log.dirs": str(data)})
    single.start()
    single.stop()
    cmd = [
        sys.executable,
        "-m",
        "odradek",
        "broker",
        "--override",
        f"zookeeper.connect={cluster.zookeeper.connect}",
        "--override",
        "broker.id=1",  # the directory's own node id: only the cluster differs
        "--override",
        f"log.dirs={data}",
        "--override",
        "listeners=PLAINTEXT://127.0.0.1:0",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "cannot join this one" in out.stderr and "belong to cluster" in out.stderr


def test_dynamic_broker_settings_persist_in_zookeeper_and_reach_every_broker(cluster):
    from support.raw import RawConnection

    from odradek.protocol import messages

    mod = messages.module_of(messages.request_class(44, 1))
    op = mod.AlterableConfig(name="log.retention.ms", config_operation=0, value="7200000")
    res = mod.AlterConfigsResource(resource_type=4, resource_name="", configs=(op,))
    with RawConnection(cluster.brokers[1].bootstrap) as c:
        r = c.call(44, 1, resources=(res,), validate_only=False)
    assert int(r.responses[0].error_code) == 0
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start()
    try:
        assert json.loads(zk.get("/config/brokers/<default>")[0]) == {
            "version": 1,
            "config": {"log.retention.ms": "7200000"},
        }
        changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "brokers/<default>"} in changes
    finally:
        zk.stop()
    cluster.brokers[3].stop()
    cluster.brokers[3].start(timeout=40)

    def described(broker: int) -> tuple[str, int]:
        dm = messages.module_of(messages.request_class(32, 4))
        q = dm.DescribeConfigsResource(
            resource_type=4, resource_name=str(broker), configuration_keys=("log.retention.ms",)
        )
        with RawConnection(cluster.brokers[broker].bootstrap) as c:
            e = c.call(32, 4, resources=(q,), include_synonyms=False, include_documentation=False).results[0].configs[0]
        return e.value, int(e.config_source)

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(described(b) != ("7200000", 3) for b in (1, 2, 3)):
        time.sleep(0.2)
    assert [described(b) for b in (1, 2, 3)] == [("7200000", 3)] * 3
