"""Many seeds in parallel processes.

Each worker is `python -m odradek.testing.sim --worker` (PYTHONHASHSEED=0: the same seed gives
the same run in every process), reading seed numbers on stdin and answering one JSON line per
seed on stdout; seeds go to whichever worker is free. A worker that dies, or a seed that runs
longer than `seed_timeout` real seconds, is reported as an anomaly of that seed (`crash`,
`hang`) and the worker is replaced. Real time the batch itself did not run (stopped by SIGSTOP, as
the long run's pauser stops it while tests run, or starved) is not counted against a seed.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any


@dataclass
class BatchSummary:
    profile: str
    seeds: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)  # seeds showing each known bug
    unexplained: list[dict[str, Any]] = field(default_factory=list)  # seeds with an anomaly no known bug explains
    # seeds whose losses a failure beyond Kafka's guarantee explains (guarantee.py): not anomalies
    beyond: list[dict[str, Any]] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0
    cpu_wall: float = 0.0  # the seeds' own wall times, summed
    cpu: float = 0.0  # the seeds' own CPU seconds, summed (workers that report them)
    virtual: float = 0.0
    acked: int = 0
    jobs: int = 1

    def add(self, r: dict[str, Any]) -> None:
        """Count one seed's result line (a worker's JSON, or a line read back from a .jsonl)."""
        self.seeds += 1
        self.virtual += r.get("virtual", 0.0)
        self.cpu_wall += r.get("wall", 0.0)
        self.cpu += r.get("cpu", 0.0)
        self.acked += r.get("stats", {}).get("acked", 0)
        self.faults.update(r.get("faults", []))
        if r.get("beyond"):
            self.beyond.append(r)
        if not r.get("ok", False):
            self.failed.append(r)
            self.kinds.update(set(r.get("kinds", [])))
            self.known.update(r.get("known", []))
            if r.get("unexplained", r.get("kinds")):
                self.unexplained.append(r)

    def sort(self) -> None:
        self.failed.sort(key=lambda r: r["seed"])
        self.unexplained.sort(key=lambda r: r["seed"])
        self.beyond.sort(key=lambda r: r["seed"])

    @property
    def seeds_per_s(self) -> float:
        return self.seeds / self.wall if self.wall else 0.0

    def text(self) -> str:
        lines = [
            f"{self.seeds} seeds ({self.profile} profile) in {self.wall:.1f} s with {self.jobs} processes: "
            f"{self.seeds_per_s:.2f} seeds/s, {self.virtual * 3 / 60 / max(self.wall, 1e-9):.1f} simulated "
            f"broker-minutes per wall second ({self.virtual / 60:.0f} simulated minutes, 3 brokers), "
            f"{self.acked} acknowledged writes checked"
            + (f"; {self.cpu / self.seeds:.2f} CPU-s per seed" if self.cpu and self.seeds else ""),
            f"seeds with anomalies: {len(self.failed)} ({len(self.unexplained)} not explained by a known bug)",
        ]
        if self.beyond:
            lines.append(
                f"lost by a failure beyond Kafka's guarantee (every other in-sync replica down, the new leader's "
                f"unflushed tail lost in a power cut): {len(self.beyond)} seeds: "
                + ", ".join(str(r["seed"]) for r in self.beyond[:50])
                + (" ..." if len(self.beyond) > 50 else "")
            )
        for kind, n in sorted(self.kinds.items()):
            lines.append(f"  {kind}: {n} seeds")
        for bug, n in sorted(self.known.items()):
            lines.append(f"  known bug {bug}: {n} seeds")
        lines.append("faults applied: " + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())))
        for r in self.failed[:50]:
            what = ", ".join(r.get("unexplained") or []) or "known: " + ", ".join(r.get("known", []))
            lines.append(f"  seed {r['seed']}: {what} (faults: {', '.join(r.get('faults', []))})")
        return "\n".join(lines)


def _worker_cmd(profile: str) -> list[str]:
    return [sys.executable, "-m", "odradek.testing.sim", "--worker", "--profile", profile]


# The batch's loop wakes at least every second; a wake-up later than this means the batch was
# stopped (SIGSTOP) or starved meanwhile, and the seeds in progress were too.
STOPPED_GAP_S = 10.0


def discount_stopped(workers: Iterable[Any], last: float, now: float) -> None:
    """When the batch's loop last ran at `last` and runs again at `now`, more than
    STOPPED_GAP_S later, move each running worker's start by that gap, so that the wall-time
    bound counts only time the batch ran (seeds 20,656-20,657 of the long run were called hangs
    after its pauser had stopped it for over half an hour)."""
    gap = now - last
    if gap > STOPPED_GAP_S:
        for w in workers:
            w.since += gap


class _Worker:
    def __init__(self, profile: str) -> None:
        env = dict(os.environ, PYTHONHASHSEED="0")
        self.proc = subprocess.Popen(
            _worker_cmd(profile),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )
        self.seed: int | None = None
        self.since = 0.0
        self.cpu_since = 0.0

    @property
    def stdout(self) -> IO[str]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def give(self, seed: int) -> None:
        assert self.proc.stdin is not None
        self.seed, self.since, self.cpu_since = seed, time.monotonic(), self.cpu_seconds()
        self.proc.stdin.write(f"{seed}\n")
        self.proc.stdin.flush()

    def cpu_seconds(self) -> float:
        """The worker process's CPU time so far (user + system, /proc/<pid>/stat); 0 where unreadable."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def hung(self, now: float, seed_timeout: float, wall_timeout: float) -> bool:
        if self.seed is None:
            return False
        return self.cpu_seconds() - self.cpu_since > seed_timeout or now - self.since > wall_timeout

    def stop(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a hung worker
            self.proc.kill()
            self.proc.wait()


def run_batch(
    seeds: Iterable[int],
    *,
    jobs: int | None = None,
    profile: str = "ci",
    seed_timeout: float = 120.0,
    wall_timeout: float = 1800.0,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> BatchSummary:
    todo = list(seeds)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    summary = BatchSummary(profile, jobs=jobs)
    started = time.monotonic()
    sel = selectors.DefaultSelector()
    workers: list[_Worker] = []

    def spawn() -> _Worker:
        w = _Worker(profile)
        workers.append(w)
        sel.register(w.stdout, selectors.EVENT_READ, w)
        return w

    def record(r: dict[str, Any]) -> None:
        summary.add(r)
        if on_result is not None:
            on_result(r)

    def replace(w: _Worker, kind: str) -> None:
        sel.unregister(w.stdout)
        workers.remove(w)
        w.proc.kill()
        w.proc.wait()
        if w.seed is not None:
            record(
                {"seed": w.seed, "ok": False, "kinds": [kind], "unexplained": [kind], "anomalies": [kind], "faults": []}
            )
        if todo:
            spawn().give(todo.pop(0))

    for _ in range(jobs):
        if todo:
            spawn().give(todo.pop(0))
    last = time.monotonic()
    while workers:
        events = sel.select(timeout=1.0)
        discount_stopped(workers, last, time.monotonic())
        for key, _mask in events:
            w: _Worker = key.data
            line = w.stdout.readline()
            if not line:
                replace(w, "crash")
                continue
            r = json.loads(line)
            w.seed = None
            record(r)
            if todo:
                w.give(todo.pop(0))
            else:
                sel.unregister(w.stdout)
                workers.remove(w)
                w.stop()
        now = last = time.monotonic()
        for w in list(workers):
            if w.hung(now, seed_timeout, wall_timeout):
                replace(w, "hang")
    summary.wall = time.monotonic() - started
    summary.sort()
    return summary
