"""The controller's decisions (cluster/decisions.py), on hand-made cluster states: no ZooKeeper.

Each case is a state the controller can really be in: its watched copy of the znodes (a
`CacheView`) behind its own newer writes, a broker in controlled shutdown, one partition's
reassignment that cannot complete beside another's that can.
"""

from __future__ import annotations

import uuid

from odradek.cluster import zk_layout as L
from odradek.cluster.decisions import check_isr_change, controlled_shutdown_moves, reassignment_completions, rebalance
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zk_cache import CachedState, CacheView
from odradek.protocol.errors import ErrorCode

EPOCH = 7  # the controller epoch


def view_of(brokers, topics, states) -> CacheView:
    """`topics`: name -> (partition -> replicas[, adding, removing]); `states`: (topic, p) -> (leader, isr, version)."""
    v = CacheView()
    v.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers}
    v.broker_sessions = {b: 1000 + b for b in brokers}
    for name, spec in topics.items():
        parts, adding, removing = spec if isinstance(spec, tuple) else (spec, {}, {})
        v.topics[name] = L.TopicAssignment(uuid.uuid4(), parts, adding, removing)
        v.topic_versions[name] = 0
    for key, (leader, isr, version) in states.items():
        v.states[key] = cached(leader, isr, version)
    return v


def ps(leader: int, leader_epoch: int, isr: tuple[int, ...], epochs: tuple[int, ...] | None = None) -> L.PartitionState:
    """A partition state written by this controller: each ISR member admitted with its current
    registration (broker epoch 1000 + id) unless `epochs` says otherwise."""
    return L.PartitionState(leader, leader_epoch, isr, EPOCH, epochs or tuple(1000 + b for b in isr))


def cached(leader: int, isr: tuple[int, ...], version: int, epochs: tuple[int, ...] | None = None) -> CachedState:
    return CachedState(ps(leader, 3, isr, epochs), version)


# ----------------------------------------------------------- preferred leaders
def test_rebalance_never_elects_a_preferred_replica_that_just_left_the_isr():
    """Audit §2: the leader's AlterPartition removing lagging preferred replica 3 was written
    by this controller (its own newer state, version 6) but its watch has not delivered it
    yet (the view still says version 5, 3 in the ISR). The rebalance must decide from the
    state it writes: 3 is out of that ISR, so it stays a follower."""
    view = view_of({1, 2, 3}, {"t": {0: (3, 1, 2)}}, {("t", 0): (1, (1, 2, 3), 5)})
    states = {("t", 0): cached(1, (1, 2), 6)}  # the overlay: the shrink just written
    assert rebalance(view, states, {1, 2, 3}, 0, EPOCH) == []


def test_rebalance_moves_a_preferred_replica_in_the_isr_it_writes_over():
    view = view_of({1, 2, 3}, {"t": {0: (3, 1, 2)}}, {("t", 0): (1, (1, 2), 5)})
    states = {("t", 0): cached(1, (1, 2, 3), 6)}  # the overlay: 3 back in the ISR
    assert rebalance(view, states, {1, 2, 3}, 0, EPOCH) == [("t", 0, ps(3, 4, (1, 2, 3)), 6)]


def test_rebalance_never_prefers_a_broker_in_controlled_shutdown():
    view = view_of({1, 2, 3}, {"t": {0: (3, 1, 2), 1: (3, 2, 1)}}, {})
    states = {("t", 0): cached(1, (1, 2, 3), 5), ("t", 1): cached(2, (1, 2, 3), 5)}
    live = {1, 2}  # 3 registered but shutting down
    assert rebalance(view, states, live, 0, EPOCH) == []
    assert {u[2].leader for u in rebalance(view, states, {1, 2, 3}, 0, EPOCH)} == {3}


def test_rebalance_respects_the_imbalance_percentage():
    parts = {p: (1, 2, 3) for p in range(10)}
    states = {("t", p): cached(1 if p else 2, (1, 2, 3), 1) for p in range(10)}  # 1 of 10 led elsewhere
    view = view_of({1, 2, 3}, {"t": parts}, {})
    assert rebalance(view, states, {1, 2, 3}, 10, EPOCH) == []  # 10 %: not above
    assert [u[:2] for u in rebalance(view, states, {1, 2, 3}, 5, EPOCH)] == [("t", 0)]


# ----------------------------------------------------------------- reassignment
def test_a_reassignment_that_cannot_complete_does_not_stop_another_topics():
    """Audit §10: partition a-0 moves from [1, 2] to [3]; 3 joined the ISR and then died, so
    no target replica can lead. Its reassignment waits (as Kafka's does: no eligible leader),
    and b-0's, whose target is in the ISR and alive, completes in the same step."""
    view = view_of(
        {1, 2},
        {
            "a": ({0: (3, 1, 2)}, {0: (3,)}, {0: (1, 2)}),
            "b": ({0: (2, 1)}, {0: (2,)}, {0: (1,)}),
        },
        {},
    )
    states = {("a", 0): cached(1, (1, 2, 3), 4), ("b", 0): cached(1, (1, 2), 4)}
    done = reassignment_completions(view, states, {1, 2}, EPOCH)
    assert set(done) == {"b"}
    assignment, updates = done["b"]
    assert assignment.partitions == {0: (2,)} and not assignment.adding and not assignment.removing
    assert updates == [("b", 0, ps(2, 4, (2,)), 4)]


def test_a_reassignment_completes_once_its_targets_are_in_sync():
    view = view_of({1, 2, 3}, {"t": ({0: (3, 2, 1), 1: (3, 1)}, {0: (3,), 1: (3,)}, {0: (1,), 1: (1,)})}, {})
    states = {("t", 0): cached(2, (1, 2, 3), 9), ("t", 1): cached(1, (1,), 2)}  # t-1: 3 still copying
    done = reassignment_completions(view, states, {1, 2, 3}, EPOCH)
    assignment, updates = done["t"]
    assert assignment.partitions == {0: (3, 2), 1: (3, 1)}
    assert assignment.adding == {1: (3,)} and assignment.removing == {1: (1,)}
    assert updates == [("t", 0, ps(2, 3, (2, 3)), 9)]  # 2 leads on: no new epoch


# ---------------------------------------------------------------- AlterPartition
# partition t-0: replicas (1, 2, 3), leader 1 at leader epoch 3, ISR (1, 2), partition epoch 6;
# brokers 1, 2, 3 registered with broker epochs 101, 102, 103.
CURRENT = cached(1, (1, 2), 6, (101, 102))
ELIGIBLE = {1: 101, 2: 102, 3: 103}


def isr_check(
    new_isr, *, sender=1, leader_epoch=3, partition_epoch=6, epochs=None, eligible=ELIGIBLE, current=CURRENT
) -> str:
    code = check_isr_change(sender, leader_epoch, partition_epoch, new_isr, epochs, current, (1, 2, 3), eligible)
    return ErrorCode(code).name


def test_an_isr_expansion_from_the_leader_at_the_current_epochs_is_accepted():
    assert isr_check((1, 2, 3)) == "none"
    assert isr_check((1, 2, 3), epochs=(101, 102, 103)) == "none"  # v3, every epoch current
    assert isr_check((1, 2, 3), epochs=(-1, -1, -1)) == "none"  # v3, epochs unknown: not checked


def test_kip_903_a_member_whose_broker_epoch_is_not_its_registrations_is_ineligible():
    """The leader saw 3 fetch before 3 restarted (its registration, and so its broker epoch,
    changed): 3 may have lost what it had, and must catch up again before it joins."""
    assert isr_check((1, 2, 3), epochs=(101, 102, 99)) == "ineligible_replica"
    # a shrink keeping a member whose epoch is stale is refused too, as in Kafka
    assert isr_check((1, 2), epochs=(101, 98), current=cached(1, (1, 2, 3), 6, (101, 102, 103))) == "ineligible_replica"


def test_kip_841_members_must_be_registered_and_not_shutting_down():
    assert isr_check((1, 2, 3), eligible={1: 101, 2: 102}) == "ineligible_replica"


def test_stale_and_newer_epochs():
    assert isr_check((1, 2, 3), leader_epoch=2) == "fenced_leader_epoch"
    assert isr_check((1, 2, 3), partition_epoch=5) == "invalid_update_version"
    # the leader knows a newer state than this controller: it looks for the controller again
    assert isr_check((1, 2, 3), leader_epoch=4) == "not_controller"
    assert isr_check((1, 2, 3), partition_epoch=7) == "not_controller"


def test_malformed_isrs_and_senders():
    assert isr_check((1, 2, 3), sender=2) == "invalid_request"
    assert isr_check((2, 3)) == "invalid_request"  # without the leader
    assert isr_check((1, 4)) == "invalid_request"  # not a replica
    assert isr_check((1, 2, 2)) == "invalid_request"


def test_a_retried_change_already_applied_answers_the_current_state():
    assert isr_check((1, 2), partition_epoch=5) == "none"


# ------------------------------------------------------------ controlled shutdown
def test_controlled_shutdown_moves_leadership_to_the_next_live_in_sync_replica():
    view = view_of({1, 2, 3}, {"t": {0: (1, 2, 3), 1: (2, 1, 3), 2: (1, 3)}}, {})
    states = {
        ("t", 0): cached(1, (1, 2, 3), 4),  # led by 1: to 2
        ("t", 1): cached(2, (1, 2, 3), 4),  # followed by 1: out of the ISR
        ("t", 2): cached(1, (1,), 4),  # 3 out of sync: 1 keeps it
    }
    updates, remaining = controlled_shutdown_moves(view, states, 1, {2, 3}, EPOCH)
    assert updates == [
        ("t", 0, ps(2, 4, (2, 3)), 4),
        ("t", 1, ps(2, 3, (2, 3)), 4),
    ]
    assert remaining == [("t", 2)]
