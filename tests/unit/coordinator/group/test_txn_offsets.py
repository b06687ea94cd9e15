"""Offsets committed in transactions (TxnOffsetCommit): pending until the producer's marker,
committed or dropped by it, replayed from the log, and require_stable (KIP-447)."""

from __future__ import annotations

from support.group_harness import Harness, static_stable, txn_commit_request

from odradek.coordinator.group.classic_group import GroupState
from odradek.protocol.errors import ErrorCode as E

S = GroupState
UNSTABLE = int(E.unstable_offset_commit)


def stable_member(h: Harness) -> tuple[str, int]:
    h.join_new("j")
    mid, gen = h.reply("j").member_id, h.reply("j").generation
    h.sync("s", "g", gen, mid, {mid: b"x"})
    assert h.shard.groups["g"].state is S.STABLE
    return mid, gen


def test_pending_until_commit_then_visible():
    h = Harness()
    h.commit("g", [("t", 0, 5, -1, "")])
    assert h.txn_commit("g", [("t", 0, 10, 3, "m"), ("t", 1, 20, -1, "")]) == {("t", 0): 0, ("t", 1): 0}
    # written as one transactional batch of the producer
    assert [e.producer_id for e in h.log] == [-1, 1000, 1000]
    assert h.fetch("g", ("t", 0)) == (5, 0)  # the committed one, not the pending one
    assert h.fetch("g", ("t", 1)) == (-1, 0)
    assert h.fetch("g", ("t", 0), require_stable=True) == (-1, UNSTABLE)
    assert h.fetch("g", ("t", 1), require_stable=True) == (-1, UNSTABLE)
    assert h.fetch("g", ("t", 2), require_stable=True) == (-1, 0)
    assert h.shard.fetch_offsets("g", None, require_stable=True) == [("t", [(0, -1, -1, "", UNSTABLE)])]
    h.assert_replay_matches()
    h.end_txn(commit=True)
    assert h.fetch("g", ("t", 0), require_stable=True) == (10, 0)
    assert h.fetch("g", ("t", 1), require_stable=True) == (20, 0)
    assert h.shard.fetch_offsets("g", [("t", [0])]) == [("t", [(0, 10, 3, "m", 0)])]
    assert not h.shard.offsets.pending_txn.by_producer and not h.shard.offsets.pending_txn.by_group
    h.assert_replay_matches()


def test_abort_drops_pending_offsets():
    h = Harness()
    h.commit("g", [("t", 0, 5, -1, "")])
    h.txn_commit("g", [("t", 0, 10, -1, ""), ("t", 1, 20, -1, "")])
    h.end_txn(commit=False)
    assert h.fetch("g", ("t", 0), require_stable=True) == (5, 0)
    assert h.fetch("g", ("t", 1), require_stable=True) == (-1, 0)
    h.assert_replay_matches()
    # the producer's next transaction (same epoch: transactions v1) starts afresh
    h.txn_commit("g", [("t", 1, 30, -1, "")])
    assert h.fetch("g", ("t", 1), require_stable=True) == (-1, UNSTABLE)
    h.end_txn(commit=True)
    assert h.fetch("g", ("t", 1)) == (30, 0)
    h.assert_replay_matches()


def test_transactions_of_several_producers_and_groups_end_separately():
    h = Harness()
    h.txn_commit("a", [("t", 0, 1, -1, "")], producer_id=1)
    h.txn_commit("b", [("t", 0, 2, -1, "")], producer_id=1)
    h.txn_commit("a", [("t", 1, 3, -1, "")], producer_id=2)
    h.txn_commit("a", [("t", 0, 4, -1, "")], producer_id=1)  # a later commit in the same transaction
    assert h.shard.offsets.pending_txn.by_group == {"a": {1, 2}, "b": {1}}
    h.end_txn(2, commit=False)
    assert h.fetch("a", ("t", 1), require_stable=True) == (-1, 0)
    assert h.fetch("a", ("t", 0), require_stable=True) == (-1, UNSTABLE)
    h.assert_replay_matches()
    h.end_txn(1, commit=True)
    assert h.fetch("a", ("t", 0)) == (4, 0)
    assert h.fetch("b", ("t", 0)) == (2, 0)
    h.assert_replay_matches()


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one():
    """Kafka orders a committed transaction's offsets against plain commits by their records'
    log offsets: the later record wins, whatever the order the transaction ends in."""
    h = Harness()
    h.txn_commit("g", [("t", 0, 10, -1, ""), ("t", 1, 11, -1, "")])
    h.commit("g", [("t", 0, 7, -1, "")])  # after the transactional record, before the marker
    assert h.fetch("g", ("t", 0)) == (7, 0)
    h.end_txn(commit=True)
    assert h.fetch("g", ("t", 0)) == (7, 0)
    assert h.fetch("g", ("t", 1)) == (11, 0)
    h.assert_replay_matches()
    # and an earlier plain commit loses to the transaction's
    h.txn_commit("g", [("t", 0, 12, -1, "")])
    h.end_txn(commit=True)
    assert h.fetch("g", ("t", 0)) == (12, 0)
    h.assert_replay_matches()


def test_replay_keeps_a_transaction_open_at_the_end_of_the_log_pending():
    h = Harness()
    h.txn_commit("g", [("t", 0, 1, -1, "")], producer_id=1)
    h.end_txn(1, commit=True)
    h.txn_commit("g", [("t", 0, 2, -1, "")], producer_id=2)
    h.end_txn(2, commit=False)
    h.txn_commit("g", [("t", 0, 3, -1, "")], producer_id=3)
    other = h.replayed()
    assert other.fetch_offsets("g", [("t", [0])]) == [("t", [(0, 1, -1, "", 0)])]
    assert other.fetch_offsets("g", [("t", [0])], require_stable=True) == [("t", [(0, -1, -1, "", UNSTABLE)])]
    assert other.offsets.pending_txn.by_group == {"g": {3}}
    h.assert_replay_matches()
    # the marker read later (a new leader's load would see it) commits it
    other.replay_end_transaction(3, True)
    assert other.fetch_offsets("g", [("t", [0])], require_stable=True) == [("t", [(0, 3, -1, "", 0)])]


def test_group_checks():
    h = Harness(offset_metadata_max_bytes=3)
    # unknown group: accepted with generation -1 (a simple group), ILLEGAL_GENERATION otherwise
    assert h.txn_commit("nogroup", [("t", 0, 1, -1, "")], member_id="m", generation=1) == {
        ("t", 0): E.illegal_generation
    }
    assert "nogroup" not in h.shard.groups
    assert h.txn_commit("simple", [("t", 0, 1, -1, "")]) == {("t", 0): 0}
    assert h.shard.groups["simple"].state is S.EMPTY and h.shard.groups["simple"].protocol_type is None
    h.join_new("j")
    mid, gen = h.reply("j").member_id, h.reply("j").generation
    # CompletingRebalance: accepted for transactional commits (Kafka does not enforce the state)
    assert h.txn_commit("g", [("t", 0, 1, -1, "")], member_id=mid, generation=gen) == {("t", 0): 0}
    h.sync("s", "g", gen, mid, {mid: b"a"})
    assert h.txn_commit("g", [("t", 0, 1, -1, "")], member_id=mid, generation=gen + 1) == {
        ("t", 0): E.illegal_generation
    }
    assert h.txn_commit("g", [("t", 0, 1, -1, "")], member_id="x", generation=gen) == {("t", 0): E.unknown_member_id}
    # v0-2 carry no member id nor generation: accepted on an active group
    assert h.txn_commit("g", [("t", 0, 1, -1, "")]) == {("t", 0): 0}
    errs = h.txn_commit("g", [("t", 0, 5, -1, "abc"), ("t", 1, 6, -1, "abcd")], member_id=mid, generation=gen)
    assert errs == {("t", 0): 0, ("t", 1): E.offset_metadata_too_large}
    assert h.txn_commit("", [("t", 0, 1, -1, "")]) == {("t", 0): E.invalid_group_id}
    h.assert_replay_matches()


def test_static_member_fencing():
    h = Harness(initial_rebalance_delay_ms=50)
    ids, gen = static_stable(h)
    inst, mid = next(iter(ids.items()))
    assert h.txn_commit("g", [("t", 0, 1, -1, "")], member_id=mid, generation=gen, instance=inst) == {("t", 0): 0}
    assert h.txn_commit("g", [("t", 0, 1, -1, "")], member_id="old", generation=gen, instance=inst) == {
        ("t", 0): E.fenced_instance_id
    }
    assert h.txn_commit("g", [("t", 0, 1, -1, "")], member_id=mid, generation=gen, instance="nobody") == {
        ("t", 0): E.unknown_member_id
    }


def test_failed_append_leaves_nothing_pending():
    h = Harness()
    h.fail_next_append = int(E.not_enough_replicas)
    assert h.txn_commit("s", [("t", 0, 1, -1, "")]) == {("t", 0): E.coordinator_not_available}
    assert "s" not in h.shard.groups
    assert not h.shard.offsets.pending_txn.by_producer
    assert h.fetch("s", ("t", 0), require_stable=True) == (-1, 0)
    h.fail_next_append = int(E.invalid_producer_epoch)  # a fenced producer: passed through
    assert h.txn_commit("s", [("t", 0, 1, -1, "")]) == {("t", 0): E.invalid_producer_epoch}
    h.assert_replay_matches()


def test_transaction_ending_while_its_offsets_are_written():
    """The records were appended before the marker but their append completed after it (a
    timeout abort racing the TxnOffsetCommit): the outcome applies once they are durable."""
    for commit in (False, True):
        h = Harness()
        token = object()
        res = h.shard.commit_offsets(txn_commit_request("g", [("t", 0, 9, -1, "")]), token=token, now=h.now)
        h.shard.replay_end_transaction(1000, commit)
        h.run(res)
        h.log.append(h.log[-1]._replace(key=None, value=None, commit=commit))  # the marker, after the record
        assert h.replies[token] == {("t", 0): 0}
        assert not h.shard.offsets.pending_txn.by_producer and not h.shard.offsets.pending_txn.by_group
        assert h.fetch("g", ("t", 0), require_stable=True) == ((9, 0) if commit else (-1, 0))
        h.assert_replay_matches()


def test_delete_group_with_pending_offsets():
    """Kafka deletes the group: partitions with only pending offsets get a tombstone too, which
    drops them; the marker later finds nothing to commit."""
    h = Harness()
    h.commit("g", [("t", 0, 1, -1, "")])
    h.txn_commit("g", [("t", 0, 2, -1, ""), ("t", 1, 3, -1, "")])
    assert h.delete_group("g") == 0
    tombstones = [e.key for e in h.log if e.key is not None and e.value is None]
    assert len(tombstones) == 3  # (t,0), (t,1) and the group
    assert h.fetch("g", ("t", 1), require_stable=True) == (-1, 0)
    assert not h.shard.offsets.pending_txn.has_open("g")  # nothing pending left (Kafka 4.4's OpenTransactions)
    h.assert_replay_matches()
    h.end_txn(commit=True)
    assert "g" not in h.shard.groups
    assert h.fetch("g", ("t", 0)) == (-1, 0)
    h.assert_replay_matches()


def test_offset_delete_with_pending_offsets():
    h = Harness()
    mid, gen = stable_member(h)
    h.leave("g", [(mid, None)])
    h.txn_commit("g", [("t", 0, 2, -1, "")])
    before = len(h.log)
    err, per = h.delete_offsets("g", [("t", [0, 1])])
    assert err == 0 and per == {("t", 0): 0, ("t", 1): 0}
    assert len(h.log) == before + 1  # a tombstone for (t, 0) only: (t, 1) had nothing
    assert h.fetch("g", ("t", 0), require_stable=True) == (-1, 0)
    h.end_txn(commit=True)
    assert h.fetch("g", ("t", 0)) == (-1, 0)
    h.assert_replay_matches()


def test_a_group_whose_pending_offsets_were_deleted_can_expire():
    h = Harness(offsets_retention_ms=1000)
    h.commit("g", [("t", 0, 1, -1, "")])
    h.txn_commit("g", [("t", 1, 2, -1, "")])
    assert h.delete_offsets("g", [("t", [1])]) == (0, {("t", 1): 0})
    assert not h.shard.offsets.pending_txn.has_open("g") and not h.shard.offsets.pending_txn.by_producer
    h.now += 1000
    for res in h.shard.expire_offsets(h.now):
        h.run(res)
    assert "g" not in h.shard.groups
    h.assert_replay_matches()
    h.end_txn(commit=True)  # the marker finds nothing left
    assert "g" not in h.shard.groups


def test_expiry_waits_for_open_transactions():
    h = Harness(offsets_retention_ms=1000)
    h.commit("g", [("t", 0, 1, -1, ""), ("t", 1, 1, -1, "")])
    h.txn_commit("g", [("t", 0, 2, -1, "")])
    h.txn_commit("p", [("t", 0, 2, -1, "")], producer_id=7)  # a group with only pending offsets
    h.now += 1000
    for res in h.shard.expire_offsets(h.now):
        h.run(res)
    # (t, 1) expired; (t, 0) has a pending offset; neither group dies while its transaction is open
    assert set(h.shard.offsets.of("g")) == {("t", 0)}
    assert "p" in h.shard.groups
    h.assert_replay_matches()
    h.end_txn(commit=False)
    h.end_txn(7, commit=False)
    for res in h.shard.expire_offsets(h.now):
        h.run(res)
    assert "g" not in h.shard.groups and "p" not in h.shard.groups
    h.assert_replay_matches()
