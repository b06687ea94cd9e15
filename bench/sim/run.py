"""The simulator's long run: many seeds in parallel processes, a summary of what they found.

    .venv/bin/python bench/sim/run.py [--seeds 100000] [--first 1] [--jobs N] [--profile full|ci]

Each seed is one deterministic run of a 3-broker cluster under faults and a workload
(odradek/testing/sim/run.py); the summary counts the seeds with anomalies by kind and by known
bug, lists the seeds no known bug explains (replay each with `python -m odradek.testing.sim
--seed N --profile P`), and measures the simulator: seeds per second and simulated
broker-minutes per wall second (3 brokers x the simulated time of every seed). There is no peer
to compare with: the figure is the simulator's own speed, on this machine, with these jobs.

Writes bench/sim/results/<UTC time>-<profile>.txt (the summary) and .jsonl (one line per seed).
Interrupt it (Ctrl-C) for the summary of the seeds done so far.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from odradek.testing.sim.batch import run_batch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=100_000, help="how many seeds (default 100000)")
    ap.add_argument("--first", type=int, default=1, help="the first seed")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    ap.add_argument("--profile", default="full", choices=("full", "ci"))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    base = os.path.join(args.out, f"{stamp}-{args.profile}")
    done = [0]

    with open(base + ".jsonl", "w", encoding="utf-8") as lines:

        def on_result(r: dict) -> None:
            lines.write(json.dumps(r) + "\n")
            done[0] += 1
            if not r.get("ok"):
                tag = ", ".join(r.get("unexplained") or []) or "known: " + ", ".join(r.get("known", []))
                print(f"seed {r['seed']}: {tag}", flush=True)
            elif done[0] % 500 == 0:
                print(f"{done[0]} seeds done", flush=True)

        seeds = range(args.first, args.first + args.seeds)
        try:
            summary = run_batch(seeds, jobs=args.jobs, profile=args.profile, on_result=on_result)
        except KeyboardInterrupt:
            print("interrupted: no summary (the .jsonl has every seed done)")
            return 130
    text = summary.text()
    header = f"python bench/sim/run.py --seeds {args.seeds} --first {args.first} --profile {args.profile}"
    with open(base + ".txt", "w", encoding="utf-8") as f:
        f.write(f"{header}\n{stamp}, {os.cpu_count()} cores\n\n{text}\n")
    print(text)
    print(f"\nwritten: {base}.txt, {base}.jsonl")
    return 0 if not summary.unexplained else 1


if __name__ == "__main__":
    sys.exit(main())
