"""Transactions' cost on the broker (issue #15): the same producer with and without transactions,
and the same topic read with read_committed and read_uncommitted, in one run per broker.

Brokers (bench/broker/brokers.py, single node on 127.0.0.1): ``kafka4`` (Apache Kafka 4.4, KRaft,
Kafka's own JVM flags), ``odradek`` (this checkout) and ``baseline`` (another checkout's odradek,
--baseline-src, for before/after in one run).

Workloads (bench/txn/load.py, each its own process; librdkafka through confluent-kafka; 100 B
records over --partitions partitions, acks=all, idempotent):
  * produce, plain: as fast as the producer goes for --seconds;
  * produce, transactional at each of --rates transactions/s: the same, committing every 1/R s
    (the commit is synchronous: where one takes longer than 1/R, the achieved rate, in its own
    column, is what the commits allow);
  * consume: the topic of the highest rate (markers in every partition R times a second), from
    the start to the end, once read_uncommitted and once read_committed.

Before measuring, each broker gets one unmeasured --warmup-seconds transactional produce and a
read of it at each isolation level (the JVM's JIT).

Each row: records/s, the broker's CPU-seconds per million records (utime+stime of the broker
process from /proc/<pid>/stat over the load's run, every thread), its memory, the command. Rows
run --repeats times, brokers taking turns; the report gives medians. On this shared 2-core
machine keep it short: the CPU-seconds per million records is the figure to compare, the rates
swing with the neighbours' load.

    .venv/bin/python bench/txn/run.py --brokers kafka4 --seconds 3 --repeats 1     # smoke
    .venv/bin/python bench/txn/run.py --brokers kafka4,odradek --seconds 10 --repeats 3
    .venv/bin/python bench/txn/run.py --brokers kafka4,odradek,baseline --baseline-src /old/src  # before/after

Writes bench/txn/results/latest.json and latest.md (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench" / "broker"))

import brokers as brokers_mod  # noqa: E402
from runner import Runner, log, rotation  # noqa: E402

HERE = Path(__file__).resolve().parent
LOAD = str(HERE / "load.py")


def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="kafka4", help="comma list of kafka4, odradek, baseline")
    ap.add_argument("--baseline-src", default=None, help="the src/ directory of another checkout (broker 'baseline')")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each produce run")
    ap.add_argument("--rates", default="1,10,100", help="transactions per second, comma list")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--warmup-seconds", type=float, default=2.0, help="unmeasured produce per broker first (0: none)")
    ap.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    return ap.parse_args(argv)


def produce_cmd(bootstrap: str, topic: str, a, rate: float) -> list[str]:
    cmd = [sys.executable, LOAD, "produce", bootstrap, topic, "--seconds", str(a.seconds)]
    cmd += ["--partitions", str(a.partitions)]
    return cmd + (["--txn-rate", str(rate)] if rate else [])


def consume_cmd(bootstrap: str, topic: str, a, isolation: str) -> list[str]:
    return [
        sys.executable,
        LOAD,
        "consume",
        bootstrap,
        topic,
        "--isolation",
        isolation,
        "--partitions",
        str(a.partitions),
    ]


def warm_up(r: Runner, a) -> None:
    """One unmeasured transactional produce and read of each isolation (the JVM compiles what it
    runs); its rows are dropped."""
    topic = "bench-warm-up"
    r.create_topic(topic, a.partitions)
    warm = argparse.Namespace(**{**vars(a), "seconds": a.warmup_seconds})
    r.run(produce_cmd(r.bootstrap, topic, warm, 10.0), {"workload": "warm-up"})
    for isolation in ("read_uncommitted", "read_committed"):
        r.run(consume_cmd(r.bootstrap, topic, a, isolation), {"workload": "warm-up"})
    r.results.clear()
    brokers_mod.settle(r.pid)


def run_all(runners: list[Runner], a) -> None:
    rates = [float(r) for r in a.rates.split(",") if r]
    for r in runners:
        if a.warmup_seconds > 0:
            warm_up(r, a)
    for rep in range(a.repeats):
        for r in rotation(runners, rep):
            for rate in [0.0, *rates]:
                name = "plain" if not rate else f"txn{rate:g}"
                topic = f"bench-{name}-{rep}"
                r.create_topic(topic, a.partitions)
                meta = {"workload": "produce", "mode": name, "txn_per_s": rate or None, "repeat": rep}
                written = r.run(produce_cmd(r.bootstrap, topic, a, rate), meta)
                brokers_mod.settle(r.pid)
            topic = f"bench-txn{max(rates):g}-{rep}"
            # the two isolation levels take turns going first, repeat by repeat
            order = ["read_uncommitted", "read_committed"][:: 1 if rep % 2 == 0 else -1]
            for isolation in order:
                meta = {"workload": "consume", "mode": isolation, "topic": topic, "repeat": rep}
                if written is None:  # the topic's produce run failed: nothing to read
                    r.results.append({"broker": r.name, **meta, "error": "its topic was not written"})
                    continue
                r.run(consume_cmd(r.bootstrap, topic, a, isolation), meta)
                brokers_mod.settle(r.pid)


def report(rows: list[dict], meta: dict) -> str:
    out = [
        f"Run {meta['when']} on {meta['cpus']} CPUs, load average at start {meta['load']:.2f}; "
        f"{meta['seconds']} s per produce run, {meta['partitions']} partitions, 100 B records, "
        f"median of {meta['repeats']}; versions: {meta['versions']}",
        "",
        "| broker | workload | mode | records/s | broker CPU-s / M records | transactions/s | records |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    keys: dict[tuple, list[dict]] = {}
    for row in rows:
        keys.setdefault((row["broker"], row["workload"], row["mode"]), []).append(row)
    for (broker, workload, mode), rs in keys.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            last = (rs[0]["error"].strip().splitlines() or ["?"])[-1]
            out.append(f"| {broker} | {workload} | {mode} | failed: {last[:160].replace('|', '/')} | | | |")
            continue

        def med(k, ok=ok):
            vals = [r[k] for r in ok if r.get(k) is not None]
            return statistics.median(vals) if vals else None

        tps = med("txn_rate_achieved")
        out.append(
            f"| {broker} | {workload} | {mode} | {med('records_per_s') or 0:,.0f} | "
            f"{med('broker_cpu_s_per_m') or 0:.2f} | {'' if tps is None else f'{tps:.1f}'} | {med('records'):,.0f} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    a = options(argv)
    names = [b for b in a.brokers.split(",") if b]
    if "baseline" in names and not a.baseline_src:
        raise SystemExit("broker 'baseline' needs --baseline-src")
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
        "seconds": a.seconds,
        "partitions": a.partitions,
        "repeats": a.repeats,
        "versions": {},
    }
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        peers = []
        try:
            for name in names:
                reason = brokers_mod.available(name)
                if reason:
                    log(f"{name}: {reason}; left out")
                    continue
                peers.append(brokers_mod.start_peer(name, Path(tmp), {}, a.baseline_src))
                meta["versions"][name] = peers[-1].version
            runners = [Runner(p, a) for p in peers]
            for r in runners:
                brokers_mod.settle(r.pid)
            run_all(runners, a)
            rows = [row for r in runners for row in r.results]
        finally:
            for p in peers:
                p.stop()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    text = report(rows, meta)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
