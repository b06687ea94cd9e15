"""The controller's decisions: pure functions from the cluster's state to the writes it needs.

No ZooKeeper, no event loop: each function takes what the controller knows (a `CacheView`
of the znodes, the partition states it decides from, which brokers are live) and returns
the partition states to write, each with the znode version (partition epoch) its write
checks. cluster/controller.py calls them and writes the result; tests call them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Set

from odradek.cluster import zk_layout as L
from odradek.cluster.zk_cache import CachedState, CacheView
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.cluster.controller")

Key = tuple[str, int]  # (topic, partition)
# A partition state to write: (topic, partition, the new state, the znode version it replaces).
Update = tuple[str, int, L.PartitionState, int]


def stamp(
    isr: tuple[int, ...],
    before: L.PartitionState | None,
    sessions: Mapping[int, int],
    fresh: Iterable[int] = (),
) -> tuple[int, ...]:
    """The broker epochs to record for `isr` (PartitionState.isr_epochs): a member already in
    `before`'s ISR keeps the epoch it was admitted with (a stale one too: it is what shows
    the member restarted since); a new member, a member of `fresh` (admitted again) or one
    whose epoch is unknown gets its current registration's (-1 when not registered)."""
    again = set(fresh)
    out = []
    for b in isr:
        e = before.admitted_epoch(b) if before is not None and b not in again else -1
        out.append(e if e != -1 else sessions.get(b, -1))
    return tuple(out)


def stale_members(state: L.PartitionState, sessions: Mapping[int, int]) -> set[int]:
    """ISR members registered now with another broker epoch than the one they were admitted
    with: they restarted since (their log may have lost its unflushed tail), whether or not
    a controller saw them go."""
    return {b for b in state.isr if b in sessions and (e := state.admitted_epoch(b)) != -1 and e != sessions[b]}


def current_isr(state: L.PartitionState, sessions: Mapping[int, int]) -> tuple[int, ...]:
    """The ISR without its stale members: what any write of the controller keeps of it."""
    stale = stale_members(state, sessions)
    return tuple(b for b in state.isr if b not in stale)


def may_lead(state: L.PartitionState, broker: int, live: set[int], sessions: Mapping[int, int]) -> bool:
    """A broker may be elected (cleanly) when it is live and in the ISR with the registration
    it was admitted with."""
    return broker in live and broker in state.isr and broker not in stale_members(state, sessions)


def decide(
    state: L.PartitionState,
    replicas: tuple[int, ...],
    live: set[int],
    bounced: set[int],
    *,
    unclean: bool,
    lost: Set[int] = frozenset(),
) -> tuple[int, tuple[int, ...], bool]:
    """(leader, ISR, whether the leader epoch moves) a partition should have now.

    `bounced`: brokers registered again since this partition's ISR admitted them, or since
    this controller last acted on them (a restart it saw only as a new registration). As
    Kafka's controller handles a bounced broker (KafkaController.processBrokerChange), each
    is failed first (not live: out of the ISR, its leadership moved to another live in-sync
    replica), then started (live again: when no other in-sync replica is live, one of them
    leads alone, as the first in-sync replica back would; the others rejoin the ISR by
    catching up with it).

    `lost`: brokers whose registration says their logs may lack what a previous run had not
    flushed (BrokerInfo.may_lack_unflushed: an unclean stop, then the host booted again).
    Among bounced in-sync replicas, one that kept its page cache (a kill -9) leads before
    one that may have lost it (a power cut): it holds every record acknowledged while it
    was in sync."""
    up = live - bounced
    leader, isr, bump = _elect(state.leader, state.isr, replicas, up, unclean)
    if leader == -1 and bounced & live:
        back = [r for r in replicas if r in live and r in isr]
        if back:
            first = next((r for r in back if r not in lost), back[0])
            return first, (first,), True
        leader, isr, again = _elect(-1, isr, replicas, live, unclean)
        bump = bump or again
    return leader, isr, bump


def _elect(
    leader: int, isr: tuple[int, ...], replicas: tuple[int, ...], live: set[int], unclean: bool
) -> tuple[int, tuple[int, ...], bool]:
    isr_live = tuple(b for b in isr if b in live)
    if leader >= 0 and leader in live:
        return leader, (isr_live or (leader,)), False
    candidates = [r for r in replicas if r in live and r in isr]
    if candidates:
        return candidates[0], isr_live, True
    if unclean:
        alive = [r for r in replicas if r in live]
        if alive:
            return alive[0], (alive[0],), True
    return -1, isr, leader != -1


def reconcile_partition(
    state: L.PartitionState,
    replicas: tuple[int, ...],
    live: set[int],
    sessions: Mapping[int, int],
    restarted: set[int],
    controller_epoch: int,
    *,
    unclean: bool,
    lost: Set[int] = frozenset(),
) -> L.PartitionState | None:
    """The state a partition should have now (None: it has it), with the broker epochs of its
    ISR recorded (`stamp`). Bounced (`decide`): the members whose admitted broker epoch is
    not their registration's (`stale_members`: seen by any controller, even one elected
    after the restart), and, where the state records no epoch (written by Kafka), the
    members in `restarted`: brokers this controller saw register again (a new session)
    since it last acted on them. `lost`: as `decide`'s."""
    unrecorded = {b for b in state.isr if state.admitted_epoch(b) == -1}
    bounced = (restarted & unrecorded) | stale_members(state, sessions)
    leader, isr, bump = decide(state, replicas, live, bounced, unclean=unclean, lost=lost)
    epochs = stamp(isr, state, sessions, fresh=bounced)
    if (leader, isr, epochs) == (state.leader, state.isr, state.isr_epochs) and not bump:
        return None
    epoch = state.leader_epoch + 1 if bump else state.leader_epoch
    return L.PartitionState(leader, epoch, isr, controller_epoch, epochs)


def rebalance(
    view: CacheView, states: Mapping[Key, CachedState], live: set[int], percentage: int, controller_epoch: int
) -> list[Update]:
    """The automatic preferred-leader election (`auto.leader.rebalance.enable`): for every live
    broker whose share of preferred partitions it does not lead exceeds `percentage`, the
    writes that hand those partitions back to it.

    Decided from `states`, the very states the writes replace (the controller's own newer
    writes laid over its watched copy, `Controller._states`): a preferred replica leads only
    when it is in the ISR of the state its write checks, so one that has just been removed
    from the ISR (by a write the watch has not delivered yet) is never elected. `live`: the
    registered brokers not in controlled shutdown. A preferred replica that restarted since
    the ISR admitted it (`may_lead`) is not moved to either."""
    sessions = view.broker_sessions
    preferred: dict[int, list[Key]] = {}
    for topic, a in view.topics.items():
        if topic in view.deleting:
            continue
        for p, replicas in a.partitions.items():
            if replicas:
                preferred.setdefault(replicas[0], []).append((topic, p))
    updates: list[Update] = []
    for broker, parts in sorted(preferred.items()):
        if broker not in live:
            continue
        off = []
        for key in parts:
            cached = states.get(key)
            if cached is not None and cached.state.leader != broker and may_lead(cached.state, broker, live, sessions):
                off.append((key, cached))
        if parts and len(off) * 100 > percentage * len(parts):
            for (topic, p), cached in off:
                st = cached.state
                isr = current_isr(st, sessions)
                new = L.PartitionState(broker, st.leader_epoch + 1, isr, controller_epoch, stamp(isr, st, sessions))
                updates.append((topic, p, new, cached.version))
    return updates


def preferred_election(
    st: L.PartitionState,
    replicas: tuple[int, ...],
    live: set[int],
    sessions: Mapping[int, int],
    controller_epoch: int,
) -> L.PartitionState | None:
    """The state that makes the preferred (first) replica the leader, when it may lead
    (`may_lead`: live, in the ISR of `st` with its current registration); None when it cannot
    (or leads already)."""
    preferred = replicas[0] if replicas else -1
    if st.leader == preferred or not may_lead(st, preferred, live, sessions):
        return None
    isr = current_isr(st, sessions)
    return L.PartitionState(preferred, st.leader_epoch + 1, isr, controller_epoch, stamp(isr, st, sessions))


def reassignment_completions(
    view: CacheView, states: Mapping[Key, CachedState], live: set[int], controller_epoch: int
) -> dict[str, tuple[L.TopicAssignment, list[Update]]]:
    """Per topic, the assignment and partition states that complete its reassignments whose
    target replicas are all in the ISR: a target replica leads (the current leader when it is
    one, else the first live one in the ISR: `live` excludes brokers in controlled shutdown),
    the replicas being removed leave the assignment and the ISR. A partition none of whose
    target replicas can lead waits (logged), as Kafka's does; the others go on."""
    sessions = view.broker_sessions
    out: dict[str, tuple[L.TopicAssignment, list[Update]]] = {}
    for topic, a in view.topics.items():
        if topic in view.deleting or not (a.adding or a.removing):
            continue
        parts, adding, removing = dict(a.partitions), dict(a.adding), dict(a.removing)
        state_updates: list[Update] = []
        for p in sorted(set(adding) | set(removing)):
            cached = states.get((topic, p))
            if cached is None:
                continue
            st = cached.state
            target = tuple(r for r in parts[p] if r not in removing.get(p, ()))
            if any(r not in st.isr for r in target):
                continue  # new replicas still catching up
            leader, epoch = st.leader, st.leader_epoch
            if leader not in target or not may_lead(st, leader, live, sessions):
                eligible = [r for r in target if may_lead(st, r, live, sessions)]
                if not eligible:
                    log.warning(
                        "%s-%d: reassignment to %s waits: no target replica is alive and in the ISR %s",
                        topic,
                        p,
                        list(target),
                        list(st.isr),
                    )
                    continue
                leader, epoch = eligible[0], epoch + 1
            isr = tuple(r for r in current_isr(st, sessions) if r in target)
            new = L.PartitionState(leader, epoch, isr, controller_epoch, stamp(isr, st, sessions))
            state_updates.append((topic, p, new, cached.version))
            parts[p] = target
            adding.pop(p, None)
            removing.pop(p, None)
        if state_updates:
            out[topic] = (L.TopicAssignment(a.topic_id, parts, adding, removing), state_updates)
    return out


def controlled_shutdown_moves(
    view: CacheView, states: Mapping[Key, CachedState], broker: int, live: set[int], controller_epoch: int
) -> tuple[list[Update], list[Key]]:
    """For a broker shutting down: the writes that move its leadership to the next in-sync
    replica in assignment order (a new leader epoch) and take it out of the ISR of the
    partitions it follows; and the partitions it must keep leading (no other in-sync replica
    is live). `live` excludes every broker in controlled shutdown, this one included."""
    sessions = view.broker_sessions
    updates: list[Update] = []
    remaining: list[Key] = []
    for topic, a in view.topics.items():
        if topic in view.deleting:
            continue
        for p, replicas in a.partitions.items():
            cached = states.get((topic, p))
            if cached is None or broker not in replicas:
                continue
            st = cached.state
            if st.leader in stale_members(st, sessions):
                continue  # the reconcile step moves a restarted leader first
            if st.leader == broker:
                others = [r for r in replicas if r != broker and may_lead(st, r, live, sessions)]
                if not others:
                    remaining.append((topic, p))
                    continue
                isr = tuple(r for r in current_isr(st, sessions) if r != broker)
                new = L.PartitionState(others[0], st.leader_epoch + 1, isr, controller_epoch, stamp(isr, st, sessions))
                updates.append((topic, p, new, cached.version))
            elif broker in st.isr and len(st.isr) > 1:
                isr = tuple(r for r in current_isr(st, sessions) if r != broker)
                new = L.PartitionState(st.leader, st.leader_epoch, isr, controller_epoch, stamp(isr, st, sessions))
                updates.append((topic, p, new, cached.version))
    return updates, sorted(remaining)


def check_isr_change(
    sender: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: tuple[int, ...],
    isr_epochs: tuple[int, ...] | None,
    current: CachedState,
    replicas: tuple[int, ...],
    eligible: Mapping[int, int],
) -> int:
    """AlterPartition's rules for one partition, as Kafka's controller applies them: the error
    code to answer, or NONE to write `new_isr` (or, when it is the ISR already, to answer with
    the current state: a retried request whose answer was lost).

    `eligible`: the brokers that may be in an ISR, each with its broker epoch (registered, not
    in controlled shutdown: KIP-841). `isr_epochs` (AlterPartition v3, KIP-903): the broker
    epoch the leader knows for each member of `new_isr`; one that is not the member's current
    registration (a follower that restarted since the leader saw it fetch) makes the change
    INELIGIBLE_REPLICA; -1 is "unknown" and not checked, as in Kafka. So does a member of the
    current ISR admitted with an older registration than its current one (odradek's record of
    admitted epochs: it restarted; the reconcile step takes it out)."""
    st, version = current.state, current.version
    if leader_epoch > st.leader_epoch or partition_epoch > version:
        return ErrorCode.not_controller  # the leader knows a newer state than this controller
    if leader_epoch < st.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if sender != st.leader:
        return ErrorCode.invalid_request
    if new_isr == st.isr:
        return ErrorCode.none
    if partition_epoch < version:
        return ErrorCode.invalid_update_version
    if st.leader not in new_isr or any(r not in replicas for r in new_isr) or len(set(new_isr)) != len(new_isr):
        return ErrorCode.invalid_request
    epochs = isr_epochs if isr_epochs is not None else (-1,) * len(new_isr)
    for member, epoch in zip(new_isr, epochs, strict=True):
        if member not in eligible or (epoch != -1 and epoch != eligible[member]):
            return ErrorCode.ineligible_replica
        admitted = st.admitted_epoch(member)
        if admitted != -1 and admitted != eligible[member]:
            return ErrorCode.ineligible_replica  # kept from a registration before its restart
    return ErrorCode.none


def plan_reassignments(
    view: CacheView, moves: Mapping[Key, tuple[int, ...] | None]
) -> tuple[dict[Key, tuple[int, str | None]], dict[str, L.TopicAssignment]]:
    """AlterPartitionReassignments: (an error code and message per partition, the new assignment
    of each topic to write). A partition's assignment becomes target + old replicas (the new
    ones start copying the log as followers); None as target cancels a reassignment in
    progress (back to the replicas before it)."""
    out: dict[Key, tuple[int, str | None]] = {}
    by_topic: dict[str, dict[int, tuple[int, ...] | None]] = {}
    for (topic, p), target in moves.items():
        a = view.topics.get(topic)
        if a is None or p not in a.partitions or topic in view.deleting:
            out[(topic, p)] = (ErrorCode.unknown_topic_or_partition, "unknown partition")
        elif target is not None and (not target or len(set(target)) != len(target)):
            out[(topic, p)] = (ErrorCode.invalid_replica_assignment, "replicas must be distinct and not empty")
        elif target is not None and any(b not in view.brokers for b in target):
            out[(topic, p)] = (ErrorCode.invalid_replica_assignment, "a target replica is not a live broker")
        elif target is None and p not in a.adding and p not in a.removing:
            out[(topic, p)] = (ErrorCode.no_reassignment_in_progress, "no reassignment in progress")
        else:
            by_topic.setdefault(topic, {})[p] = target
            out[(topic, p)] = (ErrorCode.none, None)
    assignments: dict[str, L.TopicAssignment] = {}
    for topic, changes in by_topic.items():
        a = view.topics[topic]
        parts, adding, removing = dict(a.partitions), dict(a.adding), dict(a.removing)
        for p, target in changes.items():
            current = parts[p]
            original = tuple(r for r in current if r not in adding.get(p, ())) if p in adding else current
            if target is None:  # cancel: back to the replicas before the reassignment
                parts[p] = original
                adding.pop(p, None)
                removing.pop(p, None)
                continue
            parts[p] = tuple(target) + tuple(r for r in original if r not in target)
            add = tuple(r for r in target if r not in original)
            rem = tuple(r for r in original if r not in target)
            if add or rem:
                adding[p], removing[p] = add, rem
            else:
                adding.pop(p, None)
                removing.pop(p, None)
        assignments[topic] = L.TopicAssignment(a.topic_id, parts, adding, removing)
    return out, assignments


def unclean_election(
    st: L.PartitionState,
    replicas: tuple[int, ...],
    live: set[int],
    sessions: Mapping[int, int],
    controller_epoch: int,
) -> tuple[int, str | None, L.PartitionState | None]:
    """ElectLeaders(UNCLEAN) for one partition: (error code, message, the state to write). A
    leaderless partition gets its first replica that may lead cleanly (`may_lead`), else its
    first live replica alone (what only the others had is lost: docs/cluster.md)."""
    if st.leader >= 0 and st.leader in live:
        return ErrorCode.election_not_needed, "the partition has a leader", None
    alive = [r for r in replicas if r in live]
    if not alive:
        return ErrorCode.eligible_leaders_not_available, "no replica is alive", None
    in_sync = [r for r in alive if may_lead(st, r, live, sessions)]
    leader = (in_sync or alive)[0]
    isr = tuple(r for r in st.isr if may_lead(st, r, live, sessions)) if in_sync else (leader,)
    epochs = stamp(isr, st, sessions, fresh=() if in_sync else (leader,))
    return ErrorCode.none, None, L.PartitionState(leader, st.leader_epoch + 1, isr, controller_epoch, epochs)
