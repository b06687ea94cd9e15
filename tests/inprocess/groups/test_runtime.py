"""The asyncio runtime and the group API handlers in a real broker in this process (no
sockets): requests go through the real handlers as kio entities, records through the
replica manager into real logs, and a broker restarted on the same directory reloads them."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from support.inprocess import InProcessBroker
from support.inprocess_groups import broker, create_topic_t, find_coordinator, loaded

from odradek.coordinator.group.records import OFFSETS_TOPIC, decode_key, partition_for
from odradek.coordinator.runtime import ShardState
from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.records import decode_records, iter_batches


def shard_groups(b: InProcessBroker, group: str) -> dict:
    gc = b.services.group_coordinator
    return gc.runtime.shards[gc.partition_for(group)].groups


def ms(v: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=v)


def protocols(version: int):
    cls = messages.module_of(messages.request_class(11, version)).JoinGroupRequestProtocol
    return (cls(name="range", metadata=b"\x00\x01meta"),)


def run(coro):
    return asyncio.run(coro)


def test_find_coordinator_creates_topic_and_answers_batches(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        assert OFFSETS_TOPIC not in b.services.snapshot.topics
        port = b.broker.bound[0][1]
        r = await b.call(10, 6, key_type=0, coordinator_keys=("g1", "g2"))
        assert [(c.key, c.node_id, c.port, c.error_code) for c in r.coordinators] == [
            ("g1", 7, port, E.none),
            ("g2", 7, port, E.none),
        ]
        offsets = b.services.snapshot.topics[OFFSETS_TOPIC]
        assert len(offsets.partitions) == 5 and offsets.configs["cleanup.policy"] == "compact"
        await loaded(b)
        assert sorted(b.services.group_coordinator.runtime.shards) == [0, 1, 2, 3, 4]
        r = await b.call(10, 3, key="tx", key_type=1)
        assert (r.error_code, r.node_id) == (E.none, 7)
        r = await b.call(10, 0, key="g")
        assert (r.error_code, r.host) == (E.none, "127.0.0.1")
        r = await b.call(10, 4, key_type=2, coordinator_keys=("s",))
        assert r.coordinators[0].error_code == E.invalid_request
        await b.stop()

    run(main())


@pytest.mark.parametrize("join_v,sync_v,commit_v,fetch_v", [(9, 5, 9, 9), (5, 3, 7, 7), (3, 1, 2, 1), (0, 0, 3, 3)])
def test_group_lifecycle_through_handlers_and_reload(tmp_path, join_v, sync_v, commit_v, fetch_v):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b, "grp")
        join = dict(
            group_id="grp",
            session_timeout=ms(10000),
            rebalance_timeout=ms(20000),
            member_id="",
            protocol_type="consumer",
            protocols=protocols(join_v),
        )
        r = await b.call(11, join_v, **join)
        if join_v >= 4:
            assert r.error_code == E.member_id_required
            r = await b.call(11, join_v, **{**join, "member_id": r.member_id})
        assert r.error_code == E.none and r.leader == r.member_id and r.generation_id == 1
        assert r.member_id.startswith("cli-")
        mid, gen = r.member_id, r.generation_id
        sync_mod = messages.module_of(messages.request_class(14, sync_v))
        r = await b.call(
            14,
            sync_v,
            group_id="grp",
            generation_id=gen,
            member_id=mid,
            assignments=(sync_mod.SyncGroupRequestAssignment(member_id=mid, assignment=b"ASSIGN"),),
            protocol_type="consumer",
            protocol_name="range",
        )
        assert r.error_code == E.none and r.assignment == b"ASSIGN"
        r = await b.call(12, 0, group_id="grp", generation_id=gen, member_id=mid)
        assert r.error_code == E.none
        cm = messages.module_of(messages.request_class(8, commit_v))
        r = await b.call(
            8,
            commit_v,
            group_id="grp",
            generation_id_or_member_epoch=gen,
            member_id=mid,
            topics=(
                cm.OffsetCommitRequestTopic(
                    name="t",
                    partitions=(
                        cm.OffsetCommitRequestPartition(partition_index=0, committed_offset=42, committed_metadata="m"),
                    ),
                ),
            ),
        )
        assert r.topics[0].name == "t" and r.topics[0].partitions[0].error_code == E.none
        fm = messages.module_of(messages.request_class(9, fetch_v))
        if fetch_v >= 8:
            r = await b.call(9, fetch_v, groups=(fm.OffsetFetchRequestGroup(group_id="grp", topics=None),))
            parts = r.groups[0].topics[0].partitions
        else:
            r = await b.call(
                9, fetch_v, group_id="grp", topics=(fm.OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1)),)
            )
            parts = r.topics[0].partitions
        assert (parts[0].committed_offset, parts[0].metadata) == (42, "m")
        r = await b.call(15, 5, groups=("grp", "nope"), include_authorized_operations=False)
        assert [(g.group_state, g.protocol_data) for g in r.groups] == [("Stable", "range"), ("Dead", "")]
        assert (
            r.groups[0].members[0].member_assignment == b"ASSIGN" and r.groups[0].members[0].client_host == "/127.0.0.1"
        )
        r = await b.call(16, 5, states_filter=(), types_filter=())
        assert [(g.group_id, g.group_state, g.group_type) for g in r.groups] == [("grp", "Stable", "classic")]

        # every record is in the group's partition, readable with Kafka's schemas
        p = partition_for("grp", 5)
        rm = b.services.replica_manager
        logs = {q: rm.get_partition(OFFSETS_TOPIC, q).log for q in range(5)}
        data = logs[p].read_bytes(0, 1 << 20)
        keys = [decode_key(rec.key) for h in iter_batches(data) for rec in decode_records(data, h.position)]
        assert {type(k).__name__ for k in keys} == {"GroupMetadataKey", "OffsetCommitKey"}
        assert all(lg.log_end_offset == 0 for q, lg in logs.items() if q != p)
        before = shard_groups(b, "grp")["grp"].snapshot()
        await b.stop()

        # a broker restarted over the same logs rebuilds the group and its offsets
        b2 = await broker(tmp_path).start()
        await loaded(b2)
        assert shard_groups(b2, "grp")["grp"].snapshot() == before
        r = await b2.call(12, 0, group_id="grp", generation_id=gen, member_id=mid)
        assert r.error_code == E.none
        await b2.stop()

    run(main())


def test_two_members_wait_for_each_other_and_leave(tmp_path):
    async def main():
        b = await broker(tmp_path, **{"group.initial.rebalance.delay.ms": "50"}).start()
        await find_coordinator(b)
        join = dict(
            group_id="g",
            session_timeout=ms(10000),
            rebalance_timeout=ms(2000),
            protocol_type="consumer",
            protocols=protocols(5),
        )
        ra, rb = await asyncio.gather(
            b.call(11, 3, client_id="a", member_id="", **join), b.call(11, 3, client_id="b", member_id="", **join)
        )
        assert ra.generation_id == rb.generation_id == 1
        leader, follower = (ra, rb) if ra.member_id == ra.leader else (rb, ra)
        assert len(leader.members) == 2 and follower.members == ()
        sm = messages.module_of(messages.request_class(14, 3))
        fut = asyncio.ensure_future(
            b.call(14, 3, group_id="g", generation_id=1, member_id=follower.member_id, assignments=())
        )
        await asyncio.sleep(0.01)
        assert not fut.done()
        asg = tuple(
            sm.SyncGroupRequestAssignment(member_id=m.member_id, assignment=m.member_id.encode())
            for m in leader.members
        )
        rl = await b.call(14, 3, group_id="g", generation_id=1, member_id=leader.member_id, assignments=asg)
        rf = await fut
        assert (rl.assignment, rf.assignment) == (leader.member_id.encode(), follower.member_id.encode())
        lm = messages.module_of(messages.request_class(13, 5))
        r = await b.call(
            13, 5, group_id="g", members=(lm.MemberIdentity(member_id=follower.member_id, group_instance_id=None),)
        )
        assert r.error_code == E.none and r.members[0].error_code == E.none
        r = await b.call(12, 3, group_id="g", generation_id=1, member_id=leader.member_id)
        assert r.error_code == E.rebalance_in_progress
        r = await b.call(13, 1, group_id="g", member_id="ghost")
        assert r.error_code == E.unknown_member_id
        await b.stop()

    run(main())


def test_session_timeout_with_real_timers(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await find_coordinator(b)
        join = dict(
            group_id="g",
            session_timeout=ms(100),
            rebalance_timeout=ms(100),
            protocol_type="consumer",
            protocols=protocols(3),
            member_id="",
        )
        r = await b.call(11, 3, **join)
        await b.call(14, 1, group_id="g", generation_id=1, member_id=r.member_id, assignments=())
        assert shard_groups(b, "g")["g"].state.value == "Stable"
        await asyncio.sleep(0.3)
        assert shard_groups(b, "g")["g"].state.value == "Empty"
        await b.stop()

    run(main())


def test_failed_append_maps_to_coordinator_not_available(tmp_path):
    """An append the ISR cannot take (min.insync.replicas above the ISR: NOT_ENOUGH_REPLICAS)
    is answered COORDINATOR_NOT_AVAILABLE, as Kafka maps it."""

    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b, "s")
        configs = dict(b.services.snapshot.topics[OFFSETS_TOPIC].configs)
        await b.services.topics.set_topic_configs(OFFSETS_TOPIC, {**configs, "min.insync.replicas": "2"})
        cm = messages.module_of(messages.request_class(8, 8))
        r = await b.call(
            8,
            8,
            group_id="s",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=(
                cm.OffsetCommitRequestTopic(
                    name="t",
                    partitions=(
                        cm.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata=None),
                    ),
                ),
            ),
        )
        assert r.topics[0].partitions[0].error_code == E.coordinator_not_available
        await b.stop()

    run(main())


def test_load_in_progress(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b)
        ctx = b.services.group_coordinator.runtime.context(partition_for("g", 5))
        assert ctx is not None
        ctx.state = ShardState.LOADING
        r = await b.call(12, 4, group_id="g", generation_id=1, member_id="m")
        assert r.error_code == E.coordinator_load_in_progress
        fm = messages.module_of(messages.request_class(9, 1))
        r = await b.call(9, 1, group_id="g", topics=(fm.OffsetFetchRequestTopic(name="t", partition_indexes=(0,)),))
        assert r.topics[0].partitions[0].error_code == E.coordinator_load_in_progress
        ctx.state = ShardState.ACTIVE
        await b.stop()

    run(main())


def test_delete_groups_and_offset_delete_handlers(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b, "s")
        cm = messages.module_of(messages.request_class(8, 9))
        await b.call(
            8,
            9,
            group_id="s",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=(
                cm.OffsetCommitRequestTopic(
                    name="t",
                    partitions=(
                        cm.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata=""),
                        cm.OffsetCommitRequestPartition(partition_index=1, committed_offset=2, committed_metadata=""),
                    ),
                ),
            ),
        )
        dm = messages.module_of(messages.request_class(47, 0))
        r = await b.call(
            47,
            0,
            group_id="s",
            topics=(
                dm.OffsetDeleteRequestTopic(name="t", partitions=(dm.OffsetDeleteRequestPartition(partition_index=0),)),
            ),
        )
        assert r.error_code == E.none and r.topics[0].partitions[0].error_code == E.none
        r = await b.call(42, 2, groups_names=("s", "missing"))
        assert [(x.group_id, x.error_code) for x in r.results] == [("s", E.none), ("missing", E.group_id_not_found)]
        await b.stop()
        b2 = await broker(tmp_path).start()
        await loaded(b2)
        assert "s" not in shard_groups(b2, "s")
        await b2.stop()

    run(main())
