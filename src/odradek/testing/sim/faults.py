"""The faults of a run: a schedule drawn from the seed (the runner that applies and heals them
is runner.py).

Kinds (`KINDS`, with how many of each a seed draws on average):
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
- `elect`: a preferred-leader election of every partition;
- `zk-outage`: the whole ZooKeeper ensemble unreachable (every session's server gone), then
  back: sessions survive (ZooKeeper renews their timeouts when it recovers);
- `zk-slow`: ZooKeeper's writes commit slowly (a slow transaction log: 50-800 ms each):
  writers wait longer, and watch events come later;
- `coordinator`: the group coordinator's broker (the leader of `__consumer_offsets`) killed
  or paused.
Clock steps, drift and config changes are never undone; everything else heals after its
duration, and `heal_all` heals what is still in effect when the workload ends.

Stable seeds: every kind draws from its own random stream, derived from the seed and the
kind's name (how many faults of that kind, when, on which broker, with which parameters), so
adding a kind, or changing one kind's weight or parameters, leaves every other kind's faults
of every seed as they were. A seed whose streams draw no fault at all gets one, of a kind
chosen by a key each kind draws from its own fallback stream (the highest wins, weighted by
the rates): adding a kind changes such a seed only when the new kind's key wins.
What a seed's faults *do* still depends on everything that runs (the brokers, the clients,
the workload): any change to that code can make the same schedule play out differently.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

# How many faults of each kind a seed draws on average, scaled by `FaultSpec.scale` (so
# about 2.6 faults a seed at scale 1).
KINDS: dict[str, float] = {
    "kill": 0.2,
    "leader-kill": 0.2,
    "failover": 0.133,
    "power": 0.133,
    "bounce": 0.067,
    "pause": 0.2,
    "partition": 0.133,
    "oneway": 0.133,
    "isolate": 0.133,
    "zk-cut": 0.133,
    "slow-link": 0.133,
    "reset": 0.067,
    "clock-step": 0.067,
    "drift": 0.067,
    "slow-disk": 0.067,
    "config": 0.133,
    "reassign": 0.133,
    "elect": 0.067,
    "zk-outage": 0.1,
    "zk-slow": 0.1,
    "coordinator": 0.133,
}
# At most this many of a kind in one seed.
LIMITS = {"power": 1, "zk-outage": 1}


@dataclass
class Fault:
    at: float
    kind: str
    brokers: tuple[int, ...] = ()
    duration: float = 0.0
    arg: Any = None
    partition: int = -1
    # instead of `brokers`, named when the fault starts: "leader" or "preferred" (first replica)
    # of `partition`, "controller", or "coordinator" (the group coordinator's broker)
    target: str = ""

    def __str__(self) -> str:
        parts = [f"{self.at:7.2f}s {self.kind}"]
        if self.brokers:
            parts.append("b" + ",b".join(str(b) for b in self.brokers))
        if self.target:
            parts.append(f"the {self.target}" + (f" of p{self.partition}" if self.partition >= 0 else ""))
        elif self.partition >= 0:
            parts.append(f"p{self.partition}")
        if self.arg is not None:
            parts.append(getattr(self.arg, "__name__", None) or str(self.arg))
        if self.duration:
            parts.append(f"for {self.duration:.1f}s")
        return " ".join(parts)


def busy_schedule() -> list[Fault]:
    """A fixed schedule that reorders much (a leader killed, a pause past the session, a cut, TCP
    resets, a reassignment), for scripted runs that want many deliveries crossed by faults."""
    return [
        Fault(1.5, "leader-kill", partition=0, target="leader", duration=3.0),
        Fault(2.5, "pause", (2,), duration=7.5),
        Fault(4.0, "partition", (1, 3), duration=3.0),
        Fault(6.0, "reset", (1, 2)),
        Fault(7.0, "reassign", partition=1, arg="rotate"),
    ]


@dataclass(frozen=True)
class FaultSpec:
    kinds: tuple[str, ...] = tuple(KINDS)
    scale: float = 1.0  # multiplies every kind's rate
    window: tuple[float, float] = (2.0, 30.0)  # when they start (virtual seconds into the workload)


def _poisson(rng: random.Random, mean: float) -> int:
    u, n = rng.random(), 0
    p = s = math.exp(-mean)
    while u > s and n < 20:
        n += 1
        p *= mean / n
        s += p
    return n


def schedule(seed: int, spec: FaultSpec, brokers: int, partitions: int) -> list[Fault]:
    """The seed's faults, each kind from its own stream (the module docstring)."""
    kinds = [k for k in spec.kinds if k in KINDS]
    out: list[Fault] = []
    for kind in kinds:
        rng = random.Random(f"faults-{seed}-{kind}")
        n = min(_poisson(rng, KINDS[kind] * spec.scale), LIMITS.get(kind, 20))
        out += [_draw(rng, kind, spec, brokers, partitions) for _ in range(n)]
    if not out and kinds:
        # one fault, of a kind chosen in proportion to the rates by a key per kind (weighted
        # sampling, Efraimidis-Spirakis): a new kind changes the choice only where it wins
        def key(k: str) -> float:
            return random.Random(f"faults-{seed}-{k}-fallback").random() ** (1 / KINDS[k])

        kind = max(kinds, key=key)
        out.append(_draw(random.Random(f"faults-{seed}-{kind}-fallback-draw"), kind, spec, brokers, partitions))
    out.sort(key=lambda f: (f.at, f.kind))
    return out


def _draw(rng: random.Random, kind: str, spec: FaultSpec, brokers: int, partitions: int) -> Fault:
    """One fault of `kind`, every parameter from `rng` (the kind's own stream)."""
    ids = list(range(1, brokers + 1))
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
    elif kind == "zk-outage":
        f.brokers = ()
    elif kind == "zk-slow":
        f.brokers, f.arg = (), rng.choice([0.05, 0.2, 0.8])
    elif kind == "coordinator":
        f.brokers, f.target = (), "coordinator"
        f.arg = rng.choice(["kill", "pause"])
    return f
