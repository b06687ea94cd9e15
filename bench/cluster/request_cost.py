"""A leader's CPU per single-record acks=all Produce at replication factor 3 (issue 28).

    /work/wt/heavy .venv/bin/python bench/cluster/request_cost.py --systems odradek,baseline \
        --baseline-src /work/main/src [--requests 5000] [--rate 1000] [--repeats 3] [--profile DIR]

Each system (3 brokers and their ZooKeeper, as bench/cluster/run.py starts them; `kafka`: Apache
Kafka 3.9's cluster) is started once. Then, `--repeats` times, the systems taking turns: a topic
of one partition, replication factor 3, min.insync.replicas 2; `--warmup` records, not measured;
then `--requests` records of 100 B from librdkafka (acks=all, linger.ms=0) held to `--rate`
records/s, every one acknowledged before the run ends. Each record is its own Produce request
(the odradek rows count them from the leader's `odradek_requests` counter, and the Fetch requests
the followers sent it; librdkafka's statistics count the Produce requests it sent, for Kafka too).
CPU is utime+stime of each broker process (every thread; the JVMs' too), per request: the
leader's, the followers'.

With `--profile DIR` (odradek systems) each broker's event loop runs under cProfile during the
measured part (bench/cluster/cprofile_hook) and the leader's functions are printed per request,
own time and calls, the systems side by side (cProfile's own cost inflates every call alike:
compare the systems, not the figures with the unprofiled ones).

Writes bench/cluster/results/request-cost.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diagnose  # noqa: E402  (bench/cluster/diagnose.py: thread CPU, request counters, profiles)
import run as bench  # noqa: E402  (bench/cluster/run.py: its cluster start and CPU helpers)
from confluent_kafka import Producer  # noqa: E402

RECORD = b"x" * 100


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU-seconds of process `pid`, every thread."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / bench.CLK_TCK, int(fields[12]) / bench.CLK_TCK


def start(names: list[str], tmp: Path, baseline_src: str | None, profile: Path | None) -> list[bench.System]:
    systems = []
    for name in names:
        if name == "kafka":
            systems += bench.start_systems(["kafka"], tmp).values()
            continue
        if name not in ("odradek", "baseline"):
            raise SystemExit(f"unknown system {name} (odradek, baseline, kafka)")
        if name == "baseline" and not baseline_src:
            raise SystemExit("the baseline needs --baseline-src")
        src = str(Path(baseline_src).resolve() if name == "baseline" else bench.ROOT / "src")
        env = {"PYTHONPATH": src}
        if profile is not None:
            env = {
                "PYTHONPATH": f"{diagnose.HOOK}{os.pathsep}{src}",
                "ODRADEK_CPROFILE_DIR": str(profile),
                "ODRADEK_CPROFILE_CLOCK": "thread",  # CPU time: a send that is descheduled costs what it ran
            }
        c = bench.OdradekCluster(
            tmp / name,
            brokers=3,
            overrides={"zookeeper.session.timeout.ms": bench.SESSION_MS},
            broker_env={i: env for i in (1, 2, 3)},
            metrics=True,
        )
        c.start()
        systems.append(bench.System(name, 3, c))
    return systems


def produce(bootstrap: str, topic: str, n: int, rate: float) -> dict:
    """`n` records, each sent alone (linger 0) at `rate`/s, all acknowledged; what librdkafka
    says it sent."""
    stats: list[dict] = []
    errors: list[str] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "statistics.interval.ms": 500,
            "stats_cb": lambda s: stats.append(json.loads(s)),
        }
    )

    def delivered(err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))

    p.list_topics(topic, timeout=10)  # connected and the leader known before the clock starts
    started = time.monotonic()
    for i in range(n):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        p.produce(topic, RECORD, partition=0, on_delivery=delivered)
        p.poll(0)
    left = p.flush(60)
    wall = time.monotonic() - started
    time.sleep(0.6)
    p.poll(0)  # one more statistics report, after the last acknowledgement
    if left or errors:
        raise RuntimeError(f"{left} records unacknowledged, {len(errors)} errors (first: {errors[:1]})")
    last = stats[-1] if stats else {}
    sent = sum(b.get("req", {}).get("Produce", 0) for b in last.get("brokers", {}).values())
    return {"wall_s": wall, "produce_requests_sent": sent}


def one_run(system: bench.System, topic: str, n: int, rate: float, warmup: int, profile: Path | None) -> dict:
    system.create(topic, 1)
    leader = system.leader(topic)
    produce(system.bootstrap, topic, warmup, rate)
    pids = system.pids()
    ports = getattr(system.handle, "metrics_ports", None)
    before = {i: cpu_split(p) for i, p in pids.items()}
    reqs0 = {i: diagnose.requests_by_api(ports[i]) for i in pids} if ports else {}
    if profile is not None and ports:
        diagnose.profiled(pids, signal.SIGUSR1)
    res = produce(system.bootstrap, topic, n, rate)
    if profile is not None and ports:
        diagnose.profiled(pids, signal.SIGUSR2)
    split = {i: tuple(x - y for x, y in zip(cpu_split(p), before[i], strict=True)) for i, p in pids.items()}
    used = {i: u + k for i, (u, k) in split.items()}
    requests: dict[int, dict[str, float]] = {}
    if ports:
        for i in pids:
            now = diagnose.requests_by_api(ports[i])
            requests[i] = {k: v - reqs0[i].get(k, 0.0) for k, v in now.items() if v > reqs0[i].get(k, 0.0)}
    produced = requests.get(leader, {}).get("produce") or res["produce_requests_sent"] or n
    return {
        "system": system.name,
        "leader": leader,
        "requests": n,
        "rate": rate,
        "achieved_rate": n / res["wall_s"],
        "produce_requests": produced,
        "leader_ms_per_request": 1000 * used[leader] / produced,
        "leader_user_system_ms_per_request": [round(1000 * x / produced, 3) for x in split[leader]],
        "follower_ms_per_request": {i: round(1000 * u / produced, 3) for i, u in used.items() if i != leader},
        "cpu_s": {i: round(u, 3) for i, u in used.items()},
        "leader_requests": requests.get(leader, {}),
        "client": res,
    }


def report(meta: dict, rows: list[dict]) -> str:
    la = " ".join(f"{x:.2f}" for x in meta["loadavg"])
    names = list(dict.fromkeys(r["system"] for r in rows))
    out = [
        f"Run {meta['started']} ({os.cpu_count()} CPUs, load avg at start {la}): {meta['requests']:,} single-record "
        f"acks=all Produce requests at {meta['rate']:,.0f}/s, replication factor 3, per run; medians of "
        f"{meta['repeats']} runs (each run in brackets).",
        "",
        "| system | leader CPU ms / request | of it user / system | followers' CPU ms / request "
        "| Fetch requests to the leader / Produce |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in names:
        mine = [r for r in rows if r["system"] == s]
        lead = [r["leader_ms_per_request"] for r in mine]
        fol = [statistics.mean(r["follower_ms_per_request"].values()) for r in mine]
        user = statistics.median(r["leader_user_system_ms_per_request"][0] for r in mine)
        system = statistics.median(r["leader_user_system_ms_per_request"][1] for r in mine)
        fetches = [r["leader_requests"].get("fetch", 0) / r["produce_requests"] for r in mine if r["leader_requests"]]
        out.append(
            f"| {s} | {statistics.median(lead):.3f} ({' '.join(f'{x:.3f}' for x in lead)}) "
            f"| {user:.3f} / {system:.3f} | {statistics.median(fol):.3f} "
            f"| {f'{statistics.median(fetches):.2f}' if fetches else '-'} |"
        )
    if len(names) > 1:
        a, b = names[0], names[1]
        ra = statistics.median(r["leader_ms_per_request"] for r in rows if r["system"] == a)
        rb = statistics.median(r["leader_ms_per_request"] for r in rows if r["system"] == b)
        out.append(f"\nleader CPU per request {a} / {b}: {ra / rb:.2f}x")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default="odradek,baseline")
    ap.add_argument("--baseline-src", default=None)
    ap.add_argument("--profile", type=Path, default=None, help="a directory: cProfile each broker's event loop")
    ap.add_argument("--out", default=str(bench.RESULTS / "request-cost.json"))
    a = ap.parse_args()
    if a.profile is not None:
        a.profile.mkdir(parents=True, exist_ok=True)
    meta = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loadavg": os.getloadavg(),
        "argv": sys.argv[1:],
        "requests": a.requests,
        "rate": a.rate,
        "repeats": a.repeats,
    }
    rows: list[dict] = []
    totals: dict[str, dict[str, list[float]]] = {}
    profiled: dict[str, int] = {}
    seen: set[Path] = set()
    with tempfile.TemporaryDirectory(prefix="odradek-request-cost-") as tmp:
        systems = start(a.systems.split(","), Path(tmp), a.baseline_src, a.profile)
        try:
            for r in range(a.repeats):
                turn = systems[r % len(systems) :] + systems[: r % len(systems)]
                for s in turn:
                    row = one_run(s, f"rc{r}", a.requests, a.rate, a.warmup, a.profile)
                    row["repeat"] = r
                    rows.append(row)
                    bench.log(
                        f"{s.name}: leader {row['leader_ms_per_request']:.3f} ms/request, followers "
                        f"{row['follower_ms_per_request']}, {row['achieved_rate']:.0f}/s, leader saw "
                        f"{row['leader_requests']}"
                    )
                    if a.profile is not None and getattr(s.handle, "metrics_ports", None):
                        leader_pid = s.pids()[row["leader"]]
                        files = diagnose.profile_files(a.profile, s.pids(), seen)
                        files = [f for f in files if int(f.name.split("-")[0]) == leader_pid]
                        acc = totals.setdefault(s.name, {})
                        for k, vals in diagnose.profile_totals(files).items():
                            cur = acc.setdefault(k, [0.0, 0.0, 0.0])
                            for j in range(3):
                                cur[j] += vals[j]
                        profiled[s.name] = profiled.get(s.name, 0) + row["produce_requests"]
        finally:
            bench.stop_systems({s.name: s for s in systems})
    Path(a.out).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    md = report(meta, rows)
    Path(a.out).with_suffix(".md").write_text(md + "\n")
    print(md)
    if totals:
        print("\nThe leaders' event loops under cProfile, per million requests:")
        diagnose.print_profiles(totals, profiled)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
