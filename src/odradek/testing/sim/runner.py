"""Applying a run's faults (faults.py draws them) and healing them.

`FaultRunner` starts each fault at its time, as a task of its own, and undoes it after its
duration; faults that overlap are counted (a broker two faults keep down restarts when the
last one ends). `heal_all` ends everything still in effect when the workload ends, and
`supervise` restarts, as systemd would, a broker that failed to start.

A scripted fault (`Fault(at, "script", arg=fn)`, only in scripted schedules: regression tests)
runs `await fn(runner, fault)`: a test can interleave anything the runner can do (`kill`,
`pause`, `cut`, `leader_of`, `until`, ZooKeeper write hooks in `runner.c.zk.hooks`) at
moments no seed's draw would pin down.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.client.aio import AIOAdmin
from odradek.testing.sim.cluster import PartitionView, SimCluster
from odradek.testing.sim.faults import Fault
from odradek.testing.sim.guarantee import log_ends
from odradek.testing.sim.history import History
from odradek.testing.sim.zk import ZK

ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS = 43, 45
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass
class _State:
    down: dict[int, set[int]] = field(default_factory=dict)  # broker -> faults keeping it down
    paused: dict[int, set[int]] = field(default_factory=dict)
    cuts: Counter[tuple[str, str]] = field(default_factory=Counter)
    slow: dict[int, set[int]] = field(default_factory=dict)
    zk_slow: dict[int, float] = field(default_factory=dict)  # fault -> ZooKeeper write latency
    zk_outages: set[int] = field(default_factory=set)


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
        self.notes: dict[str, Any] = {}  # what scripted faults found, for their tests

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
        ends = log_ends(self.c, b, self.topic) if host.alive else None
        if power:
            self.h.power_cut(b, ends)
            if host.alive:
                host.kill(power=True)
            else:  # killed before: its page cache goes now, and the host boots again when restarted
                host.disk.crash()
                host.boots += 1
                self.c.net.down.add(host.name)
        elif host.alive:
            self.h.went_down(b, ends)
            host.kill()
        keeping.add(fid)

    def _up(self, b: int, fid: int) -> None:
        keeping = self.s.down.get(b, set())
        keeping.discard(fid)
        host = self.c.host(b)
        if not keeping and not host.alive and not self.healed:
            host.start()
            self.event(f"b{b} restarted")

    def _pause(self, b: int, fid: int) -> None:
        self.event(f"SIGSTOP b{b}")
        self.s.paused.setdefault(b, set()).add(fid)
        self.c.host(b).pause()

    def _resume(self, b: int, fid: int) -> None:
        keeping = self.s.paused.get(b, set())
        keeping.discard(fid)
        if not keeping and not self.healed:
            self.c.host(b).resume()
            self.event(f"SIGCONT b{b}")

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
        elif f.target == "coordinator":
            b = self.leader_of(0, OFFSETS_TOPIC)
        elif f.target == "preferred":
            b = next((pv.replicas[0] for pv in self.c.partitions(self.topic) if pv.partition == f.partition), -1)
        else:
            b = self.leader_of(f.partition)
        if b < 0:
            raise RuntimeError(f"no {f.target} to target")
        return Fault(f.at, f.kind, (b, *f.brokers), f.duration, f.arg, f.partition)

    # ------------------------------------------------------------------ for scripted faults
    SCRIPT = -1  # what keeps a broker down or paused for a script

    def kill(self, b: int, *, power: bool = False) -> None:
        self.event(f"{'power cut of' if power else 'kill -9'} b{b} (script)")
        self._down(b, self.SCRIPT, power=power)

    def restart(self, b: int) -> None:
        self._up(b, self.SCRIPT)

    def pause(self, b: int) -> None:
        self._pause(b, self.SCRIPT)

    def resume(self, b: int) -> None:
        self._resume(b, self.SCRIPT)

    async def stop(self, b: int) -> None:
        """SIGTERM (controlled shutdown), and down until `restart`."""
        self.event(f"SIGTERM b{b} (script)")
        self.s.down.setdefault(b, set()).add(self.SCRIPT)
        await self.c.host(b).stop()
        self.event(f"b{b} stopped")

    def cut(self, x: int, y: int) -> None:
        """The links between brokers `x` and `y` cut both ways until `heal(x, y)`."""
        self.event(f"cut b{x}<>b{y} (script)")
        self._cut(f"b{x}", f"b{y}")
        self._cut(f"b{y}", f"b{x}")

    def heal(self, x: int, y: int) -> None:
        self._uncut(f"b{x}", f"b{y}")
        self._uncut(f"b{y}", f"b{x}")
        self.event(f"healed b{x}<>b{y} (script)")

    def cut_zk(self, b: int) -> None:
        """Broker `b` cut from ZooKeeper both ways (its session expires) until `heal_zk(b)`."""
        self.event(f"cut b{b}<>zk (script)")
        self._cut(f"b{b}", ZK)
        self._cut(ZK, f"b{b}")

    def heal_zk(self, b: int) -> None:
        self._uncut(f"b{b}", ZK)
        self._uncut(ZK, f"b{b}")
        self.event(f"healed b{b}<>zk (script)")

    def view(self, p: int, topic: str | None = None) -> PartitionView | None:
        """Partition `p` as ZooKeeper holds it now."""
        return next((pv for pv in self.c.partitions(topic or self.topic) if pv.partition == p), None)

    def leader_of(self, p: int, topic: str | None = None) -> int:
        for pv in self.c.partitions(topic or self.topic):
            if pv.partition == p:
                return pv.leader
        return -1

    async def until(self, condition: Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
        """Wait (virtual time) until `condition()` or `timeout` seconds pass."""
        deadline = self.c.loop.elapsed + timeout
        while not condition():
            if self.c.loop.elapsed >= deadline:
                return False
            await asyncio.sleep(step)
        return True

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
        if kind == "script":
            self.applied[kind] += 1
            self.event(f"script {f}")
            await f.arg(self, f)
            return
        if kind != "failover":
            f = self._resolve(f)
        self.applied[f.kind] += 1
        if kind == "coordinator":
            kind = "pause" if f.arg == "pause" else "kill"
            self.event(f"the group coordinator is b{f.brokers[0]}")
        if kind in ("kill", "power", "leader-kill"):
            b = f.brokers[0]
            self.event(f"{'power cut of' if kind == 'power' else 'kill -9'} b{b} ({f})")
            self._down(b, fid, power=kind == "power")
            await asyncio.sleep(f.duration)
            self._up(b, fid)
        elif kind == "failover":
            await self._failover(fid, f)
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
            b = f.brokers[0]
            self.event(f"SIGSTOP b{b} for {f.duration:.1f}s")
            self.s.paused.setdefault(b, set()).add(fid)
            c.host(b).pause()
            await asyncio.sleep(f.duration)
            self._resume(b, fid)
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
        elif kind == "zk-outage":
            self.event(f"ZooKeeper down for {f.duration:.1f}s")
            self.s.zk_outages.add(fid)
            c.zk.set_outage(True)
            await asyncio.sleep(f.duration)
            self.s.zk_outages.discard(fid)
            if not self.s.zk_outages:
                c.zk.set_outage(False)
                self.event("ZooKeeper back")
        elif kind == "zk-slow":
            self.event(f"ZooKeeper writes take {f.arg * 1000:.0f} ms for {f.duration:.1f}s")
            self.s.zk_slow[fid] = f.arg
            c.zk.extra_write_latency = max(self.s.zk_slow.values())
            await asyncio.sleep(f.duration)
            del self.s.zk_slow[fid]
            c.zk.extra_write_latency = max(self.s.zk_slow.values(), default=0.0)
            self.event("ZooKeeper writes back to normal")

    async def _failover(self, fid: int, f: Fault) -> None:
        c = self.c
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
            await asyncio.sleep(random.Random(f"{f.kind}-{f.at}").uniform(0.05, 1.0))
            self.event(f"failover of p{f.partition}: kill -9 its new leader b{second}")
            self._down(second, fid)
        await asyncio.sleep(max(0.0, f.duration - (c.loop.elapsed - started)))
        self._up(first, fid)
        if second >= 0 and second != first:
            await asyncio.sleep(random.Random(f"{f.kind}-{f.at}-up").uniform(0.5, 5))
            self._up(second, fid)

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
            await self.move(f.partition, current[1:] + current[:1])
            return
        rng = random.Random(f"{f.at}")
        out = rng.choice(current)
        await self.move(f.partition, [r for r in current if r != out])
        await asyncio.sleep(f.duration)
        await self.move(f.partition, current)

    async def move(self, p: int, replicas: list[int]) -> list[int]:
        """AlterPartitionReassignments of partition `p` to `replicas`: the error codes answered."""
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
        return codes

    # ------------------------------------------------------------------ healing
    def heal_all(self) -> None:
        """Everything still in effect ends: pauses, cuts, slow disks, a ZooKeeper outage or slow
        writes; every broker down restarts."""
        self.healed = True
        for t in self.tasks:
            t.cancel()
        c = self.c
        c.net.heal()
        c.net.normal_latency()
        c.zk.set_outage(False)
        c.zk.extra_write_latency = 0.0
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
