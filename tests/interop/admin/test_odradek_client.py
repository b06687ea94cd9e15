"""Admin operations against real peers (skipped where a peer lacks the API)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.client import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from odradek.client.aio import AIOAdmin


@pytest.fixture
def admin(peer):
    peer.require("admin")
    a = Admin(bootstrap_servers=peer.bootstrap)
    yield a
    a.close()


def test_topics_lifecycle(peer, admin):
    name = f"adm-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 3, 1)])
    assert name in admin.list_topics()
    desc = admin.describe_topics([name])[name]
    assert sorted(desc.partitions) == [0, 1, 2]
    assert all(p.leader >= 0 for p in desc.partitions.values())
    with pytest.raises(errors.TopicAlreadyExistsError):
        admin.create_topic(name, 3, 1)
    if peer.supports("create_partitions"):
        admin.create_partitions({name: 5})
        deadline = time.monotonic() + 10
        while len(admin.describe_topics([name])[name].partitions) != 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(admin.describe_topics([name])[name].partitions) == 5
    admin.delete_topics([name])
    assert name not in admin.list_topics()


def test_configs(peer, admin):
    peer.require("configs")
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, 1, 1, configs={"retention.ms": "3600000"})
    res = ("topic", name)
    assert admin.describe_configs([res])[res]["retention.ms"] == "3600000"
    admin.incremental_alter_configs({res: {"retention.ms": "7200000", "cleanup.policy": "compact"}})
    cfg = admin.describe_configs([res])[res]
    assert cfg["retention.ms"] == "7200000" and cfg["cleanup.policy"] == "compact"
    admin.incremental_alter_configs({res: {"retention.ms": None}})  # back to the default
    assert admin.describe_configs([res])[res]["retention.ms"] != "7200000"


def test_groups_and_offsets(peer, admin, fast_group):
    topic = peer.new_topic(4)
    with Producer(bootstrap_servers=peer.bootstrap) as p:
        for i in range(8):
            p.send(topic, b"x", partition=i % 4)
        p.flush()
    group = f"adm-g-{uuid.uuid4().hex[:8]}"
    cfg = dict(fast_group, **{"bootstrap.servers": peer.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    with Consumer(topic, config=cfg) as c:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 8 and time.monotonic() < deadline:
            got += c.poll(0.5)
        c.commit()
        assert group in {g for g, _pt, _st in admin.list_groups()}
        d = admin.describe_groups([group])[group]
        assert d.state.lower() == "stable" and len(d.members) == 1
        if peer.supports("group_assignment"):
            assert set(d.members[0]["assignment"]) == {TopicPartition(topic, p) for p in range(4)}
    offsets = admin.list_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == {p: 2 for p in range(4)}
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): 0})
    assert admin.list_group_offsets(group, [(topic, 0)])[TopicPartition(topic, 0)].offset == 0
    admin.delete_groups([group])
    assert group not in {g for g, _pt, _st in admin.list_groups()}


def test_delete_records(peer, admin):
    peer.require("delete_records")
    topic = peer.new_topic(4)
    with Producer(bootstrap_servers=peer.bootstrap) as p:
        for i in range(10):
            p.send(topic, b"r%d" % i, partition=0)
        p.flush()
    assert admin.delete_records({(topic, 0): 4}) == {TopicPartition(topic, 0): 4}
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, 0)])
        assert c.beginning_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)] == 4
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 6 and time.monotonic() < deadline:
            got += c.poll(0.5)
        assert [r.value for r in got] == [b"r%d" % i for i in range(4, 10)]


def test_describe_cluster_aio(peer):
    async def run():
        async with AIOAdmin(bootstrap_servers=peer.bootstrap) as a:
            d = await a.describe_cluster()
            assert d["brokers"] and all(port > 0 for _id, _h, port, _r in d["brokers"])
            return d

    d = asyncio.run(run())
    assert d["cluster_id"]
