"""python -m odradek.testing.sim: replay a seed, or run many.

    python -m odradek.testing.sim --seed 42            # one seed: schedule, anomalies, history around them
    python -m odradek.testing.sim --seed 42 -v         # ... and every node's log as it runs (virtual time)
    python -m odradek.testing.sim --seed 42 --trace t.txt   # ... and the full trace, to diff two runs
    python -m odradek.testing.sim --seeds 1-500 --jobs 2    # a batch in parallel processes: a summary

The process re-executes itself with PYTHONHASHSEED=0 when it has another hash seed: string
hashing orders sets, and a seed must give the same run in every process.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from odradek.testing.sim.profiles import PROFILES


def _ensure_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, "-m", "odradek.testing.sim", *sys.argv[1:]], env)


def _seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def _worker(profile: str) -> int:
    from odradek.testing.sim.run import run_seed

    opts = PROFILES[profile]
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cpu = time.process_time()
        r = run_seed(int(line), opts)
        out = r.to_json()
        out["cpu"] = round(time.process_time() - cpu, 4)  # this seed's CPU seconds: its cost, whatever the load
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m odradek.testing.sim", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="replay one seed")
    ap.add_argument("--seeds", help="run seeds: 1-500 or 1,5,9")
    ap.add_argument("--jobs", type=int, default=None, help="parallel processes (default: one per core)")
    ap.add_argument("--profile", default="ci", choices=sorted(PROFILES), help="workload and duration (default ci)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every node's log (INFO and up) as it runs")
    ap.add_argument("--trace", help="write the run's trace to this file")
    ap.add_argument("--json", help="batch: write one JSON line per seed to this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.profile)
    if args.seed is not None:
        return _replay(args)
    if args.seeds:
        return _batch(args)
    ap.print_help()
    return 2


def _replay(args: argparse.Namespace) -> int:
    import dataclasses

    from odradek.testing.sim.run import run_seed

    opts = PROFILES[args.profile]
    if args.trace:
        opts = dataclasses.replace(opts, keep_trace=True)
    level = logging.INFO if args.verbose else logging.ERROR
    r = run_seed(args.seed, opts, log_level=level, echo_logs=args.verbose)
    print(r.report())
    print(f"\nreplay: python -m odradek.testing.sim --seed {args.seed} --profile {args.profile} [-v] [--trace FILE]")
    if args.trace and r.trace is not None:
        with open(args.trace, "w", encoding="utf-8") as f:
            f.write("\n".join(r.trace) + "\n")
        print(f"trace ({len(r.trace)} lines) written to {args.trace}")
    return 0 if r.ok else 1


def _batch(args: argparse.Namespace) -> int:
    from odradek.testing.sim.batch import run_batch

    out = open(args.json, "w", encoding="utf-8") if args.json else None  # noqa: SIM115 - closed below

    def on_result(r: dict) -> None:
        if out is not None:
            out.write(json.dumps(r) + "\n")
        if not r.get("ok"):
            known = f" [known: {', '.join(r['known'])}]" if r.get("known") else ""
            print(f"seed {r['seed']}: {'; '.join(r.get('anomalies', [])[:3])}{known}", flush=True)

    try:
        summary = run_batch(_seeds(args.seeds), jobs=args.jobs, profile=args.profile, on_result=on_result)
    finally:
        if out is not None:
            out.close()
    print(summary.text())
    return 0 if not summary.unexplained else 1


if __name__ == "__main__":
    _ensure_hash_seed()
    sys.exit(main())
