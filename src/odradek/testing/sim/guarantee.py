"""Which anomalies a failure beyond Kafka's guarantee explains.

Kafka's promise (acks=all, `min.insync.replicas`, no fsync: replication is the guarantee): an
acknowledged record survives as long as one in-sync replica keeps its log and stays alive. A
power cut of a replica while every other member of the ISR is down is beyond it: Kafka 3.9 in
ZooKeeper mode elects the last ISR member back, with what its disk kept, as odradek does
(docs/cluster.md, "what survives what"; Kafka 4.x in KRaft mode with eligible leader replicas,
KIP-966, removes a broker that registers again from every ISR and ELR and keeps the partition
without a leader until a replica that stayed up returns).

The rule, per broker elected (or resuming) as leader with its log below the partition's
committed end (history.ShortElection, recorded in run.py at every partition state ZooKeeper
records): beyond the guarantee when every other member of the partition's last ISR was down
at that moment, and the leader lost what it lacks in a power cut: at its last one before the
election, its log (its page cache) held everything committed now. Down is Kafka's own
definition of a broker not alive in ZooKeeper mode (docs/design.html, "Replication":
liveness is the ephemeral registration of its session; the guarantee holds "as long as there
is at least one in sync replica alive, at all times"): not registered, whether dead, paused
past its session, starting, or running but cut from ZooKeeper past its session. "The run had
a power cut" is not enough: an election of a broker back from a power cut while another
in-sync replica is registered stays an anomaly, and so does one of a broker that lacked
records before its power cut.

The anomalies that follow from such a loss, traced to its partition and time (`explains`):
the loss itself (`leader-without-acked`), the records it took (`lost`, `offset-changed`,
`consumed-then-lost` at offsets from the leader's log end, acknowledged or read before it),
transactions with records or markers on that partition from before it (`torn-txn`,
`hanging-txn`, `aborted-visible` read before it), `end-offset-backwards` across it, and the
consumer group's offsets among the offsets it rewrote (`commit-beyond-consumed`,
`group-skipped`). Every other kind, and any of these not traced so, stays an anomaly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.coordinator.codec import partition_for

OFFSETS, TXN_STATE = "__consumer_offsets", "__transaction_state"

if TYPE_CHECKING:
    from odradek.testing.sim.checker import Anomaly
    from odradek.testing.sim.cluster import SimCluster
    from odradek.testing.sim.history import History, ShortElection

# kinds whose records must lie at or above the loss's log end (the records it took)
_TAKEN = {"lost", "offset-changed", "consumed-then-lost"}
# kinds that follow from a lost record or commit marker of a transaction, sent or read before the loss
_TXN = {"torn-txn", "hanging-txn", "aborted-visible"}
# the group's offsets among those the loss rewrote
_GROUP = {"commit-beyond-consumed", "group-skipped"}


def log_ends(cluster: SimCluster, broker: int, topic: str) -> dict[tuple[str, int], int]:
    """Broker `broker`'s log end offsets now (what its page cache holds), of the workload's topic
    and the internal topics: taken as it goes down, to tell later what a power cut took."""
    out = {}
    for name in ("", OFFSETS, TXN_STATE):
        for pv in cluster.partitions(name or topic):
            end = cluster.log_end(broker, name or topic, pv.partition)
            if end is not None:
                out[(name, pv.partition)] = end
    return out


def member_state(cluster: SimCluster, broker: int) -> str:
    """How a member of the last ISR is at an election: "down (why)" when it is not alive as
    Kafka defines it in ZooKeeper mode (its registration, the ephemeral node of its session, is
    gone: docs/design.html, "Replication"), "registered" otherwise."""
    if broker in cluster.registered():
        return "registered"
    host = cluster.host(broker)
    if not host.alive:
        return "down (dead)"
    if host.node is not None and host.node.paused:
        return "down (paused past its session)"
    if not host.started:
        return "down (starting)"
    return "down (its session lost: running, cut from ZooKeeper or registering again)"


def _reach(h: History, e: ShortElection) -> int:
    """1 + the highest offset of the partition anyone acknowledged, read or was told of before the loss."""
    p, top = e.partition, e.acked_end
    for r in h.reads:
        if r.partition == p and r.t <= e.t:
            top = max(top, r.offset + 1)
    for x in h.end_offsets:
        if x.partition == p and x.t_recv <= e.t:
            top = max(top, x.offset)
    return top


def _record(h: History, kind: str, e: ShortElection, rec: tuple[int, int, float]) -> bool:
    """Whether one record an anomaly concerns, (partition, offset, when), is one loss `e` took."""
    p, o, when = rec
    if e.topic or p != e.partition:
        return False
    if kind in _TAKEN:
        return o >= e.log_end and when <= e.t
    if kind in _TXN:
        return when <= e.t
    return e.log_end <= o < _reach(h, e)  # _GROUP


def explains(h: History, losses: list[ShortElection], a: Anomaly) -> bool:
    """Whether anomaly `a` follows from the losses beyond the guarantee (`losses`)."""
    mine = [e for e in losses if not e.topic]  # the workload topic's
    if a.kind in ("leader-without-acked", "isr-without-acked"):
        return any(a.partition == e.partition and a.t == e.t for e in mine)
    if a.kind == "end-offset-backwards":
        return any(a.partition == e.partition and 0 <= a.since <= e.t <= a.t for e in mine)
    if a.kind == "commit-backwards":  # the group's committed offsets lost with __consumer_offsets
        return any(e.topic == OFFSETS and 0 <= a.since <= e.t <= a.t for e in losses)
    if a.kind in _TXN and a.txn and a.records:  # the coordinator's state lost with __transaction_state
        home = partition_for(a.txn, max(1, h.txn_state_partitions))
        if any(
            e.topic == TXN_STATE and e.partition == home and all(when <= e.t for _p, _o, when in a.records)
            for e in losses
        ):
            return True
    if a.kind in _TAKEN | _TXN | _GROUP and a.records:
        return all(any(_record(h, a.kind, e, rec) for e in mine) for rec in a.records)
    return False


def beyond_guarantee(h: History, anomalies: list[Anomaly]) -> tuple[list[Anomaly], list[Anomaly]]:
    """(the anomalies, those a loss beyond Kafka's guarantee explains)."""
    losses = [e for e in h.short_elections if e.beyond]
    kept: list[Anomaly] = []
    beyond: list[Anomaly] = []
    for a in anomalies:
        (beyond if losses and explains(h, losses, a) else kept).append(a)
    return kept, beyond
