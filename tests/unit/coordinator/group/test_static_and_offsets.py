"""Static membership (KIP-345), offsets, deletion, expiry, and replay of all of it."""

from __future__ import annotations

import struct

from support.group_harness import Harness, static_stable

from odradek.coordinator.group.classic_group import GroupState
from odradek.protocol.errors import ErrorCode as E

S = GroupState


def test_static_member_joins_without_member_id_required():
    h = Harness()
    r = h.join("t", instance="i0")
    assert r.error == 0 and r.member_id == "c-1" and r.generation == 1


def test_static_rejoin_gets_old_assignment_without_rebalance_and_fences_old_id():
    h = Harness(initial_rebalance_delay_ms=50)
    ids, gen = static_stable(h)
    follower_inst = next(i for i, m in ids.items() if m != h.shard.groups["g"].leader)
    old_id = ids[follower_inst]
    # restart: join with an unknown member id and the same instance id and metadata
    r = h.join("restart", instance=follower_inst, client=follower_inst)
    assert r.error == 0 and r.generation == gen and r.member_id != old_id
    assert h.shard.groups["g"].state is S.STABLE
    assert r.members == [] and not r.skip_assignment
    s = h.sync("s-new", "g", gen, r.member_id, instance=follower_inst)
    assert s.assignment == f"A-{follower_inst}".encode()
    assert h.heartbeat("g", old_id, gen, instance=follower_inst) == E.fenced_instance_id
    assert h.heartbeat("g", r.member_id, gen, instance=follower_inst) == 0
    assert (
        h.commit("g", [("t", 0, 1, -1, "")], member_id=old_id, generation=gen, instance=follower_inst)[("t", 0)]
        == E.fenced_instance_id
    )
    h.assert_replay_matches()


def test_static_leader_rejoin_is_told_to_skip_assignment():
    h = Harness(initial_rebalance_delay_ms=50)
    ids, gen = static_stable(h)
    leader_inst = next(i for i, m in ids.items() if m == h.shard.groups["g"].leader)
    r = h.join("restart", instance=leader_inst, client=leader_inst)
    assert r.error == 0 and r.generation == gen and r.leader == r.member_id and r.skip_assignment
    assert len(r.members) == 2
    h.assert_replay_matches()


def test_static_rejoin_with_changed_metadata_rebalances():
    h = Harness(initial_rebalance_delay_ms=50)
    ids, gen = static_stable(h)
    inst = "i1"
    r = h.join("restart", instance=inst, client=inst, protocols=[("range", b"other-topics")])
    assert r is None and h.shard.groups["g"].state is S.PREPARING_REBALANCE


def test_static_member_waiting_join_is_fenced_by_newer_incarnation():
    h = Harness(initial_rebalance_delay_ms=50)
    ids, gen = static_stable(h)
    h.join("old", member_id=ids["i0"], instance="i0", client="i0", protocols=[("range", b"v2")])
    assert h.reply("old") is None
    h.join("new", instance="i0", client="i0", protocols=[("range", b"v2")])
    assert h.reply("old").error == E.fenced_instance_id


def test_leave_by_instance_id():
    h = Harness(initial_rebalance_delay_ms=50)
    ids, gen = static_stable(h)
    res = h.leave("g", [("", "i1"), ("", "unknown-instance"), ("wrong", "i0")])
    assert res.members == [
        ("", "i1", 0),
        ("", "unknown-instance", E.unknown_member_id),
        ("wrong", "i0", E.fenced_instance_id),
    ]
    assert ids["i1"] not in h.shard.groups["g"].members


# ----------------------------------------------------------------------------- offsets


def test_simple_consumer_commit_keeps_group_empty():
    h = Harness()
    errs = h.commit("simple", [("t", 0, 10, 3, "m"), ("t", 1, 20, -1, None)])
    assert errs == {("t", 0): 0, ("t", 1): 0}
    g = h.shard.groups["simple"]
    assert g.state is S.EMPTY and g.protocol_type is None and g.generation == 0
    assert h.shard.fetch_offsets("simple", [("t", [0, 1, 2])]) == [
        ("t", [(0, 10, 3, "m", 0), (1, 20, -1, "", 0), (2, -1, -1, "", 0)])
    ]
    assert h.shard.fetch_offsets("simple", None) == [("t", [(0, 10, 3, "m", 0), (1, 20, -1, "", 0)])]
    assert h.shard.list_groups() == [("simple", "", "Empty")]
    h.assert_replay_matches()


def test_commit_validation():
    h = Harness(offset_metadata_max_bytes=5)
    assert h.commit("nogroup", [("t", 0, 1, -1, "")], member_id="m", generation=1) == {("t", 0): E.illegal_generation}
    h.join_new("j")
    gen = h.reply("j").generation
    mid = h.reply("j").member_id
    # CompletingRebalance
    assert h.commit("g", [("t", 0, 1, -1, "")], member_id=mid, generation=gen)[("t", 0)] == E.rebalance_in_progress
    h.sync("s", "g", gen, mid, {mid: b"a"})
    assert h.commit("g", [("t", 0, 1, -1, "")], member_id=mid, generation=gen + 1)[("t", 0)] == E.illegal_generation
    assert h.commit("g", [("t", 0, 1, -1, "")], member_id="x", generation=gen)[("t", 0)] == E.unknown_member_id
    assert h.commit("g", [("t", 0, 1, -1, "")])[("t", 0)] == E.unknown_member_id  # generation -1 on an active group
    errs = h.commit("g", [("t", 0, 5, -1, "12345"), ("t", 1, 6, -1, "123456")], member_id=mid, generation=gen)
    assert errs == {("t", 0): 0, ("t", 1): E.offset_metadata_too_large}
    # PreparingRebalance: commits of the current generation are still accepted
    h.join("n", client="n", v4=False)
    assert h.commit("g", [("t", 0, 7, -1, "")], member_id=mid, generation=gen)[("t", 0)] == 0
    assert h.shard.fetch_offsets("g", [("t", [0])])[0][1][0][1] == 7
    assert h.commit("", [("t", 0, 1, -1, "")]) == {("t", 0): E.invalid_group_id}


def test_failed_offset_append_is_not_cached():
    h = Harness()
    h.fail_next_append = int(E.not_leader_or_follower)
    assert h.commit("s", [("t", 0, 1, -1, "")]) == {("t", 0): E.not_coordinator}
    assert "s" not in h.shard.groups
    h.assert_replay_matches()


def test_offsets_of_empty_group_expire_then_group_dies():
    h = Harness(offsets_retention_ms=60000)
    h.commit("s", [("t", 0, 1, -1, "")])
    h.now += 59999
    assert not h.shard.expire_offsets(h.now)
    h.now += 1
    for res in h.shard.expire_offsets(h.now):
        h.run(res)
    assert "s" not in h.shard.groups
    assert h.shard.fetch_offsets("s", [("t", [0])]) == [("t", [(0, -1, -1, "", 0)])]
    h.assert_replay_matches()


def test_explicit_expire_timestamp_wins():
    h = Harness(offsets_retention_ms=10**9)
    h.commit("s", [("t", 0, 1, -1, ""), ("t", 1, 2, -1, "")], retention_ms=1000)
    h.now += 1000
    for res in h.shard.expire_offsets(h.now):
        h.run(res)
    assert "s" not in h.shard.groups
    h.assert_replay_matches()


def test_active_consumer_group_expires_only_unsubscribed_topics():
    sub = struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"a" + struct.pack(">i", -1)
    h = Harness(offsets_retention_ms=1000)
    h.join_new("j", protocols=[("range", sub)])
    mid, gen = h.reply("j").member_id, h.reply("j").generation
    h.sync("s", "g", gen, mid, {mid: b""})
    h.commit("g", [("a", 0, 1, -1, ""), ("b", 0, 2, -1, "")], member_id=mid, generation=gen)
    h.now += 1000
    for res in h.shard.expire_offsets(h.now):
        h.run(res)
    assert set(h.shard.offsets.of("g")) == {("a", 0)}
    h.assert_replay_matches()


def test_delete_groups():
    h = Harness()
    h.join_new("j")
    mid, gen = h.reply("j").member_id, h.reply("j").generation
    h.sync("s", "g", gen, mid, {mid: b"x"})
    h.commit("g", [("t", 0, 1, -1, "")], member_id=mid, generation=gen)
    assert h.delete_group("g") == E.non_empty_group
    assert h.delete_group("missing") == E.group_id_not_found
    h.leave("g", [(mid, None)])
    assert h.shard.groups["g"].state is S.EMPTY
    assert h.delete_group("g") == 0
    assert "g" not in h.shard.groups
    assert h.shard.describe_group("g").state == "Dead"
    h.assert_replay_matches()
    assert not h.replayed().groups


def test_offset_delete():
    sub = struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"a" + struct.pack(">i", -1)
    h = Harness()
    h.join_new("j", protocols=[("range", sub)])
    mid, gen = h.reply("j").member_id, h.reply("j").generation
    h.sync("s", "g", gen, mid, {mid: b""})
    h.commit("g", [("a", 0, 1, -1, ""), ("b", 0, 2, -1, "")], member_id=mid, generation=gen)
    err, per = h.delete_offsets("g", [("a", [0]), ("b", [0, 1])])
    assert err == 0 and per == {("a", 0): E.group_subscribed_to_topic, ("b", 0): 0, ("b", 1): 0}
    assert set(h.shard.offsets.of("g")) == {("a", 0)}
    assert h.delete_offsets("nope", [("a", [0])])[0] == E.group_id_not_found
    h.assert_replay_matches()


def test_describe_and_list():
    h = Harness()
    h.join_new("j")
    mid, gen = h.reply("j").member_id, h.reply("j").generation
    d = h.shard.describe_group("g")
    assert (d.state, d.protocol_type, d.protocol_data) == ("CompletingRebalance", "consumer", "")
    assert d.members[0].metadata == b"" and d.members[0].client_host == "/127.0.0.1"
    h.sync("s", "g", gen, mid, {mid: b"asg"})
    d = h.shard.describe_group("g")
    assert (d.state, d.protocol_data) == ("Stable", "range")
    assert (d.members[0].metadata, d.members[0].assignment) == (b"range-meta", b"asg")
    h.commit("s2", [("t", 0, 1, -1, "")])
    assert sorted(h.shard.list_groups()) == [("g", "consumer", "Stable"), ("s2", "", "Empty")]
    assert h.shard.list_groups(["stable"]) == [("g", "consumer", "Stable")]
    assert h.shard.list_groups(types=["consumer"]) == []
    assert len(h.shard.list_groups(types=["Classic"])) == 2
