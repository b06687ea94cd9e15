"""The controller's decisions: pure functions from the cluster's state to the writes it needs.

No ZooKeeper, no event loop: each function takes what the controller knows (a `CacheView`
of the znodes, the partition states it decides from, which brokers are live) and returns
the partition states to write, each with the znode version (partition epoch) its write
checks. cluster/controller.py calls them and writes the result; tests call them directly.
"""

from __future__ import annotations

from collections.abc import Mapping

from odradek.cluster import zk_layout as L
from odradek.cluster.zk_cache import CachedState, CacheView

Key = tuple[str, int]  # (topic, partition)
# A partition state to write: (topic, partition, the new state, the znode version it replaces).
Update = tuple[str, int, L.PartitionState, int]


def decide(
    state: L.PartitionState,
    replicas: tuple[int, ...],
    live: set[int],
    restarted: set[int],
    *,
    unclean: bool,
) -> tuple[int, tuple[int, ...], bool]:
    """(leader, ISR, whether the leader epoch moves) a partition should have now."""
    leader, isr = state.leader, state.isr
    isr_live = tuple(b for b in isr if b in live)
    if leader >= 0 and leader in live and leader not in restarted:
        return leader, (isr_live or (leader,)), False
    candidates = [r for r in replicas if r in live and r in isr]
    if candidates:
        new = candidates[0]
        return new, isr_live, True
    if unclean:
        alive = [r for r in replicas if r in live]
        if alive:
            return alive[0], (alive[0],), True
    return -1, isr, leader != -1


def preferred_moves(view: CacheView, percentage: int) -> dict[Key, int]:
    """Partitions to hand back to their preferred (first) replica: for every broker whose share
    of not-led preferred partitions exceeds `percentage`, those whose preferred replica is
    alive and in sync."""
    live = set(view.brokers)
    preferred: dict[int, list[Key]] = {}
    for topic, a in view.topics.items():
        if topic in view.deleting:
            continue
        for p, replicas in a.partitions.items():
            if replicas:
                preferred.setdefault(replicas[0], []).append((topic, p))
    moves: dict[Key, int] = {}
    for broker, parts in preferred.items():
        if broker not in live:
            continue
        off = []
        for key in parts:
            cached = view.states.get(key)
            if cached is not None and cached.state.leader != broker and broker in cached.state.isr:
                off.append(key)
        if parts and len(off) * 100 > percentage * len(parts):
            for key in off:
                moves[key] = broker
    return moves


def preferred_leader_updates(
    view: CacheView, states: Mapping[Key, CachedState], moves: Mapping[Key, int], controller_epoch: int
) -> list[Update]:
    """The writes that hand each partition of `moves` to its preferred replica."""
    updates = []
    for (topic, p), leader in moves.items():
        cached = states.get((topic, p))
        if cached is None or cached.state.leader == leader or leader not in view.brokers:
            continue
        st = cached.state
        updates.append(
            (topic, p, L.PartitionState(leader, st.leader_epoch + 1, st.isr, controller_epoch), cached.version)
        )
    return updates


def reassignment_completions(
    view: CacheView, states: Mapping[Key, CachedState], controller_epoch: int
) -> dict[str, tuple[L.TopicAssignment, list[Update]]]:
    """Per topic, the assignment and partition states that complete its reassignments whose
    target replicas are all in the ISR: a target replica leads (the current leader when it is
    one), the replicas being removed leave the assignment and the ISR."""
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
            if leader not in target:
                leader = next(r for r in target if r in st.isr and r in view.brokers)
                epoch += 1
            isr = tuple(r for r in st.isr if r in target)
            state_updates.append((topic, p, L.PartitionState(leader, epoch, isr, controller_epoch), cached.version))
            parts[p] = target
            adding.pop(p, None)
            removing.pop(p, None)
        if state_updates:
            out[topic] = (L.TopicAssignment(a.topic_id, parts, adding, removing), state_updates)
    return out
