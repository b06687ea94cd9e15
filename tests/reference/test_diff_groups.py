"""Differential: consumer groups and committed offsets, odradek against Apache Kafka 4.x.

Protocol level (raw JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit / OffsetFetch):
the error codes for bad input and the generation a group reaches. Client level (the Java client
and librdkafka, each member its own process: tests/support/group_member.py): the sequence
of assignments and revocations each member sees, eager and cooperative, and a static member's
restart.

Member ids are drawn by each broker and compared only as "set or not" (diff.MASKED_FIELDS).
"""

from __future__ import annotations

import struct
import time

import pytest
from support.diff import unique
from support.group_member import Member, split_ok, wait_until
from support.proto import (
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
    V_COMMIT,
    V_HEARTBEAT,
    V_JOIN,
    V_LEAVE,
    V_OFFSET_FETCH,
    V_SYNC,
    batch,
    create_topic,
    produce_ok,
)
from support.raw import nested

pytestmark = pytest.mark.reference

IGNORE = ("*.leader", "*.members[*].metadata")  # the leader's member id; subscriptions echo what was sent


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: topics and no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def join(c, group, member_id="", *, instance=None, session_ms=10000, protocol_type="consumer", topic="t"):
    p = nested(JOIN_GROUP, V_JOIN, "JoinGroupRequestProtocol", name="range", metadata=subscription(topic))
    return c.call(
        JOIN_GROUP,
        V_JOIN,
        group_id=group,
        session_timeout=session_ms,
        rebalance_timeout=10000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=(p,),
        reason=None,
    )


def join_fully(c, group, **kw):
    """JoinGroup v4+: the first join is answered MEMBER_ID_REQUIRED with an id; join again with it."""
    first = join(c, group, **kw)
    if int(first.error_code) != 79:
        return first, first
    return first, join(c, group, first.member_id, **kw)


def sync(c, group, generation, member_id, *, instance=None, assignments=()):
    asg = tuple(
        nested(SYNC_GROUP, V_SYNC, "SyncGroupRequestAssignment", member_id=m, assignment=a) for m, a in assignments
    )
    return c.call(
        SYNC_GROUP,
        V_SYNC,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocol_name="range",
        assignments=asg,
    )


def heartbeat(c, group, generation, member_id, instance=None):
    return c.call(
        HEARTBEAT,
        V_HEARTBEAT,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
    )


def leave(c, group, *members):
    ms = tuple(
        nested(LEAVE_GROUP, V_LEAVE, "MemberIdentity", member_id=m, group_instance_id=i, reason=None)
        for m, i in members
    )
    return c.call(LEAVE_GROUP, V_LEAVE, group_id=group, members=ms)


def commit(c, group, offsets, *, generation=-1, member_id="", instance=None, metadata=""):
    """OffsetCommit of {topic: [(partition, offset)]}."""
    topics = tuple(
        nested(
            OFFSET_COMMIT,
            V_COMMIT,
            "OffsetCommitRequestTopic",
            name=t,
            partitions=tuple(
                nested(
                    OFFSET_COMMIT,
                    V_COMMIT,
                    "OffsetCommitRequestPartition",
                    partition_index=p,
                    committed_offset=o,
                    committed_leader_epoch=-1,
                    committed_metadata=metadata,
                )
                for p, o in ps
            ),
        )
        for t, ps in offsets.items()
    )
    return c.call(
        OFFSET_COMMIT,
        V_COMMIT,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance,
        topics=topics,
    )


def fetch_offsets(c, group, topics):
    """OffsetFetch v8 of one group: {topic: [partitions]}, or None for all."""
    ts = (
        None
        if topics is None
        else tuple(
            nested(OFFSET_FETCH, V_OFFSET_FETCH, "OffsetFetchRequestTopics", name=t, partition_indexes=tuple(ps))
            for t, ps in topics.items()
        )
    )
    g = nested(OFFSET_FETCH, V_OFFSET_FETCH, "OffsetFetchRequestGroup", group_id=group, topics=ts)
    return c.call(OFFSET_FETCH, V_OFFSET_FETCH, groups=(g,), require_stable=False).groups[0]


def coordinator_ready(c, group, timeout: float = 30) -> None:
    """FindCoordinator (which creates __consumer_offsets on first use), then OffsetFetch until the
    group's coordinator answers without NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
    deadline = time.monotonic() + timeout
    while True:
        r = c.call(FIND_COORDINATOR, 4, key_type=0, coordinator_keys=(group,))
        if int(r.coordinators[0].error_code) == 0:
            g = fetch_offsets(c, group, None)
            if int(g.error_code) == 0:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"no coordinator for {group} after {timeout}s: {r}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- protocol level


def test_join_sync_heartbeat_errors_and_generations(pair):
    group, topic, other = unique("g"), unique("gt"), unique("nogroup")

    def scenario(t):
        out = {}
        with t.raw() as c, t.raw() as c2:
            coordinator_ready(c, group)
            out["empty_group_id"] = join(c, "")
            out["bad_session"] = join(c, group, session_ms=10)
            out["unknown_member_join"] = join(c, group, "no-such-member")
            first, a = join_fully(c, group, topic=topic)
            out["first"], out["a"] = first, a
            gen, ma = a.generation_id, a.member_id
            out["other_protocol_type"] = join(c2, group, protocol_type="connect")
            out["sync_bad_generation"] = sync(c, group, gen + 5, ma)
            out["sync_unknown_member"] = sync(c, group, gen, "no-such-member")
            out["sync"] = sync(c, group, gen, ma, assignments=[(ma, b"\x00\x00")])
            out["hb"] = heartbeat(c, group, gen, ma)
            out["hb_bad_generation"] = heartbeat(c, group, gen + 1, ma)
            out["hb_unknown_member"] = heartbeat(c, group, gen, "no-such-member")
            out["hb_unknown_group"] = heartbeat(c, other, 1, "m")
            # a second member: the group rebalances, the first learns of it by heartbeat
            b_first = join(c2, group, topic=topic)
            out["b_first"] = b_first
            out["hb_during_rebalance"] = heartbeat(c, group, gen, ma)
            out["leave_unknown"] = leave(c, group, ("no-such-member", None))
            out["leave"] = leave(c, group, (ma, None))
            out["hb_after_leave"] = heartbeat(c, group, gen, ma)
        return out

    got = pair.same(scenario, ignore=IGNORE)
    assert got["a"]["generation_id"] == 1


def test_static_member_fencing(pair):
    group, topic = unique("gs"), unique("gst")

    def scenario(t):
        out = {}
        with t.raw() as c:
            coordinator_ready(c, group)
            create_topic(c, topic, 1)
            a = join(c, group, instance="inst-1", topic=topic)
            out["a"] = a
            out["sync"] = sync(
                c, group, a.generation_id, a.member_id, instance="inst-1", assignments=[(a.member_id, b"")]
            )
            # the same instance rejoins with no member id (a restart): a new member id, the old one fenced
            b = join(c, group, instance="inst-1", topic=topic)
            out["rejoin"] = b
            out["old_hb"] = heartbeat(c, group, a.generation_id, a.member_id, "inst-1")
            out["new_hb"] = heartbeat(c, group, b.generation_id, b.member_id, "inst-1")
            out["old_commit"] = commit(
                c, group, {topic: [(0, 1)]}, generation=a.generation_id, member_id=a.member_id, instance="inst-1"
            )
            out["leave_wrong_id"] = leave(c, group, (a.member_id, "inst-1"))
            out["leave"] = leave(c, group, (b.member_id, "inst-1"))
        return out

    got = pair.same(scenario, ignore=IGNORE)
    assert got["rejoin"]["error_code"] == 0


# --------------------------------------------------------------------------- offsets


def test_offset_commit_and_fetch_edge_cases(pair):
    group, topic, nope, other = unique("go"), unique("got"), unique("nope"), unique("nogroup")

    def scenario(t):
        out = {}
        with t.raw() as c:
            coordinator_ready(c, group)
            create_topic(c, topic, 2)
            out["simple"] = commit(c, group, {topic: [(0, 5), (1, 7)]})
            out["unknown_topic"] = commit(c, group, {nope: [(0, 1)]})
            out["unknown_partition"] = commit(c, group, {topic: [(0, 6), (9, 1)]})
            out["metadata_too_large"] = commit(c, group, {topic: [(0, 1)]}, metadata="x" * 5000)
            out["negative_offset"] = commit(c, group, {topic: [(1, -3)]})
            out["unknown_member"] = commit(c, group, {topic: [(0, 1)]}, generation=3, member_id="m")
            out["fetch"] = fetch_offsets(c, group, {topic: [0, 1, 5], nope: [0]})
            out["fetch_all"] = fetch_offsets(c, group, None)
            out["fetch_unknown_group"] = fetch_offsets(c, other, {topic: [0]})
        return out

    got = pair.same(scenario)
    assert got["unknown_topic"]["topics"][0]["partitions"][0]["error_code"] == 3


def test_offsets_of_a_member_during_and_after_rebalance(pair):
    group, topic = unique("gr"), unique("grt")

    def scenario(t):
        out = {}
        with t.raw() as c, t.raw() as c2:
            coordinator_ready(c, group)
            create_topic(c, topic, 1)
            produce_ok(c, topic, [batch((b"k", b"v"))])
            _, a = join_fully(c, group, topic=topic)
            out["commit_before_sync"] = commit(
                c, group, {topic: [(0, 1)]}, generation=a.generation_id, member_id=a.member_id
            )
            sync(c, group, a.generation_id, a.member_id, assignments=[(a.member_id, b"")])
            out["commit"] = commit(c, group, {topic: [(0, 1)]}, generation=a.generation_id, member_id=a.member_id)
            out["commit_old_generation"] = commit(
                c, group, {topic: [(0, 1)]}, generation=a.generation_id - 1, member_id=a.member_id
            )
            out["simple_on_active_group"] = commit(c, group, {topic: [(0, 1)]})
            join(c2, group, topic=topic)  # a new member: the group is rebalancing
            out["commit_during_rebalance"] = commit(
                c, group, {topic: [(0, 1)]}, generation=a.generation_id, member_id=a.member_id
            )
        return out

    pair.same(scenario)


# --------------------------------------------------------------------------- client level


def _skip_unless(kind: str) -> None:
    from support.clients import JAVA_DIR, unavailable_reason

    reason = unavailable_reason(kind)
    if reason:
        pytest.skip(f"{kind}: {reason}")
    if kind == "java" and not (JAVA_DIR / "classes" / "GroupCli.class").is_file():
        pytest.skip("GroupCli not built: run scripts/install-test-deps.sh")


def _history(m: Member, since_start: bool = True) -> list[tuple]:
    """(event, partitions, all owned, generation) of each rebalance callback. An empty assignment
    of a member that owns nothing is left out: with cooperative-sticky a joining member's first
    generation gives it nothing, and whether it completes that generation (its SyncGroup answered)
    before the leader's rejoin starts the next one is a race, on Kafka as on odradek (seen once
    each way under load)."""
    events = [(ev["ev"], tuple(ev["partitions"]), tuple(ev["all"]), ev.get("gen", -1)) for ev in m.rebalance_events()]
    return [e for e in events if not (e[0] == "assigned" and not e[1] and not e[2])]


def _group_run(kind: str, assignor: str, tmp_path, partitions: int = 4):
    """A scenario: member A alone, then B joins, then B leaves; each member's rebalance history."""
    group, topic = unique("gc"), unique("gct")

    def scenario(t):
        with t.raw() as c:
            create_topic(c, topic, partitions)

        def member(name):
            return Member(kind, t.bootstrap, topic, group, name, assignor=assignor, log_dir=tmp_path / t.name)

        (tmp_path / t.name).mkdir(exist_ok=True)
        a = member("a")
        ms = [a]
        try:
            wait_until(lambda: len(a.assignment) == partitions, 60, lambda: f"{t.name}: {a} owns all", ms)
            b = member("b")
            ms.append(b)
            wait_until(lambda: split_ok([a, b], partitions), 60, lambda: f"{t.name}: split {ms}", ms)
            time.sleep(1.5)  # cooperative: the second round settles
            b.stop()
            wait_until(lambda: len(a.assignment) == partitions, 60, lambda: f"{t.name}: {a} owns all again", ms)
            time.sleep(0.5)
            a.stop()
            return {"a": _history(a), "b": _history(b)}
        finally:
            for m in ms:
                if m.proc.poll() is None:
                    m.kill()

    return scenario


@pytest.mark.parametrize("kind", ["java", "confluent"])
@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_group_rebalance_history_with_real_clients(pair, kind, assignor, tmp_path):
    _skip_unless(kind)
    got = pair.same(_group_run(kind, assignor, tmp_path))
    assert got["a"] and got["b"]
    if kind == "java":  # the Java member reports each assignment's generation
        assert [e[3] for e in got["a"] if e[0] == "assigned"][0] == 1


def test_static_member_restart_with_the_java_client(pair, tmp_path):
    """Two static members; one is killed and restarted within its session: no rebalance, it gets
    its partitions back in the same generation, and the other sees nothing."""
    _skip_unless("java")
    group, topic, partitions = unique("gsc"), unique("gsct"), 4

    def scenario(t):
        with t.raw() as c:
            create_topic(c, topic, partitions)
        d = tmp_path / t.name
        d.mkdir(exist_ok=True)

        def member(inst):
            return Member(
                "java", t.bootstrap, topic, group, inst, instance_id=inst, session_timeout_ms=15000, log_dir=d
            )

        a = member("inst-a")
        ms = [a]
        try:
            wait_until(lambda: len(a.assignment) == partitions and a.gen > 0, 60, f"{t.name}: a owns all", ms)
            b = member("inst-b")
            ms.append(b)
            wait_until(lambda: split_ok([a, b], partitions) and a.gen == b.gen, 60, f"{t.name}: split", ms)
            time.sleep(2)
            a.kill()
            a2 = member("inst-a")
            ms.append(a2)
            wait_until(lambda: a2.assignment and a2.gen > 0, 30, f"{t.name}: a back", ms)
            time.sleep(2)
            for m in (b, a2):
                m.stop()
            return {"a": _history(a), "b": _history(b), "a2": _history(a2)}
        finally:
            for m in ms:
                if m.proc.poll() is None:
                    m.kill()

    got = pair.same(scenario)
    assert got["a2"][0][1] == got["a"][-1][2]  # the restarted member got back what it had
