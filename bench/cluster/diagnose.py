"""Where a cluster's broker CPU goes under acks=all: counts, not timings (issue 26).

    /work/wt/heavy .venv/bin/python bench/cluster/diagnose.py --systems odradek,baseline \
        --baseline-src /work/wt/base/src --records 1500000 --repeats 4 --throughput 200000 --together

Each system (3 brokers and ZooKeeper, as bench/cluster/run.py starts them, with metrics on) is
started once and warmed up; then, `--repeats` times: one topic of 6 partitions, replication
factor 3, min.insync.replicas 2; each broker's CPU while idle for 5 s; one `odradek perf produce
--driver confluent --acks all --native-batch 1000` of `--records`; the topic deleted (unless
--keep-topics: a follower fetches every partition it follows each time, so partitions left from
earlier runs make later ones dearer). Per run and broker: CPU-s per million records, CPU by
thread (/proc/PID/task: the event loop is the process's first thread), and the requests it
handled per API (its Prometheus counter `odradek_requests`), so a follower that fetches more
often, a leader answering more AlterPartition or Metadata, or a thread that spins shows up as a
count. Prints one JSON line per system and run.

Unpaced (the default), librdkafka sends what it holds each linger.ms, so a client slowed by the
machine's other load sends more, smaller Produce requests (each with its two follower Fetches)
and the brokers' CPU per record follows: the same code measured 1.1-3.0 CPU-s/M within one run. To
compare two versions, hold the rate (`--throughput`, so both see the same requests) and load
both at once (`--together`, so both share the machine's other load alike), and compare the
ratios of each repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
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


def warm_up(system: bench.System) -> None:
    system.create("warmup", 6)
    bench.perf("produce", system.bootstrap, "warmup", "-n", "200000", "--acks", "all", "--native-batch", "1000")


def delete(system: bench.System, topic: str) -> None:
    """Delete `topic` and wait until the brokers' metadata no longer has it, so that every run
    starts with the same partitions (a follower fetches every partition it follows each time)."""
    admin = bench.AdminClient({"bootstrap.servers": system.bootstrap})
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result()
    bench.wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 60, f"{topic} deleted")


def diagnose(system: bench.System, n: int, topic: str = "t", throughput: float = -1) -> dict:
    system.create(topic, 6)
    leaders = [p.leader for p in bench.partitions_of(system.bootstrap, topic)]
    pids = system.pids()
    ports = system.handle.metrics_ports
    threads0 = {i: thread_cpu(p) for i, p in pids.items()}
    time.sleep(IDLE_S)
    threads1 = {i: thread_cpu(p) for i, p in pids.items()}
    reqs0 = {i: requests_by_api(ports[i]) for i in pids}
    started = time.monotonic()
    res, _ = bench.perf(
        "produce",
        system.bootstrap,
        topic,
        "-n",
        str(n),
        "--acks",
        "all",
        "--native-batch",
        "1000",
        "--throughput",
        str(throughput),
    )
    wall = time.monotonic() - started
    threads2 = {i: thread_cpu(p) for i, p in pids.items()}
    reqs1 = {i: requests_by_api(ports[i]) for i in pids}
    return {
        "system": system.name,
        "records_per_s": res.get("records_per_s"),
        "wall_s": round(wall, 2),
        "latency_p50_ms": round(res["latency_ms"]["p50"], 1),
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
    ap.add_argument("--repeats", type=int, default=1, help="produce runs per system, the systems taking turns")
    ap.add_argument(
        "--throughput",
        type=float,
        default=-1,
        help="records/s the producer is held to (-1: as fast as it goes; then how many records go in "
        "one request, and so the CPU per record, follows the client's pace)",
    )
    ap.add_argument(
        "--together",
        action="store_true",
        help="each repeat loads every system at once (one thread each), so that they share the "
        "machine's other load alike; with --throughput, so that neither starves the other",
    )
    ap.add_argument("--keep-topics", action="store_true", help="keep each run's topic (partitions accumulate)")
    ap.add_argument("--systems", default="odradek,baseline")
    ap.add_argument("--baseline-src", default=None, help="the src/ of another checkout, for the baseline")
    a = ap.parse_args()
    names = a.systems.split(",")
    if "baseline" in names and not a.baseline_src:
        raise SystemExit("the baseline needs --baseline-src")
    with tempfile.TemporaryDirectory(prefix="odradek-cluster-diagnose-") as tmp:
        systems = []
        try:
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
                systems.append(bench.System(name, 3, c))
            for s in systems:
                warm_up(s)
            for r in range(a.repeats):
                turn = systems[r % len(systems) :] + systems[: r % len(systems)]
                if a.together:
                    with ThreadPoolExecutor(len(turn)) as pool:
                        found = list(pool.map(lambda s: diagnose(s, a.records, f"t{r}", a.throughput), turn))  # noqa: B023
                else:
                    found = []
                    for s in turn:
                        found.append(diagnose(s, a.records, f"t{r}", a.throughput))
                for s, res in zip(turn, found):
                    print(json.dumps({"repeat": r, **res}), flush=True)
                    if not a.keep_topics:
                        delete(s, f"t{r}")
        finally:
            bench.stop_systems({s.name: s for s in systems})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
