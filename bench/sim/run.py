"""The simulator's long run: many seeds in parallel processes, a summary of what they found.

    .venv/bin/python bench/sim/run.py [--seeds 100000] [--first 1] [--jobs N] [--profile full|ci]
    .venv/bin/python bench/sim/run.py --resume results/<run>.jsonl [--idle]   # go on with a run
    .venv/bin/python bench/sim/run.py --summarize results/<a>.jsonl results/<b>.jsonl ...

Each seed is one deterministic run of a 3-broker cluster under faults and a workload
(odradek/testing/sim/run.py); the summary counts the seeds with anomalies by kind and by known
bug, lists the seeds no known bug explains (replay each with `python -m odradek.testing.sim
--seed N --profile P`), and measures the simulator: seeds per second, CPU-seconds per seed and
simulated broker-minutes per wall second (3 brokers x the simulated time of every seed). There
is no peer to compare with: the figure is the simulator's own speed, on this machine, with these
jobs.

Writes bench/sim/results/<UTC time>-<profile>.txt (the summary) and .jsonl (a first line naming
the run: seeds, profile, commit; then one line per seed, written as each ends). A run of many hours
need not be one sitting: interrupted (Ctrl-C, or the process killed), `--resume` that .jsonl runs
the seeds it does not hold yet and appends them (each resumed part names its own commit), and
`--summarize` makes one summary of any set of .jsonl files (a seed counted once). `--idle` runs the
workers at the kernel's idle priority (SCHED_IDLE, in an autogroup niced to 19): they take almost
no CPU from other work, but other work that wakes often still waits for them (docs/simulator.md:
a unit test ran 8x slower in wall time beside it), so run the long run on an otherwise idle
machine and stop it before tests or benchmarks. A seed is bounded by its CPU time, not its wall
time, so waiting is never taken for a hang.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from odradek.testing.sim.batch import BatchSummary, run_batch  # noqa: E402


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", HERE, "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _read(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A .jsonl's run lines (the headers: seeds, profile, commit) and its seed lines."""
    runs: list[dict[str, Any]] = []
    seeds: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a run killed while writing it: that seed runs again
            (runs if "run" in r else seeds).append(r)
    return runs, seeds


def _ends_a_line(path: str) -> bool:
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _ranges(seeds: Iterable[int]) -> str:
    out: list[str] = []
    ordered = sorted(set(seeds))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


def summarize(paths: list[str]) -> str:
    runs: list[dict[str, Any]] = []
    by_seed: dict[int, dict[str, Any]] = {}
    for path in paths:
        rs, seeds = _read(path)
        runs += rs
        for r in seeds:
            by_seed.setdefault(r["seed"], r)
    parts = [r["run"] for r in runs if not r.get("ended")]
    ended = [r["run"] for r in runs if r.get("ended")]
    profiles = sorted({p["profile"] for p in parts}) or ["?"]
    summary = BatchSummary("/".join(profiles), jobs=max((p.get("jobs") or 1 for p in parts), default=1))
    for seed in sorted(by_seed):
        summary.add(by_seed[seed])
    summary.sort()
    summary.wall = sum(p.get("wall", 0.0) for p in ended)  # parts interrupted add seeds, not wall time
    lines = [
        f"{len(by_seed)} seeds from {len(paths)} file(s): {_ranges(by_seed)}",
        "parts: "
        + "; ".join(
            f"{p.get('started', '?')} commit {p.get('commit', '?')} jobs {p.get('jobs', '?')}"
            + (" idle" if p.get("idle") else "")
            for p in parts
        ),
    ]
    if len(ended) < len(parts):
        killed = len(parts) - len(ended)
        lines.append(f"({killed} part(s) killed (-9) before writing their wall time: seeds/s overstates)")
    lines += ["", summary.text()]
    return "\n".join(lines)


def _idle() -> None:
    """SCHED_IDLE for this process and the workers it starts (they inherit it), in a session of
    its own whose autogroup is niced to 19: where the kernel groups processes by session
    (`/proc/sys/kernel/sched_autogroup_enabled`), SCHED_IDLE only yields within the group, and
    the group itself would take a fair share beside every other session's."""
    try:
        os.setsid()  # a new session: a new autogroup, holding this run alone
    except OSError:
        pass  # already a session leader
    try:
        with open("/proc/self/autogroup", "w", encoding="ascii") as f:
            f.write("19")
    except OSError:
        pass  # no autogroups here: SCHED_IDLE alone is what counts
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=100_000, help="how many seeds (default 100000)")
    ap.add_argument("--first", type=int, default=1, help="the first seed")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    ap.add_argument("--profile", default="full", choices=("full", "ci"))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--resume", metavar="JSONL", help="go on with this run: its seeds not done yet, appended to it")
    ap.add_argument("--idle", action="store_true", help="run at the kernel's idle priority (SCHED_IDLE)")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL", help="one summary of these runs; runs nothing")
    args = ap.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    if args.idle:
        _idle()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    done_before: set[int] = set()
    if args.resume:
        runs, seeds_done = _read(args.resume)
        if not runs:
            print(f"{args.resume}: no run line (a .jsonl written before --resume existed)", file=sys.stderr)
            return 2
        first = runs[0]["run"]
        args.seeds, args.first, args.profile = first["seeds"], first["first"], first["profile"]
        done_before = {r["seed"] for r in seeds_done}
        base = args.resume.removesuffix(".jsonl")
    else:
        os.makedirs(args.out, exist_ok=True)
        base = os.path.join(args.out, f"{stamp}-{args.profile}")
    todo = [s for s in range(args.first, args.first + args.seeds) if s not in done_before]
    print(f"{len(todo)} seeds to run ({len(done_before)} done before), profile {args.profile}", flush=True)
    done = [0]

    with open(base + ".jsonl", "a", encoding="utf-8") as lines:
        if not _ends_a_line(base + ".jsonl"):
            lines.write("\n")  # a part killed while writing its last line: that line is dropped, its seed runs again
        part = {
            "seeds": args.seeds,
            "first": args.first,
            "profile": args.profile,
            "commit": _commit(),
            "started": stamp,
            "jobs": args.jobs or os.cpu_count(),
            "idle": args.idle,
        }
        lines.write(json.dumps({"run": part}) + "\n")
        lines.flush()

        def on_result(r: dict) -> None:
            lines.write(json.dumps(r) + "\n")
            lines.flush()
            done[0] += 1
            if not r.get("ok"):
                tag = ", ".join(r.get("unexplained") or []) or "known: " + ", ".join(r.get("known", []))
                print(f"seed {r['seed']}: {tag}", flush=True)
            elif done[0] % 500 == 0:
                print(f"{done[0]} seeds done", flush=True)

        started = time.monotonic()
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill (not -9) ends the part as Ctrl-C does
        try:
            summary = run_batch(todo, jobs=args.jobs, profile=args.profile, on_result=on_result)
        except KeyboardInterrupt:
            part["wall"] = round(time.monotonic() - started, 1)
            lines.write(json.dumps({"run": part, "ended": True}) + "\n")
            print(f"interrupted: go on with --resume {base}.jsonl")
            return 130
        part["wall"] = round(summary.wall, 1)
        lines.write(json.dumps({"run": part, "ended": True}) + "\n")
    text = summarize([base + ".jsonl"])
    header = f"python bench/sim/run.py --seeds {args.seeds} --first {args.first} --profile {args.profile}"
    with open(base + ".txt", "w", encoding="utf-8") as f:
        f.write(f"{header}\n{stamp}, {os.cpu_count()} cores\n\n{text}\n")
    print(text)
    print(f"\nwritten: {base}.txt, {base}.jsonl")
    return 0 if not summary.unexplained else 1


if __name__ == "__main__":
    sys.exit(main())
