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

With `--profile DIR` each broker's event-loop thread runs under cProfile during the produce run
(bench/cluster/cprofile_hook: started and stopped by signals, so start-up and the idle part are
not in it), and per system the functions' own time and calls per million records, summed over
the brokers and repeats, are printed side by side, the largest differences first (cProfile's
own cost inflates every call alike: compare the systems, not the figures with the unprofiled ones).

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
import pstats
import signal
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (bench/cluster/run.py: its cluster start, perf and CPU helpers)

IDLE_S = 5.0
HOOK = Path(__file__).resolve().parent / "cprofile_hook"


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


def profiled(pids: dict[int, int], signum: int) -> None:
    for pid in pids.values():
        os.kill(pid, signum)
    time.sleep(0.3)  # each handler runs on its event loop's next turn


def profile_files(profile_dir: Path, pids: dict[int, int], seen: set[Path]) -> list[Path]:
    """The profiles the brokers `pids` wrote since `seen` (waiting for each to be written)."""
    deadline = time.monotonic() + 30
    while True:
        new = [f for f in profile_dir.glob("*.prof") if f not in seen and int(f.name.split("-")[0]) in pids.values()]
        if len(new) >= len(pids) or time.monotonic() > deadline:
            seen.update(new)
            return new
        time.sleep(0.2)


def function_key(fn: tuple[str, int, str]) -> str:
    """A function named so that two checkouts' match: the path below src/ (line numbers differ)."""
    path, _line, name = fn
    if "/odradek/" in path:
        path = "odradek/" + path.rsplit("/odradek/", 1)[1]
    return f"{path}:{name}"


def profile_totals(files: list[Path]) -> dict[str, list[float]]:
    """{function: [own seconds, calls, cumulative seconds]} summed over `files`."""
    out: dict[str, list[float]] = {}
    for f in files:
        st = pstats.Stats(str(f)).stats  # type: ignore[attr-defined]
        for fn, (_cc, nc, tt, ct, _callers) in st.items():
            acc = out.setdefault(function_key(fn), [0.0, 0.0, 0.0])
            acc[0] += tt
            acc[1] += nc
            acc[2] += ct
    return out


def print_profiles(totals: dict[str, dict[str, list[float]]], records: dict[str, int], top: int = 45) -> None:
    """Per million records: each function's own time and calls per system, the largest
    differences between the first two systems first; then the total."""
    names = list(totals)
    per_m = {s: {k: [v / (records[s] / 1e6) for v in vals] for k, vals in totals[s].items()} for s in names}
    keys = set().union(*(per_m[s] for s in names))
    zero = [0.0, 0.0, 0.0]
    a, b = names[0], names[-1]
    rows = sorted(keys, key=lambda k: -abs(per_m[a].get(k, zero)[0] - per_m[b].get(k, zero)[0]))
    head = "".join(f"{s + ' own s/M':>18}{'calls/M':>11}{'cum s/M':>10}" for s in names)
    print(f"{'function':<70}{head}")
    for k in rows[:top]:
        cells = "".join(f"{v[0]:>18.3f}{v[1]:>11.0f}{v[2]:>10.3f}" for s in names for v in [per_m[s].get(k, zero)])
        print(f"{k[-70:]:<70}{cells}")
    print(f"{'total own time':<70}" + "".join(f"{sum(v[0] for v in per_m[s].values()):>18.3f}{'':>21}" for s in names))


def diagnose(
    system: bench.System, n: int, topic: str = "t", throughput: float = -1, profile_dir: Path | None = None
) -> dict:
    system.create(topic, 6)
    leaders = [p.leader for p in bench.partitions_of(system.bootstrap, topic)]
    pids = system.pids()
    ports = system.handle.metrics_ports
    threads0 = {i: thread_cpu(p) for i, p in pids.items()}
    time.sleep(IDLE_S)
    threads1 = {i: thread_cpu(p) for i, p in pids.items()}
    reqs0 = {i: requests_by_api(ports[i]) for i in pids}
    if profile_dir is not None:
        profiled(pids, signal.SIGUSR1)
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
    if profile_dir is not None:
        profiled(pids, signal.SIGUSR2)
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
    ap.add_argument("--profile", type=Path, default=None, help="a directory: cProfile each broker's event loop")
    a = ap.parse_args()
    totals: dict[str, dict[str, list[float]]] = {}
    profiled_records: dict[str, int] = {}
    seen: set[Path] = set()
    if a.profile is not None:
        a.profile.mkdir(parents=True, exist_ok=True)
    names = a.systems.split(",")
    if "baseline" in names and not a.baseline_src:
        raise SystemExit("the baseline needs --baseline-src")
    with tempfile.TemporaryDirectory(prefix="odradek-cluster-diagnose-") as tmp:
        systems = []
        try:
            for name in names:
                src = str(Path(a.baseline_src).resolve() if name == "baseline" else Path(__file__).parents[2] / "src")
                env: dict[int, dict[str, str]] | None = (
                    {i: {"PYTHONPATH": src} for i in (1, 2, 3)} if name == "baseline" else None
                )
                if a.profile is not None:
                    extra = {"PYTHONPATH": f"{HOOK}{os.pathsep}{src}", "ODRADEK_CPROFILE_DIR": str(a.profile)}
                    env = {i: extra for i in (1, 2, 3)}
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
                        found = list(
                            pool.map(lambda s: diagnose(s, a.records, f"t{r}", a.throughput, a.profile), turn)  # noqa: B023
                        )
                else:
                    found = []
                    for s in turn:
                        found.append(diagnose(s, a.records, f"t{r}", a.throughput, a.profile))
                for s, res in zip(turn, found):
                    print(json.dumps({"repeat": r, **res}), flush=True)
                    if a.profile is not None:
                        files = profile_files(a.profile, s.pids(), seen)
                        acc = totals.setdefault(s.name, {})
                        for k, vals in profile_totals(files).items():
                            cur = acc.setdefault(k, [0.0, 0.0, 0.0])
                            for j in range(3):
                                cur[j] += vals[j]
                        profiled_records[s.name] = profiled_records.get(s.name, 0) + a.records
                    if not a.keep_topics:
                        delete(s, f"t{r}")
        finally:
            bench.stop_systems({s.name: s for s in systems})
    if totals:
        print_profiles(totals, profiled_records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
