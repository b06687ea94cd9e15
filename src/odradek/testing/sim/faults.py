"""The faults of a run: a schedule drawn from the seed, and the runner that applies and heals them.

Kinds (`KINDS`, with their weights in a draw):
- `kill`: kill -9 of a broker, restarted after the fault's duration;
- `leader-kill`: the same, of the current leader of a partition;
- `failover`: two quick successive failovers: the leader of a partition killed, then, once
  a new leader is elected, that one too; both restarted later;
- `power`: a power cut of a broker's host (its unfsynced writes lost, its connections
  silent), restarted later; at most one per seed (a power cut of two replicas at once may
  lose acknowledged writes in Kafka too: replication, not fsync, is the guarantee);
- `bounce`: a clean stop (SIGTERM: controlled shutdown) and a restart;
- `pause`: SIGSTOP, often past the ZooKeeper session timeout, then SIGCONT;
- `partition`: two brokers cut from each other both ways; `oneway`: one way;
- `isolate`: a broker cut from every other broker (clients and ZooKeeper still reach it);
- `zk-cut`: a broker cut from ZooKeeper only (both ways, or one way);
- `slow-link`: a broker's link to ZooKeeper, or to another broker, slow (100-800 ms each way):
  watch events and replies come late;
- `reset`: every connection between two brokers reset;
- `clock-step`: a broker's wall clock jumps (seconds to two hours, either way);
- `drift`: a broker's wall clock runs fast or slow from now on;
- `slow-disk`: a broker's thread work (fsync, recovery, checkpoints) slowed 10-1000 times;
- `config`: a topic config changed under load: `max.message.bytes` lowered, a
  `message.timestamp.*` bound set, `cleanup.policy=compact`;
- `reassign`: a partition's replicas reordered (a new preferred leader), or one replica
  moved out and back in later (the new replica copies the log from the start);
- `elect`: a preferred-leader election of every partition.
Clock steps, drift and config changes are never undone; everything else heals after its
duration, and `heal_all` heals what is still in effect when the workload ends.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from odradek.client.aio import AIOAdmin
from odradek.testing.sim.cluster import SimCluster
from odradek.testing.sim.history import History
from odradek.testing.sim.zk import ZK

KINDS: dict[str, int] = {
    "kill": 3,
    "leader-kill": 3,
    "failover": 2,
    "power": 2,
    "bounce": 1,
    "pause": 3,
    "partition": 2,
    "oneway": 2,
    "isolate": 2,
    "zk-cut": 2,
    "slow-link": 2,
    "reset": 1,
    "clock-step": 1,
    "drift": 1,
    "slow-disk": 1,
    "config": 2,
    "reassign": 2,
    "elect": 1,
}
ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS = 43, 45


@dataclass
class Fault:
    at: float
    kind: str
    brokers: tuple[int, ...] = ()
    duration: float = 0.0
    arg: Any = None
    partition: int = -1
    # instead of `brokers`, named when the fault starts: "leader" or "preferred" (first replica)
    # of `partition`, or "controller"
    target: str = ""

    def __str__(self) -> str:
        parts = [f"{self.at:7.2f}s {self.kind}"]
        if self.brokers:
            parts.append("b" + ",b".join(str(b) for b in self.brokers))
        if self.target:
            parts.append(f"the {self.target}" + (f" of p{self.partition}" if self.target != "controller" else ""))
        elif self.partition >= 0:
            parts.append(f"p{self.partition}")
        if self.arg is not None:
            parts.append(str(self.arg))
        if self.duration:
            parts.append(f"for {self.duration:.1f}s")
        return " ".join(parts)


@dataclass(frozen=True)
class FaultSpec:
    kinds: tuple[str, ...] = tuple(KINDS)
    counts: tuple[int, ...] = (1, 2, 2, 3, 3, 4)  # how many faults a seed draws from
    window: tuple[float, float] = (2.0, 30.0)  # when they start (virtual seconds into the workload)


def schedule(seed: int, spec: FaultSpec, brokers: int, partitions: int) -> list[Fault]:
    rng = random.Random(f"faults-{seed}")
    kinds = [k for k in spec.kinds if k in KINDS]
    weights = [KINDS[k] for k in kinds]
    ids = list(range(1, brokers + 1))
    out: list[Fault] = []
    powered = False
    for _ in range(rng.choice(spec.counts)):
        kind = rng.choices(kinds, weights)[0]
        if kind == "power" and powered:
            kind = "kill"
        powered |= kind == "power"
        at = round(rng.uniform(*spec.window), 3)
        duration = round(rng.choice([rng.uniform(0.5, 3), rng.uniform(3, 9), rng.uniform(9, 20)]), 3)
        b = rng.choice(ids)
        other = rng.choice([x for x in ids if x != b]) if brokers > 1 else b
        p = rng.randrange(partitions)
        f = Fault(at, kind, (b,), duration)
        if kind in ("leader-kill", "failover"):
            f.brokers, f.partition, f.target = (), p, "leader"
            if kind == "failover":
                f.duration = max(duration, 15.0)
        elif kind in ("partition", "oneway", "reset"):
            f.brokers = (b, other)
            if kind == "reset":
                f.duration = 0.0
        elif kind == "zk-cut":
            f.arg = rng.choice(["both", "both", "to-zk", "from-zk"])
        elif kind == "slow-link":
            f.brokers = (b,) if rng.random() < 0.6 else (b, other)
            f.arg = rng.choice([0.1, 0.3, 0.8])
        elif kind == "clock-step":
            f.arg, f.duration = rng.choice([1, 1, -1]) * rng.choice([2, 30, 600, 7200]), 0.0
        elif kind == "drift":
            f.arg, f.duration = round(rng.choice([1, -1]) * rng.choice([0.001, 0.01, 0.05]), 4), 0.0
        elif kind == "slow-disk":
            f.arg = rng.choice([10, 100, 1000])
        elif kind == "config":
            f.brokers, f.duration = (), 0.0
            f.arg = rng.choice(
                [
                    ("max.message.bytes", rng.choice(["150", "300", "1000"])),
                    ("message.timestamp.after.max.ms", rng.choice(["1000", "60000"])),
                    ("message.timestamp.before.max.ms", rng.choice(["1000", "60000"])),
                    ("cleanup.policy", "compact"),
                ]
            )
        elif kind == "reassign":
            f.brokers, f.partition = (), p
            f.arg = rng.choice(["rotate", "move-out-and-back"])
        elif kind == "elect":
            f.brokers, f.duration = (), 0.0
        out.append(f)
    out.sort(key=lambda f: f.at)
    return out


@dataclass
class _State:
    down: dict[int, set[int]] = field(default_factory=dict)  # broker -> faults keeping it down
    paused: dict[int, set[int]] = field(default_factory=dict)
    cuts: Counter[tuple[str, str]] = field(default_factory=Counter)
    slow: dict[int, set[int]] = field(default_factory=dict)


class FaultRunner:
    def __init__(self, cluster: SimCluster, history: History, topic: str, session_timeout_s: float) -> None:
        self.c = cluster
        self.h = history
        self.topic = topic
        self.session_timeout_s = session_timeout_s
        self.s = _State()
        self.tasks: list[asyncio.Task[None]] = []
        self.healed = False
        self._admin: AIOAdmin | None = None
        self.applied: Counter[str] = Counter()

    def start(self, faults: list[Fault], at: float) -> None:
        for i, f in enumerate(faults):
            self.tasks.append(asyncio.ensure_future(self._run(i, f, at)))

    def event(self, text: str) -> None:
        self.h.event("faults", text)

    async def _run(self, fid: int, f: Fault, base: float) -> None:
        loop = self.c.loop
        await asyncio.sleep(max(0.0, base + f.at - loop.elapsed))
        try:
            await self._apply(fid, f)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a fault that could not be applied is not an anomaly of the cluster
            self.event(f"{f.kind} failed: {e!r}")

    # ------------------------------------------------------------------ primitives
    def _down(self, b: int, fid: int, *, power: bool = False) -> None:
        host = self.c.host(b)
        keeping = self.s.down.setdefault(b, set())
        if power:
            if host.alive:
                host.kill(power=True)
            else:
                host.disk.crash()
                self.c.net.down.add(host.name)
        elif host.alive:
            host.kill()
        keeping.add(fid)

    def _up(self, b: int, fid: int) -> None:
        keeping = self.s.down.get(b, set())
        keeping.discard(fid)
        host = self.c.host(b)
        if not keeping and not host.alive and not self.healed:
            host.start()
            self.event(f"b{b} restarted")

    def _cut(self, a: str, b: str) -> None:
        self.s.cuts[(a, b)] += 1
        self.c.net.cut_link(a, b, both=False)

    def _uncut(self, a: str, b: str) -> None:
        self.s.cuts[(a, b)] -= 1
        if self.s.cuts[(a, b)] <= 0:
            del self.s.cuts[(a, b)]
            self.c.net.uncut(a, b)

    def _resolve(self, f: Fault) -> Fault:
        """The fault with its target broker named, now."""
        if not f.target:
            return f
        if f.target == "controller":
            b = self.c.controller()
        elif f.target == "preferred":
            b = next((pv.replicas[0] for pv in self.c.partitions(self.topic) if pv.partition == f.partition), -1)
        else:
            b = self.leader_of(f.partition)
        if b < 0:
            raise RuntimeError(f"no {f.target} to target")
        return Fault(f.at, f.kind, (b, *f.brokers), f.duration, f.arg, f.partition)

    def leader_of(self, p: int) -> int:
        for pv in self.c.partitions(self.topic):
            if pv.partition == p:
                return pv.leader
        return -1

    async def admin(self) -> AIOAdmin:
        if self._admin is None:
            from odradek.testing.sim.workload import client_config

            node = self.c.client_node("admin")
            self._admin = AIOAdmin(client_config(self.c, "admin"))
            await self.c.spawn(node, self._admin.start())
        return self._admin

    async def _as_admin(self, coro: Any) -> Any:
        return await self.c.spawn(self.c.client_node("admin"), coro)

    # ------------------------------------------------------------------ faults
    async def _apply(self, fid: int, f: Fault) -> None:
        c = self.c
        kind = f.kind
        if kind != "failover":
            f = self._resolve(f)
        self.applied[f.kind] += 1
        if kind in ("kill", "power", "leader-kill"):
            b = f.brokers[0]
            self.event(f"{'power cut of' if kind == 'power' else 'kill -9'} b{b} ({f})")
            self._down(b, fid, power=kind == "power")
            await asyncio.sleep(f.duration)
            self._up(b, fid)
        elif kind == "failover":
            first = self.leader_of(f.partition)
            if first < 0:
                self.event(f"failover: p{f.partition} has no leader")
                return
            self.event(f"failover of p{f.partition}: kill -9 its leader b{first}")
            self._down(first, fid)
            started = c.loop.elapsed
            second = -1
            while c.loop.elapsed - started < self.session_timeout_s * 3:
                await asyncio.sleep(0.1)
                second = self.leader_of(f.partition)
                if second >= 0 and second != first:
                    break
            if second >= 0 and second != first:
                await asyncio.sleep(random.Random(f"{fid}-{f.at}").uniform(0.05, 1.0))
                self.event(f"failover of p{f.partition}: kill -9 its new leader b{second}")
                self._down(second, fid)
            await asyncio.sleep(max(0.0, f.duration - (c.loop.elapsed - started)))
            self._up(first, fid)
            if second >= 0 and second != first:
                await asyncio.sleep(random.Random(f"{fid}").uniform(0.5, 5))
                self._up(second, fid)
        elif kind == "bounce":
            b = f.brokers[0]
            host = c.host(b)
            if not host.running:
                return
            self.event(f"SIGTERM b{b}")
            self.s.down.setdefault(b, set()).add(fid)
            await host.stop()
            self.event(f"b{b} stopped")
            await asyncio.sleep(f.duration)
            self._up(b, fid)
        elif kind == "pause":
            b = (
                f.brokers[0]
                if f.brokers
                else self.c.controller()
                if f.arg == "controller"
                else self.leader_of(f.partition)
            )
            if b < 0:
                return
            self.event(f"SIGSTOP b{b} for {f.duration:.1f}s")
            self.s.paused.setdefault(b, set()).add(fid)
            c.host(b).pause()
            await asyncio.sleep(f.duration)
            keeping = self.s.paused[b]
            keeping.discard(fid)
            if not keeping:
                c.host(b).resume()
                self.event(f"SIGCONT b{b}")
        elif kind in ("partition", "oneway", "isolate", "zk-cut"):
            pairs = self._pairs(f)
            self.event(f"cut {', '.join(f'{x}>{y}' for x, y in pairs)} for {f.duration:.1f}s")
            for x, y in pairs:
                self._cut(x, y)
            await asyncio.sleep(f.duration)
            for x, y in pairs:
                self._uncut(x, y)
            self.event(f"healed {', '.join(f'{x}>{y}' for x, y in pairs)}")
        elif kind == "slow-link":
            a = f"b{f.brokers[0]}"
            z = f"b{f.brokers[1]}" if len(f.brokers) > 1 else ZK
            self.event(f"link {a}<>{z} slow ({f.arg * 1000:.0f} ms each way) for {f.duration:.1f}s")
            c.net.set_latency(a, z, f.arg)
            c.net.set_latency(z, a, f.arg)
            await asyncio.sleep(f.duration)
            c.net.set_latency(a, z, None)
            c.net.set_latency(z, a, None)
            self.event(f"link {a}<>{z} back to normal")
        elif kind == "reset":
            one, two = (f"b{x}" for x in f.brokers)
            n = c.net.reset_connections(one, two)
            self.event(f"reset {n} connections between {one} and {two}")
        elif kind == "clock-step":
            b = f.brokers[0]
            c.host(b).step_clock(f.arg)
            self.event(f"b{b}'s clock steps {f.arg:+d} s")
        elif kind == "drift":
            b = f.brokers[0]
            c.host(b).set_drift(f.arg)
            self.event(f"b{b}'s clock drifts {f.arg:+.3f} s/s")
        elif kind == "slow-disk":
            b = f.brokers[0]
            self.s.slow.setdefault(b, set()).add(fid)
            c.host(b).set_slow_io(f.arg)
            self.event(f"b{b}'s disk {f.arg}x slower for {f.duration:.1f}s")
            await asyncio.sleep(f.duration)
            self.s.slow[b].discard(fid)
            if not self.s.slow[b]:
                c.host(b).set_slow_io(1.0)
        elif kind == "config":
            key, value = f.arg
            admin = await self.admin()
            self.event(f"topic config {key}={value}")
            await self._as_admin(admin.incremental_alter_configs({("topic", self.topic): {key: value}}))
            self.event(f"topic config {key}={value} done")
        elif kind == "elect":
            await self._elect()
        elif kind == "reassign":
            await self._reassign(f)

    def _pairs(self, f: Fault) -> list[tuple[str, str]]:
        b = f"b{f.brokers[0]}"
        if f.kind == "partition":
            o = f"b{f.brokers[1]}"
            return [(b, o), (o, b)]
        if f.kind == "oneway":
            return [(b, f"b{f.brokers[1]}")]
        if f.kind == "isolate":
            others = [h.name for h in self.c.hosts.values() if h.name != b]
            return [(b, o) for o in others] + [(o, b) for o in others]
        if f.arg == "to-zk":
            return [(b, ZK)]
        if f.arg == "from-zk":
            return [(ZK, b)]
        return [(b, ZK), (ZK, b)]

    async def _elect(self) -> None:
        admin = await self.admin()
        parts = [pv.partition for pv in self.c.partitions(self.topic)]
        self.event("preferred leader election")

        async def elect() -> Any:
            controller = await admin._controller()
            return await admin.cluster.send(
                controller,
                ELECT_LEADERS,
                {
                    "election_type": 0,
                    "topic_partitions": [{"topic": self.topic, "partitions": parts}],
                    "timeout": 10000,
                },
            )

        resp = await self._as_admin(elect())
        codes = sorted({int(p.error_code) for r in resp.replica_election_results for p in r.partition_result})
        self.event(f"preferred leader election answered {codes}")

    async def _reassign(self, f: Fault) -> None:
        pv = next((x for x in self.c.partitions(self.topic) if x.partition == f.partition), None)
        if pv is None:
            return
        current = list(pv.replicas)
        if f.arg == "rotate":
            await self._move(f.partition, current[1:] + current[:1])
            return
        rng = random.Random(f"{f.at}")
        out = rng.choice(current)
        await self._move(f.partition, [r for r in current if r != out])
        await asyncio.sleep(f.duration)
        await self._move(f.partition, current)

    async def _move(self, p: int, replicas: list[int]) -> None:
        admin = await self.admin()
        self.event(f"reassign p{p} to {replicas}")

        async def move() -> Any:
            controller = await admin._controller()
            return await admin.cluster.send(
                controller,
                ALTER_PARTITION_REASSIGNMENTS,
                {
                    "timeout": 10000,
                    "allow_replication_factor_change": True,
                    "topics": [{"name": self.topic, "partitions": [{"partition_index": p, "replicas": replicas}]}],
                },
            )

        resp = await self._as_admin(move())
        codes = [int(x.error_code) for r in resp.responses for x in r.partitions]
        self.event(f"reassign p{p} to {replicas} answered {codes}")

    # ------------------------------------------------------------------ healing
    def heal_all(self) -> None:
        """Everything still in effect ends: pauses, cuts, slow disks; every broker down restarts."""
        self.healed = True
        for t in self.tasks:
            t.cancel()
        c = self.c
        c.net.heal()
        c.net.normal_latency()
        self.s = _State()
        for host in c.hosts.values():
            host.set_slow_io(1.0)
            if host.node is not None and host.node.paused:
                host.resume()
            if host.alive and host.broker is not None and host.broker._stopping:
                host.kill()  # a clean stop cut short: finish it the hard way
        self.event("all faults healed")
        self.restart_dead()

    def restart_dead(self) -> None:
        for host in self.c.hosts.values():
            if not host.alive:
                host.start()
                self.event(f"{host.name} restarted")
            elif host.start_task is not None and host.start_task.done() and not host.started:
                self.event(f"{host.name} failed to start ({host.start_error!r}): restarting it")
                host.kill()
                host.start()

    async def supervise(self, every: float = 2.0) -> None:
        """During the settle time, as systemd would: a broker that failed to start starts again."""
        while True:
            await asyncio.sleep(every)
            self.restart_dead()
