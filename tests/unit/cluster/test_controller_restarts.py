"""A broker that restarted (a new registration, so a new broker epoch) while it held a place in
an ISR: the controller's decisions (cluster/decisions.py) on hand-made states, no ZooKeeper.

Issue 25: after a power cut a broker's log may lack its unflushed tail. Kafka's controller
handles a broker whose registration changed while it stayed "live" as bounced: failed first
(out of every ISR, its leadership moved), then started. A controller that did not see the
restart (elected after it) cannot tell in Kafka's ZooKeeper mode; odradek's partition states
record the broker epoch each ISR member was admitted with, so every controller can.
"""

from __future__ import annotations

import uuid

import pytest

from odradek.cluster import zk_layout as L
from odradek.cluster.decisions import (
    check_isr_change,
    controlled_shutdown_moves,
    decide,
    preferred_election,
    reassignment_completions,
    rebalance,
    reconcile_partition,
    stale_members,
    stamp,
    unclean_election,
)
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zk_cache import CachedState, CacheView
from odradek.protocol.errors import ErrorCode

EPOCH = 7  # the controller epoch
NOW = {1: 1001, 2: 1002, 3: 1003}  # each broker's current registration (broker epoch)
BEFORE = 901  # broker 1's registration before it restarted


def ps(leader: int, leader_epoch: int, isr: tuple[int, ...], epochs: tuple[int, ...] | None) -> L.PartitionState:
    return L.PartitionState(leader, leader_epoch, isr, EPOCH, epochs)


def reconcile(st, replicas=(1, 2, 3), live=frozenset(NOW), restarted=frozenset(), unclean=False):
    return reconcile_partition(st, replicas, set(live), NOW, set(restarted), EPOCH, unclean=unclean)


# ------------------------------------------------------------------- decide
@pytest.mark.parametrize(
    "state,replicas,live,bounced,unclean,expected",
    [
        # leader alive: stays; a dead follower leaves the ISR without a new leader epoch
        ((1, (1, 2, 3)), (1, 2, 3), {1, 2}, set(), False, (1, (1, 2), False)),
        # leader dead: the first replica in assignment order that is alive and in sync
        ((1, (1, 2, 3)), (1, 3, 2), {2, 3}, set(), False, (3, (2, 3), True)),
        # a bounced leader is failed first: another in-sync replica leads, it leaves the ISR
        ((1, (1, 2)), (1, 2), {1, 2}, {1}, False, (2, (2,), True)),
        # a bounced follower leaves the ISR; the leader keeps its epoch
        ((2, (1, 2, 3)), (1, 2, 3), {1, 2, 3}, {1}, False, (2, (2, 3), False)),
        # a bounced leader alone in the ISR: failed, then started, it is the first back: leads again
        ((1, (1,)), (1, 2), {1, 2}, {1}, False, (1, (1,), True)),
        # ... its ISR's other members dead: the same
        ((1, (1, 2)), (1, 2), {1}, {1}, False, (1, (1,), True)),
        # no in-sync replica alive: no leader, the ISR remembered
        ((1, (1,)), (1, 2), {2}, set(), False, (-1, (1,), True)),
        # ... unless unclean election is allowed
        ((1, (1,)), (1, 2), {2}, set(), True, (2, (2,), True)),
        # already leaderless: nothing moves until an in-sync replica returns
        ((-1, (1,)), (1, 2), {2}, set(), False, (-1, (1,), False)),
        ((-1, (1,)), (1, 2), {1, 2}, set(), False, (1, (1,), True)),
    ],
)
def test_leader_election_rules(state, replicas, live, bounced, unclean, expected):
    leader, isr = state
    assert decide(L.PartitionState(leader, 5, isr, 1), replicas, live, bounced, unclean=unclean) == expected


# ------------------------------------------------------------------ records
def test_stale_members_are_those_registered_again_since_their_admission():
    st = ps(1, 4, (1, 2, 3), (BEFORE, 1002, -1))
    assert stale_members(st, NOW) == {1}  # 3's epoch is unknown: not judged
    assert stale_members(st, {2: 1002, 3: 1003}) == set()  # 1 not registered: dead, not stale


def test_stamp_keeps_what_members_were_admitted_with_and_stamps_the_new_ones():
    before = ps(1, 4, (1, 2), (BEFORE, -1))
    assert stamp((1, 2, 3), before, NOW) == (BEFORE, 1002, 1003)  # 1 stays stale: the record shows it
    assert stamp((1, 2), before, NOW, fresh=(1,)) == (1001, 1002)  # 1 admitted again
    assert stamp((1, 4), None, NOW) == (1001, -1)  # 4 is not registered


def test_partition_state_round_trips_with_and_without_recorded_epochs():
    st = ps(1, 4, (1, 2), (1001, 1002))
    assert L.decode_partition_state("t", 0, L.encode_partition_state(st)) == st
    kafka = b'{"controller_epoch":7,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}'
    assert L.decode_partition_state("t", 0, kafka) == ps(1, 4, (1, 2), None)
    assert b"isr_broker_epochs" not in L.encode_partition_state(ps(1, 4, (1, 2), None))
    odd = b'{"controller_epoch":7,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2],"isr_broker_epochs":[5]}'
    assert L.decode_partition_state("t", 0, odd).isr_epochs is None  # not one per member: unknown
    with pytest.raises(ValueError):
        ps(1, 4, (1, 2), (1,))


# ------------------------------------------------------- the reconcile step
def test_a_new_controller_moves_leadership_off_a_leader_that_restarted_before_it_was_elected():
    """Sim seed 160: leader 1 lost power and registered again while the controller was
    paused; a new controller, which never saw 1 go, finds it leading in a state that admitted
    its previous registration: 2 leads (a new leader epoch), 1 leaves the ISR."""
    st = ps(1, 4, (1, 2, 3), (BEFORE, 1002, 1003))
    assert reconcile(st) == ps(2, 5, (2, 3), (1002, 1003))


def test_a_follower_that_restarted_leaves_the_isr_without_a_new_leader_epoch():
    st = ps(2, 4, (2, 1, 3), (1002, BEFORE, 1003))
    assert reconcile(st) == ps(2, 4, (2, 3), (1002, 1003))


def test_a_restarted_leader_last_in_sync_leads_again_admitted_with_its_new_registration():
    """Nobody else can lead (2 and 3 dead): as Kafka's first in-sync replica back, 1 leads, at a
    new leader epoch, and its record is its current registration: no further change."""
    st = ps(1, 4, (1,), (BEFORE,))
    new = reconcile(st, live={1})
    assert new == ps(1, 5, (1,), (1001,))
    assert reconcile(new, live={1}) is None


def test_what_the_controller_saw_restart_counts_where_the_state_records_no_epoch():
    """A state Kafka wrote (no epochs): the controller's own view of sessions decides, as
    Kafka's does (processBrokerChange's bounced brokers); its write records the epochs."""
    st = ps(1, 4, (1, 2, 3), None)
    assert reconcile(st, restarted={1}) == ps(2, 5, (2, 3), (1002, 1003))
    # nothing restarted: only the record is written, the leader epoch stays
    assert reconcile(st) == ps(1, 4, (1, 2, 3), (1001, 1002, 1003))
    # where the state records the epoch the controller goes by it (1 was admitted again since)
    assert reconcile(ps(1, 4, (1, 2, 3), (1001, 1002, 1003)), restarted={1}) is None


# ------------------------------------------------------------------- elections
def view_of(states: dict[tuple[str, int], L.PartitionState], parts: dict[int, tuple[int, ...]]) -> CacheView:
    v = CacheView()
    v.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in NOW}
    v.broker_sessions = dict(NOW)
    v.topics["t"] = L.TopicAssignment(uuid.uuid4(), parts, {}, {})
    v.topic_versions["t"] = 0
    v.states = {k: CachedState(st, 3) for k, st in states.items()}
    return v


def test_preferred_elections_never_pick_a_replica_that_restarted():
    st = ps(2, 4, (1, 2, 3), (BEFORE, 1002, 1003))
    assert preferred_election(st, (1, 2, 3), set(NOW), NOW, EPOCH) is None
    view = view_of({("t", 0): st}, {0: (1, 2, 3)})
    assert rebalance(view, view.states, set(NOW), 0, EPOCH) == []
    # 3 preferred: it leads, and the write leaves the stale member out
    assert preferred_election(st, (3, 1, 2), set(NOW), NOW, EPOCH) == ps(3, 5, (2, 3), (1002, 1003))


def test_unclean_election_prefers_an_in_sync_replica_with_its_current_registration():
    st = ps(-1, 4, (1, 2), (BEFORE, 1002))
    assert unclean_election(st, (1, 2, 3), set(NOW), NOW, EPOCH) == (ErrorCode.none, None, ps(2, 5, (2,), (1002,)))
    only = ps(-1, 4, (1,), (BEFORE,))  # 1 restarted, 3 out of sync: the first live replica alone
    assert unclean_election(only, (1, 3), {1, 3}, NOW, EPOCH) == (ErrorCode.none, None, ps(1, 5, (1,), (1001,)))


def test_controlled_shutdown_never_hands_leadership_to_a_replica_that_restarted():
    view = view_of({("t", 0): ps(3, 4, (3, 1, 2), (1003, BEFORE, 1002))}, {0: (3, 1, 2)})
    updates, remaining = controlled_shutdown_moves(view, view.states, 3, {1, 2}, EPOCH)
    assert updates == [("t", 0, ps(2, 5, (2,), (1002,)), 3)] and remaining == []


def test_a_reassignment_completes_with_a_leader_that_did_not_restart():
    view = view_of({}, {0: (1, 2, 3)})
    view.topics["t"] = L.TopicAssignment(uuid.uuid4(), {0: (1, 2, 3)}, {0: (1, 2)}, {0: (3,)})
    states = {("t", 0): CachedState(ps(1, 4, (1, 2, 3), (BEFORE, 1002, 1003)), 3)}
    (assignment, updates) = reassignment_completions(view, states, set(NOW), EPOCH)["t"]
    assert assignment.partitions == {0: (1, 2)}
    assert updates == [("t", 0, ps(2, 5, (2,), (1002,)), 3)]


# ------------------------------------------------------------------ AlterPartition
def test_an_isr_change_keeping_a_member_that_restarted_is_ineligible():
    """The leader shrinks 3 out while 1, admitted before it restarted, is still in the ISR
    (the reconcile step takes it out): refused, as a new member at a stale epoch is (KIP-903)."""
    current = CachedState(ps(2, 4, (2, 1, 3), (1002, BEFORE, 1003)), 6)
    code = check_isr_change(2, 4, 6, (2, 1), None, current, (1, 2, 3), NOW)
    assert code == ErrorCode.ineligible_replica
    assert check_isr_change(2, 4, 6, (2,), None, current, (1, 2, 3), NOW) == ErrorCode.none


# ------------------------------------------------------------- a broker's own epoch
def test_a_previous_runs_registration_is_not_this_brokers_epoch():
    """Started again, a broker sees its id still registered by its previous run (the session
    not yet expired), whose epoch the states admitted: until it has registered itself, its own
    epoch is unknown (-1), so it leads none of them."""
    from odradek.cluster.zookeeper import build_snapshot

    view = view_of({}, {0: (1, 2, 3)})
    assert build_snapshot(view, None, (1, -1)).broker(1).epoch == -1
    assert build_snapshot(view, None, (1, 1001)).broker(1).epoch == 1001
    assert build_snapshot(view, None, (1, 1001)).broker(2).epoch == 1002  # the others' as registered
    assert build_snapshot(view).broker(1).epoch == 1001
