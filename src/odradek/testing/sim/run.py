"""One seed, start to end: the cluster, the workload, the faults, healing, the final reading, the checks.

    result = run_seed(42)            # SimOptions() by default
    print(result.report())           # the schedule, the anomalies, the history around each

Phases, all in virtual time: brokers start and register; the topic is created (RF =
brokers, `min.insync.replicas=2`) and led with a full ISR; the workload and the faults run
for `duration` seconds; every fault still in effect heals (dead brokers restart, a
supervisor restarts one that fails to); the producers flush and stop; the cluster gets
`settle` seconds to have every partition led with a full ISR and no transaction left open;
then each partition's leader log is read from storage (the truth), fresh consumers read
everything (read_uncommitted and read_committed), the replicas are compared, and the checker
compares the history with all of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from odradek.client.aio import AIOAdmin, NewTopic
from odradek.cluster import zk_layout as L
from odradek.testing.sim.checker import Anomaly, Final, check
from odradek.testing.sim.cluster import SimCluster
from odradek.testing.sim.faults import Fault, FaultSpec, schedule
from odradek.testing.sim.guarantee import beyond_guarantee, member_state
from odradek.testing.sim.history import History
from odradek.testing.sim.logcap import captured_logs
from odradek.testing.sim.logs import final_read, read_log
from odradek.testing.sim.loop import simulated_world
from odradek.testing.sim.runner import FaultRunner
from odradek.testing.sim.workload import Workload, WorkloadSpec, client_config

_real_clock = time.perf_counter
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
log = logging.getLogger("odradek.sim")


@dataclass(frozen=True)
class SimOptions:
    brokers: int = 3
    duration: float = 30.0  # virtual seconds of workload and faults
    settle: float = 60.0  # at most this long, after healing, to be healthy again
    session_timeout_ms: int = 6000
    replica_lag_ms: int = 10000
    # segment.bytes of the internal topics (__consumer_offsets, __transaction_state): small, so
    # their logs roll (flush at roll, recovery points, loading across segments); the workload's
    # topic has its own (WorkloadSpec.segment_bytes)
    internal_segment_bytes: int | None = None
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    faults: FaultSpec = field(default_factory=FaultSpec)
    overrides: tuple[tuple[str, str], ...] = ()  # more broker settings
    keep_trace: bool = False

    def broker_overrides(self) -> dict[str, str]:
        rf = str(self.brokers)
        return {
            "zookeeper.session.timeout.ms": str(self.session_timeout_ms),
            "replica.lag.time.max.ms": str(self.replica_lag_ms),
            "default.replication.factor": rf,
            "min.insync.replicas": "2",
            "num.partitions": str(self.workload.partitions),
            "auto.create.topics.enable": "false",
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.num.partitions": "2",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "2",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
            "group.initial.rebalance.delay.ms": "0",
            "leader.imbalance.check.interval.seconds": "5",
            "controlled.shutdown.retry.backoff.ms": "200",
            "log.flush.offset.checkpoint.interval.ms": "5000",
            **(
                {
                    "offsets.topic.segment.bytes": str(self.internal_segment_bytes),
                    "transaction.state.log.segment.bytes": str(self.internal_segment_bytes),
                }
                if self.internal_segment_bytes
                else {}
            ),
            **dict(self.overrides),
        }


# Which anomalies' moments the report shows first: those nearest a root cause.
_ROOT_FIRST = {
    "leader-without-acked": 0,
    "isr-without-acked": 0,
    "replica-divergence": 1,
    "duplicate": 2,
    "reordered": 2,
    "end-offset-backwards": 3,
    "aborted-visible": 3,
    "unavailable": 4,
}


@dataclass
class Result:
    seed: int
    anomalies: list[Anomaly]
    digest: str
    schedule: list[Fault]
    stats: dict[str, Any]
    virtual: float
    wall: float
    history: History | None = None
    errors: list[str] = field(default_factory=list)
    trace: list[str] | None = None
    logs: list[str] = field(default_factory=list)  # the first log lines at the level asked (warnings by default)
    templates: dict[str, int] = field(default_factory=dict)  # every message logged, unformatted: count
    notes: dict[str, Any] = field(default_factory=dict)  # what scripted faults recorded (FaultRunner.notes)
    # what a failure beyond Kafka's guarantee explains (guarantee.py): not anomalies, reported apart
    beyond: list[Anomaly] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def kinds(self) -> list[str]:
        return sorted({a.kind for a in self.anomalies})

    def beyond_kinds(self) -> list[str]:
        return sorted({a.kind for a in self.beyond})

    def summary(self) -> str:
        state = "ok" if self.ok else "ANOMALIES " + ",".join(self.kinds())
        if self.beyond:
            state += " (lost by a failure beyond Kafka's guarantee: " + ",".join(self.beyond_kinds()) + ")"
        faults = ", ".join(f.kind for f in self.schedule) or "none"
        return (
            f"seed {self.seed}: {state} ({len(self.schedule)} faults: {faults}; {self.stats.get('acked', 0)} acked, "
            f"{self.stats.get('committed', 0)}/{self.stats.get('txns', 0)} txns committed; "
            f"{self.virtual:.0f} s simulated in {self.wall:.2f} s; digest {self.digest[:12]})"
        )

    def report(self, around: float = 3.0) -> str:
        lines = [self.summary(), "", "faults:"]
        lines += [f"  {f}" for f in self.schedule] or ["  none"]
        if self.anomalies:
            lines += ["", "anomalies:"]
            for a in self.anomalies[:20]:
                lines.append(f"  {a}")
            if len(self.anomalies) > 20:
                lines.append(f"  ... {len(self.anomalies) - 20} more")
            if self.history is not None:
                shown: set[float] = set()
                first = sorted(self.anomalies, key=lambda a: (_ROOT_FIRST.get(a.kind, 9), a.t))
                for a in first[:3]:
                    for t in (a.since, a.t):
                        if t < 0 or round(t, 1) in shown:
                            continue
                        shown.add(round(t, 1))
                        lines += ["", f"history around {t:.3f} ({a.kind}):"]
                        lines += [f"  {line}" for line in self.history.around(t, around, around)]
        if self.beyond and self.history is not None:
            lines += ["", "lost by a failure beyond Kafka's guarantee (guarantee.py):"]
            lines += [f"  {e}" for e in self.history.short_elections]
            lines += [f"  {a}" for a in self.beyond[:10]]
            if len(self.beyond) > 10:
                lines.append(f"  ... {len(self.beyond) - 10} more")
        if self.errors:
            lines += ["", f"unhandled errors on the loop ({len(self.errors)}):"]
            lines += [f"  {e}" for e in self.errors[:10]]
        if self.logs and not self.ok:
            lines += ["", f"errors logged ({self.stats.get('logged', len(self.logs))}; the first ones):"]
            lines += [f"  {line}" for line in self.logs[:10]]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        from odradek.testing.sim.known import explain

        known, unexplained = explain(self)
        return {
            "seed": self.seed,
            "ok": self.ok,
            "kinds": self.kinds(),
            "known": known,
            "unexplained": sorted({a.kind for a in unexplained}),
            "anomalies": [str(a) for a in self.anomalies[:20]],
            "beyond": self.beyond_kinds(),
            "losses": [str(e) for e in self.history.short_elections] if self.history is not None else [],
            "logs": self.logs[:5],
            "templates": {k: v for k, v in self.templates.items() if k.split(": ", 1)[0] != "odradek.sim"},
            "digest": self.digest,
            "faults": [f.kind for f in self.schedule],
            "stats": self.stats,
            "virtual": round(self.virtual, 3),
            "wall": round(self.wall, 4),
        }


def _tmp_root() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_seed(
    seed: int,
    opts: SimOptions | None = None,
    faults: list[Fault] | None = None,
    *,
    log_level: int = logging.WARNING,
    echo_logs: bool = False,
) -> Result:
    """Run one seed (with `faults` instead of the seed's own schedule, when given). Logs at
    `log_level` and above are kept in the result (`echo_logs`: printed as they come)."""
    opts = opts or SimOptions()
    directory = tempfile.mkdtemp(prefix=f"odradek-sim-{seed}-", dir=_tmp_root())
    cluster = SimCluster(
        seed, directory, brokers=opts.brokers, overrides=opts.broker_overrides(), keep_trace=opts.keep_trace
    )
    loop = cluster.loop
    history = History(cluster.trace, lambda: loop.elapsed)
    topic = opts.workload.topic

    reported: set[tuple[int, int, int, bool]] = set()
    last_isr: dict[int, tuple[int, ...]] = {}
    history.txn_state_partitions = int(opts.broker_overrides().get("transaction.state.log.num.partitions", "50"))
    # the internal topics' partitions: the highest high watermark seen (what is committed), and when
    committed: dict[tuple[str, int], tuple[int, float]] = {}
    internal_isr: dict[tuple[str, int], tuple[int, ...]] = {}
    internal_reported: set[tuple[str, int, int]] = set()

    def sample_internal() -> None:
        for name in INTERNAL_TOPICS:
            for pv in cluster.partitions(name):
                lg = cluster.log_of(pv.leader, name, pv.partition) if pv.leader >= 0 else None
                key = (name, pv.partition)
                if lg is not None and lg.high_watermark > committed.get(key, (0, 0.0))[0]:
                    committed[key] = (lg.high_watermark, loop.elapsed)

    def on_internal_state(t: str, p: int, st: Any) -> None:
        """An internal topic's leader with its log below what was committed there: as on_state's
        short election, with the highest high watermark seen as the committed end."""
        key = (t, p)
        last = internal_isr.get(key, st.isr)
        internal_isr[key] = st.isr
        hw, seen = committed.get(key, (0, 0.0))
        end = cluster.log_end(st.leader, t, p) if st.leader >= 0 else None
        if end is None or end >= hw or (t, p, st.leader_epoch) in internal_reported:
            return
        internal_reported.add((t, p, st.leader_epoch))
        others = {m: member_state(cluster, m) for m in last if m != st.leader}
        e = history.short_election(p, st.leader, st.leader_epoch, end, tuple(last), others, (t, hw, seen))
        if e.beyond:
            committed[key] = (end, loop.elapsed)

    def on_state(t: str, p: int, st: Any) -> None:
        """The leader, and every in-sync replica, must hold every record acknowledged so far
        (acks=all: the high watermark passed it, and it is the lowest end of the ISR)."""
        if t in INTERNAL_TOPICS:
            sample_internal()
            on_internal_state(t, p, st)
            return
        if t != topic:
            return
        sample_internal()
        last = last_isr.get(p, st.isr)  # the partition's ISR before this state
        last_isr[p] = st.isr
        if st.leader < 0 or not history.committed_end(p):
            return
        for b in (st.leader, *st.isr):
            acked = history.acked_end.get(p, 0)
            end = cluster.log_end(b, t, p)
            lead = b == st.leader
            key = (p, b, st.leader_epoch, lead)
            # a leader short of any acknowledged record (transactional ones too): the moment a
            # loss begins; beyond Kafka's guarantee or not (guarantee.py)
            short = lead and end is not None and end < history.committed_end(p)
            if end is None or key in reported or (end >= acked and not short):
                continue
            reported.add(key)
            if short:
                others = {m: member_state(cluster, m) for m in last if m != b}
                history.short_election(p, b, st.leader_epoch, end, tuple(last), others)
            if end >= acked:
                continue
            role = f"leads (epoch {st.leader_epoch})" if lead else f"is in the ISR of leader b{st.leader}"
            kind = "leader-without-acked" if lead else "isr-without-acked"
            history.violation(
                p, kind, f"b{b} {role} with its log ending at {end}, below offset {acked - 1} acknowledged"
            )

    def on_register(broker: int) -> None:
        """A broker back (a new session) resumes leading what ZooKeeper says it leads, unless the
        state records it was admitted with its previous registration (broker epoch): it then
        leads nothing until the controller writes a new state (broker/partition.py)."""
        registration = cluster.zk.nodes.get(L.broker_path(broker))
        for pv in cluster.partitions(topic):
            znode = cluster.zk.nodes.get(L.partition_state_path(topic, pv.partition))
            admitted = L.decode_partition_state(topic, pv.partition, znode.data).admitted_epoch(broker) if znode else -1
            if pv.leader == broker and (admitted == -1 or registration is None or admitted == registration.czxid):
                on_state(topic, pv.partition, pv)

    cluster.follow(history.note, on_state, on_register)
    history.on_client_ack = sample_internal
    plan = faults if faults is not None else schedule(seed, opts.faults, opts.brokers, opts.workload.partitions)
    started = _real_clock()
    asyncio.set_event_loop(loop)
    try:
        with simulated_world(loop, seed), captured_logs(lambda: loop.elapsed, log_level, echo_logs) as logs:
            final = loop.run_until_complete(_scenario(cluster, history, plan, opts, seed))
        errors = list(loop.errors)
    finally:
        asyncio.set_event_loop(None)
        cluster.teardown()
    anomalies, beyond = beyond_guarantee(history, check(history, final) + _internal_errors(logs.lines))
    stats: dict[str, Any] = dict(history.stats())
    stats["handles"] = loop.handles_run
    stats["delivered_bytes"] = cluster.net.delivered_bytes
    stats["sessions_expired"] = cluster.zk.expired_sessions
    stats["logged"] = logs.count
    stats["applied"] = final.applied
    return Result(
        seed,
        anomalies,
        cluster.trace.digest(),
        plan,
        stats,
        final.end,
        _real_clock() - started,
        history,
        errors,
        cluster.trace.lines,
        logs.lines,
        dict(logs.templates),
        final.notes,
        beyond,
    )


def _internal_errors(lines: list[str]) -> list[Anomaly]:
    """A handler that raised: the broker hung up on its client instead of answering an error
    code (every request must get a Kafka error code or a clear refusal)."""
    out = []
    for line in lines:
        if " handler failed " in line:
            t, node = line.split()[:2]
            out.append(Anomaly("internal-error", float(t), f"{node}: {line.split(': ', 1)[1]}"))
    return out


async def _until(cluster: SimCluster, condition: Any, timeout: float) -> bool:
    deadline = cluster.loop.time() + timeout
    while not condition():
        if cluster.loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _create_topic(cluster: SimCluster, spec: WorkloadSpec, rf: int) -> None:
    admin = AIOAdmin(client_config(cluster, "admin-setup"))
    await admin.start()
    try:
        configs = {"min.insync.replicas": "2"}
        if spec.segment_bytes:
            configs["segment.bytes"] = str(spec.segment_bytes)
        await admin.create_topics([NewTopic(spec.topic, spec.partitions, rf, configs)])
    finally:
        await admin.close()


async def _scenario(cluster: SimCluster, h: History, plan: list[Fault], opts: SimOptions, seed: int) -> Final:
    loop = cluster.loop
    spec = opts.workload
    topic = spec.topic
    for host in cluster.hosts.values():
        host.start()
    everyone = set(cluster.hosts)
    if not await _until(
        cluster,
        lambda: (
            all(x.running for x in cluster.hosts.values())
            and cluster.registered() == everyone
            and cluster.controller() >= 0
        ),
        60,
    ):
        errors = [f"b{b}: {x.start_error!r}" for b, x in cluster.hosts.items() if x.start_error is not None]
        return Final(loop.elapsed, unhealthy=[f"the cluster did not start: {errors or cluster.unhealthy([])}"])
    await cluster.spawn(cluster.client_node("admin-setup"), _create_topic(cluster, spec, opts.brokers))
    problems = await cluster.wait_healthy([topic], 30)
    if problems:
        return Final(loop.elapsed, unhealthy=[f"the new topic is not healthy: {problems}"])
    h.event("sim", f"cluster up, topic {topic} created; {len(plan)} faults to come")

    runner = FaultRunner(cluster, h, topic, opts.session_timeout_ms / 1000)
    workload = Workload(cluster, h, spec, seed)
    workload.start()
    runner.start(plan, loop.elapsed)
    await asyncio.sleep(opts.duration)
    runner.heal_all()
    healed = loop.elapsed
    supervisor = asyncio.ensure_future(runner.supervise())
    try:
        await workload.stop(90)
        h.event("sim", "workload stopped")
        unhealthy = await cluster.wait_healthy([topic], opts.settle)
        if not unhealthy:
            # quiet: nothing open, every replica at the leader's end, the high watermark there too
            await _until(cluster, lambda: _quiet(cluster, topic, spec.partitions), 30)
        final = Final(loop.elapsed, healed, unhealthy=unhealthy, applied=dict(runner.applied), notes=runner.notes)
        await _read_final(cluster, h, final, topic, spec.partitions, spec.group_members)
        return final
    finally:
        supervisor.cancel()


def _leader_log(cluster: SimCluster, topic: str, p: int):  # noqa: ANN202 - storage.Log | None
    for pv in cluster.partitions(topic):
        if pv.partition == p and pv.leader >= 0:
            host = cluster.hosts[pv.leader]
            if host.running and host.broker is not None and host.broker.log_manager is not None:
                return host.broker.log_manager.get_log(topic, p)
    return None


def _at(records: list, i: int) -> object:
    return records[i] if i < len(records) else "the end"


def _quiet(cluster: SimCluster, topic: str, partitions: int) -> bool:
    views = {pv.partition: pv for pv in cluster.partitions(topic)}
    for p in range(partitions):
        lg = _leader_log(cluster, topic, p)
        if lg is None or lg.last_stable_offset < lg.high_watermark or lg.high_watermark < lg.log_end_offset:
            return False
        pv = views.get(p)
        if pv is None:
            return False
        for b in pv.isr:
            other = cluster.log_of(b, topic, p)
            if other is None or (other.log_end_offset, other.high_watermark) != (lg.log_end_offset, lg.high_watermark):
                return False
    return True


async def _read_final(
    cluster: SimCluster, h: History, final: Final, topic: str, partitions: int, group_members: int
) -> None:
    for p in range(partitions):
        lg = _leader_log(cluster, topic, p)
        if lg is None:
            final.read_errors.append(f"p{p}: no running leader to read the log from")
            continue
        hw = lg.high_watermark
        final.high_watermarks[p] = hw
        final.logs[p] = truth = read_log(lg, hw)
        pv = next(pv for pv in cluster.partitions(topic) if pv.partition == p)
        leader = pv.leader
        for b, host in cluster.hosts.items():
            # in-sync replicas only: one out of the ISR may still hold what it has to truncate
            if b == leader or b not in pv.isr or not host.running or host.broker is None:
                continue
            if host.broker.log_manager is None:
                continue
            other = host.broker.log_manager.get_log(topic, p)
            if other is None:
                continue
            mine = read_log(other, min(hw, other.log_end_offset))
            if mine != truth[: len(mine)] or (other.log_end_offset >= hw and len(mine) != len(truth)):
                first = next((i for i, (a, b2) in enumerate(zip(truth, mine)) if a != b2), min(len(mine), len(truth)))
                final.divergence.append(
                    (
                        p,
                        f"b{b} differs from leader b{leader} below HW {hw} from record #{first}: "
                        f"{_at(mine, first)} vs {_at(truth, first)}",
                    )
                )
    if group_members:
        from odradek.testing.sim.groups import final_committed

        try:
            await cluster.spawn(cluster.client_node("final-group"), final_committed(cluster, h, topic, partitions))
        except Exception as e:  # the group's offsets could not be read
            final.read_errors.append(f"the group's committed offsets: {e!r}")
    for committed in (False, True):
        node = cluster.client_node("final-rc" if committed else "final-ru")
        try:
            view = await cluster.spawn(node, final_read(cluster, topic, partitions, committed, 30))
        except Exception as e:  # the clients could not read what the cluster holds
            final.read_errors.append(f"{'read_committed' if committed else 'read_uncommitted'}: {e!r}")
            continue
        if committed:
            final.read_committed = view
        else:
            final.read_uncommitted = view
    final.end = cluster.loop.elapsed
