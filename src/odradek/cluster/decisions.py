"""The controller's decisions: pure functions from the cluster's state to the writes it needs.

No ZooKeeper, no event loop: each function takes what the controller knows (a `CacheView`
of the znodes, the partition states it decides from, which brokers are live) and returns
the partition states to write, each with the znode version (partition epoch) its write
checks. cluster/controller.py calls them and writes the result; tests call them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from odradek.cluster import zk_layout as L
from odradek.cluster.zk_cache import CachedState, CacheView

log = logging.getLogger("odradek.cluster.controller")

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
    registered brokers not in controlled shutdown."""
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
            if cached is not None and cached.state.leader != broker and broker in cached.state.isr:
                off.append((key, cached))
        if parts and len(off) * 100 > percentage * len(parts):
            for (topic, p), cached in off:
                st = cached.state
                new = L.PartitionState(broker, st.leader_epoch + 1, st.isr, controller_epoch)
                updates.append((topic, p, new, cached.version))
    return updates


def preferred_election(
    st: L.PartitionState, replicas: tuple[int, ...], live: set[int], controller_epoch: int
) -> L.PartitionState | None:
    """The state that makes the preferred (first) replica the leader, when it is live and in
    the ISR of `st`; None when it cannot lead (or leads already)."""
    preferred = replicas[0] if replicas else -1
    if st.leader == preferred or preferred not in live or preferred not in st.isr:
        return None
    return L.PartitionState(preferred, st.leader_epoch + 1, st.isr, controller_epoch)


def reassignment_completions(
    view: CacheView, states: Mapping[Key, CachedState], live: set[int], controller_epoch: int
) -> dict[str, tuple[L.TopicAssignment, list[Update]]]:
    """Per topic, the assignment and partition states that complete its reassignments whose
    target replicas are all in the ISR: a target replica leads (the current leader when it is
    one, else the first live one in the ISR: `live` excludes brokers in controlled shutdown),
    the replicas being removed leave the assignment and the ISR. A partition none of whose
    target replicas can lead waits (logged), as Kafka's does; the others go on."""
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
                eligible = [r for r in target if r in st.isr and r in live]
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
            isr = tuple(r for r in st.isr if r in target)
            state_updates.append((topic, p, L.PartitionState(leader, epoch, isr, controller_epoch), cached.version))
            parts[p] = target
            adding.pop(p, None)
            removing.pop(p, None)
        if state_updates:
            out[topic] = (L.TopicAssignment(a.topic_id, parts, adding, removing), state_updates)
    return out
