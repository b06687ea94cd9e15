"""The asyncio runtime and the group API handlers, over a fake broker (no sockets):
requests go through the real handlers as kio entities, records through the real batch
codec into an in-memory log, and a second coordinator reloads them."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.registry import RequestContext, load_handlers
from odradek.coordinator.group import GroupCoordinator
from odradek.coordinator.group.records import OFFSETS_TOPIC, decode_key, partition_for
from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.errors import NotEnoughReplicasError
from odradek.protocol.records import decode_records, iter_batches, patch_batch


class FakeLog:
    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.log_start_offset = 0
        self.log_end_offset = 0

    def append(self, batch: bytes) -> int:
        buf = bytearray(batch)
        base = self.log_end_offset
        patch_batch(buf, base_offset=base)
        h = next(iter_batches(bytes(buf)))
        self.batches.append(bytes(buf))
        self.log_end_offset = base + h.last_offset_delta + 1
        return base

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        out = b""
        for b in self.batches:
            h = next(iter_batches(b))
            if h.next_offset > offset:
                out += b
        return out


class FakeBroker:
    def __init__(self, logs: dict[int, FakeLog] | None = None, **overrides: str) -> None:
        raw = {
            "offsets.topic.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "10",
        }
        raw.update(overrides)
        self.config = BrokerConfig(raw)
        self.node_id = 7
        self.cluster_id = "c"
        self.logs = logs if logs is not None else {}
        self.topic_created = 0
        self.fail_appends = False
        self.log_manager = self
        self.replica_manager = self
        self.group_coordinator: GroupCoordinator | None = None

    def advertised_endpoint(self) -> tuple[str, int]:
        return ("127.0.0.1", 9092)

    def get_log(self, topic: str, partition: int):
        return self.logs.get(partition) if topic == OFFSETS_TOPIC else None

    async def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        assert name == OFFSETS_TOPIC and configs["cleanup.policy"] == "compact"
        if not self.logs:
            self.topic_created += 1
            for p in range(partitions):
                self.logs[p] = FakeLog()

    async def append_internal(self, topic: str, partition: int, batch: bytes) -> int:
        await asyncio.sleep(0)
        if self.fail_appends:
            raise NotEnoughReplicasError()
        return self.logs[partition].append(batch)


async def call(broker: FakeBroker, api_key: int, version: int, client_id: str = "cli", **fields):
    handlers = load_handlers()
    req = messages.request_class(api_key, version)
    from odradek.broker.registry import make

    ctx = RequestContext(broker, api_key, version, 1, client_id, "127.0.0.1:5555", 1)
    resp = await handlers[api_key].fn(ctx, make(req, **fields))
    messages.encode(resp)  # every response must encode
    return resp


def ms(v: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=v)


def protocols(version: int):
    cls = messages.module_of(messages.request_class(11, version)).JoinGroupRequestProtocol
    return (cls(name="range", metadata=b"\x00\x01meta"),)


async def started(broker: FakeBroker) -> GroupCoordinator:
    gc = GroupCoordinator(broker)
    broker.group_coordinator = gc
    await gc.start()
    if gc._load_task is not None:
        await gc._load_task
    return gc


def run(coro):
    return asyncio.run(coro)


def test_find_coordinator_creates_topic_and_answers_batches():
    async def main():
        b = FakeBroker()
        await started(b)
        r = await call(b, 10, 6, key_type=0, coordinator_keys=("g1", "g2"))
        assert [(c.key, c.node_id, c.port, c.error_code) for c in r.coordinators] == [
            ("g1", 7, 9092, E.none),
            ("g2", 7, 9092, E.none),
        ]
        assert b.topic_created == 1 and len(b.logs) == 5
        r = await call(b, 10, 3, key="tx", key_type=1)
        assert (r.error_code, r.node_id) == (E.none, 7)
        r = await call(b, 10, 0, key="g")
        assert (r.error_code, r.host) == (E.none, "127.0.0.1")
        r = await call(b, 10, 4, key_type=2, coordinator_keys=("s",))
        assert r.coordinators[0].error_code == E.invalid_request

    run(main())


@pytest.mark.parametrize("join_v,sync_v,commit_v,fetch_v", [(9, 5, 9, 9), (5, 3, 7, 7), (3, 1, 2, 1), (0, 0, 3, 3)])
def test_group_lifecycle_through_handlers_and_reload(join_v, sync_v, commit_v, fetch_v):
    async def main():
        b = FakeBroker()
        await started(b)
        join = dict(
            group_id="grp",
            session_timeout=ms(10000),
            rebalance_timeout=ms(20000),
            member_id="",
            protocol_type="consumer",
            protocols=protocols(join_v),
        )
        r = await call(b, 11, join_v, **join)
        if join_v >= 4:
            assert r.error_code == E.member_id_required
            r = await call(b, 11, join_v, **{**join, "member_id": r.member_id})
        assert r.error_code == E.none and r.leader == r.member_id and r.generation_id == 1
        assert r.member_id.startswith("cli-")
        mid, gen = r.member_id, r.generation_id
        sync_mod = messages.module_of(messages.request_class(14, sync_v))
        r = await call(
            b,
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
        r = await call(b, 12, 0, group_id="grp", generation_id=gen, member_id=mid)
        assert r.error_code == E.none
        cm = messages.module_of(messages.request_class(8, commit_v))
        r = await call(
            b,
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
            r = await call(b, 9, fetch_v, groups=(fm.OffsetFetchRequestGroup(group_id="grp", topics=None),))
            parts = r.groups[0].topics[0].partitions
        else:
            r = await call(
                b, 9, fetch_v, group_id="grp", topics=(fm.OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1)),)
            )
            parts = r.topics[0].partitions
        assert (parts[0].committed_offset, parts[0].metadata) == (42, "m")
        r = await call(b, 15, 5, groups=("grp", "nope"), include_authorized_operations=False)
        assert [(g.group_state, g.protocol_data) for g in r.groups] == [("Stable", "range"), ("Dead", "")]
        assert (
            r.groups[0].members[0].member_assignment == b"ASSIGN" and r.groups[0].members[0].client_host == "/127.0.0.1"
        )
        r = await call(b, 16, 5, states_filter=(), types_filter=())
        assert [(g.group_id, g.group_state, g.group_type) for g in r.groups] == [("grp", "Stable", "classic")]

        # every record is in the group's partition, readable with Kafka's schemas
        p = partition_for("grp", 5)
        keys = [decode_key(rec.key) for bt in b.logs[p].batches for rec in decode_records(bt)]
        assert {type(k).__name__ for k in keys} == {"GroupMetadataKey", "OffsetCommitKey"}
        assert all(not lg.batches for q, lg in b.logs.items() if q != p)

        # a new coordinator over the same log rebuilds the group and its offsets
        b2 = FakeBroker(logs=b.logs)
        gc2 = await started(b2)
        assert gc2.state.groups["grp"].snapshot() == b.group_coordinator.state.groups["grp"].snapshot()
        r = await call(b2, 12, 0, group_id="grp", generation_id=gen, member_id=mid)
        assert r.error_code == E.none
        await b.group_coordinator.stop()
        await gc2.stop()

    run(main())


def test_two_members_wait_for_each_other_and_leave():
    async def main():
        b = FakeBroker(**{"group.initial.rebalance.delay.ms": "50"})
        await started(b)
        join = dict(
            group_id="g",
            session_timeout=ms(10000),
            rebalance_timeout=ms(2000),
            protocol_type="consumer",
            protocols=protocols(5),
        )
        ra, rb = await asyncio.gather(
            call(b, 11, 3, client_id="a", member_id="", **join), call(b, 11, 3, client_id="b", member_id="", **join)
        )
        assert ra.generation_id == rb.generation_id == 1
        leader, follower = (ra, rb) if ra.member_id == ra.leader else (rb, ra)
        assert len(leader.members) == 2 and follower.members == ()
        sm = messages.module_of(messages.request_class(14, 3))
        fut = asyncio.ensure_future(
            call(b, 14, 3, group_id="g", generation_id=1, member_id=follower.member_id, assignments=())
        )
        await asyncio.sleep(0.01)
        assert not fut.done()
        asg = tuple(
            sm.SyncGroupRequestAssignment(member_id=m.member_id, assignment=m.member_id.encode())
            for m in leader.members
        )
        rl = await call(b, 14, 3, group_id="g", generation_id=1, member_id=leader.member_id, assignments=asg)
        rf = await fut
        assert (rl.assignment, rf.assignment) == (leader.member_id.encode(), follower.member_id.encode())
        lm = messages.module_of(messages.request_class(13, 5))
        r = await call(
            b, 13, 5, group_id="g", members=(lm.MemberIdentity(member_id=follower.member_id, group_instance_id=None),)
        )
        assert r.error_code == E.none and r.members[0].error_code == E.none
        r = await call(b, 12, 3, group_id="g", generation_id=1, member_id=leader.member_id)
        assert r.error_code == E.rebalance_in_progress
        r = await call(b, 13, 1, group_id="g", member_id="ghost")
        assert r.error_code == E.unknown_member_id
        await b.group_coordinator.stop()

    run(main())


def test_session_timeout_with_real_timers():
    async def main():
        b = FakeBroker(**{"group.min.session.timeout.ms": "10"})
        gc = await started(b)
        join = dict(
            group_id="g",
            session_timeout=ms(100),
            rebalance_timeout=ms(100),
            protocol_type="consumer",
            protocols=protocols(3),
            member_id="",
        )
        r = await call(b, 11, 3, **join)
        await call(b, 14, 1, group_id="g", generation_id=1, member_id=r.member_id, assignments=())
        assert gc.state.groups["g"].state.value == "Stable"
        await asyncio.sleep(0.3)
        assert gc.state.groups["g"].state.value == "Empty"
        await gc.stop()

    run(main())


def test_failed_append_maps_to_coordinator_not_available():
    async def main():
        b = FakeBroker()
        await started(b)
        await b.group_coordinator.ensure_topic()
        b.fail_appends = True
        cm = messages.module_of(messages.request_class(8, 8))
        r = await call(
            b,
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
        await b.group_coordinator.stop()

    run(main())


def test_load_in_progress():
    async def main():
        b = FakeBroker()
        await started(b)
        gc = b.group_coordinator
        gc.loading.add(partition_for("g", 5))
        r = await call(b, 12, 4, group_id="g", generation_id=1, member_id="m")
        assert r.error_code == E.coordinator_load_in_progress
        fm = messages.module_of(messages.request_class(9, 1))
        r = await call(b, 9, 1, group_id="g", topics=(fm.OffsetFetchRequestTopic(name="t", partition_indexes=(0,)),))
        assert r.topics[0].partitions[0].error_code == E.coordinator_load_in_progress
        await gc.stop()

    run(main())


def test_delete_groups_and_offset_delete_handlers():
    async def main():
        b = FakeBroker()
        await started(b)
        cm = messages.module_of(messages.request_class(8, 9))
        await call(
            b,
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
        r = await call(
            b,
            47,
            0,
            group_id="s",
            topics=(
                dm.OffsetDeleteRequestTopic(name="t", partitions=(dm.OffsetDeleteRequestPartition(partition_index=0),)),
            ),
        )
        assert r.error_code == E.none and r.topics[0].partitions[0].error_code == E.none
        r = await call(b, 42, 2, groups_names=("s", "missing"))
        assert [(x.group_id, x.error_code) for x in r.results] == [("s", E.none), ("missing", E.group_id_not_found)]
        b2 = FakeBroker(logs=b.logs)
        gc2 = await started(b2)
        assert "s" not in gc2.state.groups
        await gc2.stop()
        await b.group_coordinator.stop()

    run(main())
