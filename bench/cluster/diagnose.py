"""Where a cluster's broker CPU goes under acks=all: counts, not timings (issue 26).

    /work/wt/heavy .venv/bin/python bench/cluster/diagnose.py --systems odradek,baseline \
        --baseline-src /work/wt/base/src --records 1000000

For each system (3 brokers and ZooKeeper, as bench/cluster/run.py starts them, with metrics on):
one topic of 6 partitions, replication factor 3, min.insync.replicas 2; a warm-up produce; each
broker's CPU while idle for 5 s; then one `odradek perf produce --driver confluent --acks all
--native-batch 1000` of `--records`, and per broker: CPU-s per million records, CPU by thread
(/proc/PID/task: the event loop is the process's first thread), and the requests it handled
per API (its Prometheus counter `odradek_requests`), so a follower that fetches more often, a
leader answering more AlterPartition or Metadata, or a thread that spins shows up as a count.
Prints one JSON line per system.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (bench/cluster/run.py: its cluster start, perf and CPU helpers)

IDLE_S = 5.0


def requests_by_api(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("odradek_requests_total{"):
            out[line.split('api="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    return out


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU-seconds by thread ("name#tid"; the first is the event loop's)."""
    out = {}
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        fields = raw.rsplit(")", 1)[1].split()
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        out[f"{name}#{tid}"] = (int(fields[11]) + int(fields[12])) / bench.CLK_TCK
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if v - before.get(k, 0.0) > 0.005}


def diagnose(system: bench.System, n: int) -> dict:
    system.create("warmup", 6)
    bench.perf("produce", system.bootstrap, "warmup", "-n", "200000", "--acks", "all", "--native-batch", "1000")
    system.create("t", 6)
    leaders = [p.leader for p in bench.partitions_of(system.bootstrap, "t")]
    pids = system.pids()
    ports = system.handle.metrics_ports
    threads0 = {i: thread_cpu(p) for i, p in pids.items()}
    time.sleep(IDLE_S)
    threads1 = {i: thread_cpu(p) for i, p in pids.items()}
    reqs0 = {i: requests_by_api(ports[i]) for i in pids}
    started = time.monotonic()
    res, _ = bench.perf("produce", system.bootstrap, "t", "-n", str(n), "--acks", "all", "--native-batch", "1000")
    wall = time.monotonic() - started
    threads2 = {i: thread_cpu(p) for i, p in pids.items()}
    reqs1 = {i: requests_by_api(ports[i]) for i in pids}
    return {
        "system": system.name,
        "records_per_s": res.get("records_per_s"),
        "wall_s": round(wall, 2),
        "leaders": leaders,
        "cpu_per_m": {i: round(sum(delta(threads1[i], threads2[i]).values()) / (n / 1e6), 3) for i in pids},
        "idle_cpu_per_s": {i: round(sum(delta(threads0[i], threads1[i]).values()) / IDLE_S, 3) for i in pids},
        "threads": {i: delta(threads1[i], threads2[i]) for i in pids},
        "requests": {
            i: {k: v - reqs0[i].get(k, 0.0) for k, v in reqs1[i].items() if v > reqs0[i].get(k, 0.0)} for i in pids
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--systems", default="odradek,baseline")
    ap.add_argument("--baseline-src", default=None, help="the src/ of another checkout, for the baseline")
    a = ap.parse_args()
    names = a.systems.split(",")
    if "baseline" in names and not a.baseline_src:
        raise SystemExit("the baseline needs --baseline-src")
    with tempfile.TemporaryDirectory(prefix="odradek-cluster-diagnose-") as tmp:
        for name in names:
            env = (
                {i: {"PYTHONPATH": str(Path(a.baseline_src).resolve())} for i in (1, 2, 3)}
                if name == "baseline"
                else None
            )
            c = bench.OdradekCluster(
                Path(tmp) / name,
                brokers=3,
                overrides={"zookeeper.session.timeout.ms": bench.SESSION_MS},
                broker_env=env,
                metrics=True,
            )
            c.start()
            try:
                print(json.dumps(diagnose(bench.System(name, 3, c), a.records)), flush=True)
            finally:
                c.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
