"""The classic rebalance protocol, transition by transition, without sockets or real time."""

from __future__ import annotations

from support.group_harness import Harness

from odradek.coordinator.group.classic_group import GroupState
from odradek.protocol.errors import ErrorCode as E

S = GroupState


def stable_group(h: Harness, n: int = 2, group: str = "g") -> tuple[list[str], int]:
    """n members joined and synced; returns (member ids, generation)."""
    ids = []
    for i in range(n):
        pre = h.join(("pre", group, i), group, client=f"c{i}")
        assert pre.error == E.member_id_required
        ids.append(pre.member_id)
    for i, mid in enumerate(ids):
        h.join(("join", group, i), group, mid, client=f"c{i}")
    results = [h.reply(("join", group, i)) for i in range(n)]
    assert all(r is not None and r.error == 0 for r in results), results
    gen = results[0].generation
    leader = results[0].leader
    assignment = {mid: f"A-{mid}".encode() for mid in ids}
    for i, mid in enumerate(ids):
        if mid != leader:
            h.sync(("sync", group, i), group, gen, mid)
    h.sync(("sync", group, "leader"), group, gen, leader, assignment)
    assert h.shard.groups[group].state is S.STABLE
    return ids, gen


# ----------------------------------------------------------------------------- join


def test_kip394_member_id_required_then_join():
    h = Harness()
    r = h.join("t1")
    assert r.error == E.member_id_required and r.member_id == "c-1" and r.generation == -1
    assert h.shard.groups["g"].state is S.EMPTY  # a pending member does not start a rebalance
    r = h.join("t2", member_id="c-1")
    assert r.error == 0
    assert (r.generation, r.leader, r.member_id, r.protocol_name, r.protocol_type) == (
        1,
        "c-1",
        "c-1",
        "range",
        "consumer",
    )
    assert r.members == [("c-1", None, b"range-meta")]
    assert h.shard.groups["g"].state is S.COMPLETING_REBALANCE


def test_v3_join_without_member_id_joins_directly():
    h = Harness()
    r = h.join("t", v4=False)
    assert r.error == 0 and r.member_id == "c-1" and r.generation == 1


def test_unknown_member_id_on_missing_group_and_unknown_member():
    h = Harness()
    assert h.join("t", member_id="nope").error == E.unknown_member_id
    assert "g" not in h.shard.groups
    stable_group(h, 1)
    assert h.join("t2", member_id="nope").error == E.unknown_member_id


def test_invalid_session_timeout_and_group_id():
    h = Harness(min_session_timeout_ms=6000, max_session_timeout_ms=30000)
    assert h.join("a", session=5999).error == E.invalid_session_timeout
    assert h.join("b", session=30001).error == E.invalid_session_timeout
    assert h.join("c", group="").error == E.invalid_group_id
    assert not h.shard.groups


def test_inconsistent_protocols():
    h = Harness()
    stable_group(h, 1)
    assert h.join("x", protocols=[("roundrobin", b"")]).error == E.inconsistent_group_protocol
    assert h.join("y", protocol_type="connect").error == E.inconsistent_group_protocol
    assert h.join("z", protocols=[]).error == E.inconsistent_group_protocol


def test_protocol_selection_by_votes_among_common():
    h = Harness(initial_rebalance_delay_ms=100)
    protos = [
        [("range", b"1"), ("roundrobin", b"1"), ("sticky", b"1")],
        [("roundrobin", b"2"), ("range", b"2")],
        [("roundrobin", b"3"), ("range", b"3"), ("sticky", b"3")],
    ]
    for i, p in enumerate(protos):
        h.join(i, client=f"m{i}", protocols=p, v4=False)
    h.advance(200)
    results = [h.reply(i) for i in range(3)]
    assert {r.protocol_name for r in results} == {"roundrobin"}
    leader = [r for r in results if r.member_id == r.leader][0]
    assert sorted(leader.members) == sorted([("m0-1", None, b"1"), ("m1-2", None, b"2"), ("m2-3", None, b"3")])
    assert all(r.members == [] for r in results if r is not leader)


def test_group_max_size():
    h = Harness(max_size=2)
    stable_group(h, 2)
    assert h.join("third", client="x", v4=False).error == E.group_max_size_reached
    assert len(h.shard.groups["g"].members) == 2


# ----------------------------------------------------------------------------- initial delay


def test_initial_rebalance_delay_collects_members_and_extends():
    h = Harness(initial_rebalance_delay_ms=3000)
    h.join("a", client="a", v4=False, rebalance=10000)
    assert h.reply("a") is None and h.shard.groups["g"].state is S.PREPARING_REBALANCE
    h.advance(2000)
    h.join("b", client="b", v4=False, rebalance=10000)
    h.advance(1000)  # first delay ends, but a member arrived: wait another round
    assert h.reply("a") is None
    h.advance(2999)
    assert h.reply("a") is None
    h.advance(1)
    ra, rb = h.reply("a"), h.reply("b")
    assert ra.error == rb.error == 0 and ra.generation == rb.generation == 1
    assert ra.leader == "a-1" and len(ra.members) == 2 and rb.members == []


def test_initial_delay_bounded_by_rebalance_timeout():
    h = Harness(initial_rebalance_delay_ms=3000)
    h.join("a", client="a", v4=False, rebalance=4000)
    for i in range(5):
        h.advance(1000)
        h.join(("n", i), client=f"n{i}", v4=False, rebalance=4000)
    # 3000 (first delay) + min(3000, remaining 1000) = 4000 at most
    assert h.reply("a") is not None and h.reply("a").generation == 1


# ----------------------------------------------------------------------------- sync


def test_followers_wait_for_leader_assignment_verbatim():
    h = Harness(initial_rebalance_delay_ms=10)
    h.join("a", client="a", v4=False)
    h.join("b", client="b", v4=False)
    h.advance(20)  # b arrived during the delay: one more round
    ra, rb = h.reply("a"), h.reply("b")
    leader, follower = (ra, rb) if ra.member_id == ra.leader else (rb, ra)
    assert h.sync("sf", "g", 1, follower.member_id) is None  # waits
    assert h.shard.groups["g"].state is S.COMPLETING_REBALANCE
    blobs = {leader.member_id: b"\x00\x01leader", follower.member_id: b"\x00\x01follower"}
    r = h.sync("sl", "g", 1, leader.member_id, blobs)
    assert r.error == 0 and r.assignment == blobs[leader.member_id]
    assert h.reply("sf").assignment == blobs[follower.member_id] and h.reply("sf").protocol_name == "range"
    assert h.shard.groups["g"].state is S.STABLE
    # a stable group answers at once
    assert h.sync("again", "g", 1, follower.member_id).assignment == blobs[follower.member_id]
    h.assert_replay_matches()


def test_sync_errors():
    h = Harness()
    ids, gen = stable_group(h, 2)
    assert h.sync("a", "g", gen + 1, ids[0]).error == E.illegal_generation
    assert h.sync("b", "g", gen, "nobody").error == E.unknown_member_id
    assert h.sync("c", "missing", gen, ids[0]).error == E.unknown_member_id
    assert h.sync("d", "g", gen, ids[0], protocol_name="roundrobin").error == E.inconsistent_group_protocol
    assert h.sync("e", "g", gen, ids[0], protocol_type="connect").error == E.inconsistent_group_protocol
    assert h.sync("f", "g", gen, ids[0], protocol_type="consumer", protocol_name="range").error == 0
    # a new member makes the group prepare a rebalance: sync says REBALANCE_IN_PROGRESS
    h.join("new", client="n", v4=False)
    assert h.sync("g", "g", gen, ids[0]).error == E.rebalance_in_progress


def test_leader_missing_assignments_are_empty():
    h = Harness()
    ids, gen = stable_group(h, 1)
    h.join("b", client="b", v4=False)  # rebalance
    h.join("a2", member_id=ids[0])
    ra = h.reply("a2")
    assert ra.generation == gen + 1
    rb = h.reply("b")
    h.sync("sb", "g", ra.generation, rb.member_id)
    h.sync("sa", "g", ra.generation, ids[0], {ids[0]: b"x", "stranger": b"y"})
    assert h.reply("sb").assignment == b""
    assert h.reply("sa").assignment == b"x"


def test_assignment_store_failure_resets_and_rebalances():
    h = Harness()
    h.join_new("a")
    gen = h.reply("a").generation
    h.fail_next_append = int(E.not_enough_replicas)
    r = h.sync("s", "g", gen, "c-1", {"c-1": b"x"})
    assert r.error == E.coordinator_not_available
    assert h.shard.groups["g"].state is S.PREPARING_REBALANCE
    h.join("again", member_id="c-1")
    assert h.reply("again").generation == gen + 1


def test_new_join_during_completing_rebalance_fails_pending_syncs():
    h = Harness(initial_rebalance_delay_ms=10)
    h.join("a", client="a", v4=False)
    h.join("b", client="b", v4=False)
    h.advance(20)  # b arrived during the delay: one more round
    follower = [h.reply(t) for t in "ab" if h.reply(t).member_id != h.reply(t).leader][0]
    h.sync("sf", "g", 1, follower.member_id)
    h.join("c", client="c", v4=False)
    assert h.reply("sf").error == E.rebalance_in_progress
    assert h.shard.groups["g"].state is S.PREPARING_REBALANCE


# ----------------------------------------------------------------------------- heartbeat and timeouts


def test_heartbeat_errors():
    h = Harness()
    ids, gen = stable_group(h, 2)
    assert h.heartbeat("g", ids[0], gen) == 0
    assert h.heartbeat("g", ids[0], gen - 1) == E.illegal_generation
    assert h.heartbeat("g", "zzz", gen) == E.unknown_member_id
    assert h.heartbeat("nogroup", ids[0], gen) == E.unknown_member_id
    assert h.heartbeat("", ids[0], gen) == E.invalid_group_id
    h.join("n", client="n", v4=False)
    assert h.heartbeat("g", ids[0], gen) == E.rebalance_in_progress


def test_session_timeout_removes_member_and_rebalances():
    h = Harness()
    ids, gen = stable_group(h, 2)
    h.advance(9000)
    assert h.heartbeat("g", ids[0], gen) == 0
    h.advance(1000)  # ids[1] missed its session
    g = h.shard.groups["g"]
    assert ids[1] not in g.members and g.state is S.PREPARING_REBALANCE
    assert h.heartbeat("g", ids[0], gen) == E.rebalance_in_progress
    h.join("rejoin", member_id=ids[0])
    r = h.reply("rejoin")
    assert r.generation == gen + 1 and r.leader == ids[0] and [m[0] for m in r.members] == [ids[0]]


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    h = Harness()
    ids, gen = stable_group(h, 2)
    h.join("r0", member_id=ids[0], rebalance=5000)  # a changed leader join starts a rebalance
    assert h.reply("r0") is None
    for _ in range(4):
        h.advance(1000)
        h.heartbeat("g", ids[1], gen)  # heartbeats but never rejoins
    h.advance(1000)
    r = h.reply("r0")
    assert r is None  # the deadline is the largest rebalance timeout (30 s)
    h.advance(25000)
    r = h.reply("r0")
    assert r.error == 0 and r.generation == gen + 1 and [m[0] for m in r.members] == [ids[0]]
    assert ids[1] not in h.shard.groups["g"].members


def test_pending_member_expires_and_unblocks_join():
    h = Harness()
    ids, gen = stable_group(h, 1)
    pre = h.join("p", client="late")
    assert pre.error == E.member_id_required
    h.join("r", member_id=ids[0], protocols=[("range", b"changed")])
    assert h.reply("r") is None  # waits for the pending member
    h.advance(10000)  # the pending member's session ends
    assert h.reply("r").generation == gen + 1


def test_member_that_never_syncs_is_removed():
    h = Harness(initial_rebalance_delay_ms=10)
    h.join("a", client="a", v4=False, rebalance=20000)
    h.join("b", client="b", v4=False, rebalance=20000)
    h.advance(20)
    leader = h.reply("a").leader
    other = "b-2" if leader == "a-1" else "a-1"
    h.sync("sl", "g", 1, leader, {leader: b"L", other: b"O"})
    assert h.shard.groups["g"].state is S.STABLE
    for _ in range(4):
        h.advance(5000)
        h.heartbeat("g", leader, 1)
    g = h.shard.groups["g"]
    assert other not in g.members and g.state is S.PREPARING_REBALANCE


# ----------------------------------------------------------------------------- leave


def test_leave_triggers_rebalance_and_last_leave_empties():
    h = Harness()
    ids, gen = stable_group(h, 2)
    res = h.leave("g", [(ids[1], None)])
    assert res.error == 0 and res.members == [(ids[1], None, 0)]
    h.join("r", member_id=ids[0])
    assert h.reply("r").generation == gen + 1
    h.sync("s", "g", gen + 1, ids[0], {ids[0]: b"all"})
    assert h.leave("g", [(ids[0], None), ("ghost", None)]).members == [
        (ids[0], None, 0),
        ("ghost", None, E.unknown_member_id),
    ]
    g = h.shard.groups["g"]
    assert g.state is S.EMPTY and g.generation == gen + 2 and g.protocol_name is None and g.leader is None
    h.assert_replay_matches()


def test_leave_unknown_group():
    h = Harness()
    assert h.leave("nope", [("m", None)]).members == [("m", None, E.unknown_member_id)]


def test_leave_fails_waiting_join():
    h = Harness()
    ids, gen = stable_group(h, 2)
    h.join("r", member_id=ids[0], protocols=[("range", b"x")])
    h.leave("g", [(ids[0], None)])
    assert h.reply("r").error == E.unknown_member_id


# ----------------------------------------------------------------------------- cooperative, concurrency


def test_consecutive_rebalances_with_shrinking_subscription():
    """Cooperative incremental: members rejoin with fewer owned partitions, twice."""
    h = Harness()
    ids, gen = stable_group(h, 2)
    for round_, meta in enumerate([b"owned-less", b"owned-none"], start=1):
        h.join(("j0", round_), member_id=ids[0], protocols=[("cooperative-sticky", meta), ("range", meta)])
        h.join(("j1", round_), member_id=ids[1], protocols=[("cooperative-sticky", meta), ("range", meta)])
        r0, r1 = h.reply(("j0", round_)), h.reply(("j1", round_))
        assert r0.generation == r1.generation == gen + round_
        assert r0.protocol_name == "cooperative-sticky"
        leader = ids[0] if r0.leader == ids[0] else ids[1]
        h.sync(("s", round_, "f"), "g", gen + round_, ids[1] if leader == ids[0] else ids[0])
        h.sync(("s", round_, "l"), "g", gen + round_, leader, {ids[0]: b"p0", ids[1]: b"p1"})
        assert h.shard.groups["g"].state is S.STABLE
    h.assert_replay_matches()


def test_groups_rebalance_independently():
    h = Harness(initial_rebalance_delay_ms=100)
    h.join("a1", "ga", client="a", v4=False)
    h.advance(50)
    h.join("b1", "gb", client="b", v4=False)
    h.advance(50)
    assert h.reply("a1").generation == 1 and h.reply("b1") is None
    h.join("a2", "ga", client="a2", v4=False)  # ga rebalances again; gb is untouched
    assert h.shard.groups["gb"].state is S.PREPARING_REBALANCE
    h.advance(50)
    assert h.reply("b1").generation == 1 and h.reply("b1").members == [("b-2", None, b"range-meta")]
    assert h.shard.groups["ga"].state is S.PREPARING_REBALANCE
