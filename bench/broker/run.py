"""Broker benchmarks: the same workloads against odradek and its peers in one run, with ratios.

Brokers (brokers.py; all started at once and left up for the whole run): ``odradek`` and the
peers named by --peers: ``kafka39``, ``kafka4`` (Apache Kafka, KRaft single node, Kafka's own
JVM flags), ``tansu``, ``mock`` (librdkafka's mock cluster), ``baseline`` (another checkout's
odradek, --baseline-src).

Workloads (workloads.py), at every partition count of --partitions:
  * produce: --records records of 100 B per run; librdkafka fed by produce_batch over --configs
    (partitions/acks/compression; with more than one partition the records are spread over
    all of them), and Kafka's ProducerPerformance over --tools-configs;
  * consume: the acks=1/none topic of each partition count from earliest, by librdkafka and by
    Kafka's ConsumerPerformance;
  * metadata: Metadata v12 round trips for that topic over a raw socket (metadata_probe.py);
and once:
  * e2e: send->consumed latency with librdkafka at each --e2e-rates for --e2e-seconds, and
    Kafka's EndToEndLatency (one record at a time, --e2e-serial records);
  * idle: each broker's CPU and memory with nothing connected, then with --idle-conns idle
    connections held open (idle_conns.py: one ApiVersions each), and the 1-partition produce
    rows again while they stay open.

Every produce, consume and metadata row runs --repeats times per broker, the brokers taking
turns run by run in a rotating order; the report gives medians and each run's ratio. For every
run: records/s, the broker's CPU-seconds per million records (utime+stime of the broker
process from /proc/<pid>/stat: all threads, the JVM's included), its VmRSS and VmHWM after the
run, and the exact command.

Before measuring, every broker gets one unmeasured produce and consume run of each driver
(the JVM's JIT compiles what it runs; the Python broker has nothing to warm beyond its start).

    .venv/bin/python bench/broker/run.py                                  # odradek, Kafka 3.9, Kafka 4
    .venv/bin/python bench/broker/run.py --partitions 1000 --workloads produce,consume,metadata \\
        --out bench/broker/results/p1000.json --chart docs/benchmarks-1000p.png
    .venv/bin/python bench/broker/run.py --peers kafka39,kafka4,tansu      # + Tansu
    .venv/bin/python bench/broker/run.py --quick --peers none             # odradek only (smoke)
    .venv/bin/python bench/broker/run.py --peers baseline --baseline-src /path/to/old/src  # before/after
    .venv/bin/python bench/broker/run.py --profile                        # + py-spy profiles of odradek

Writes bench/broker/results/latest.json and latest.md, and the charts (--chart).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import brokers as brokers_mod  # noqa: E402
import workloads as wl  # noqa: E402
from report import report  # noqa: E402
from runner import Runner, log, rotation  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def parse_configs(text: str) -> list[tuple[int, str, str]]:
    return [(int(c.split("/")[0]), c.split("/")[1], c.split("/")[2]) for c in text.split(",") if c]


def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200k records, 5 s e2e at 5,000/s, 1 partition, 1 repeat")
    ap.add_argument(
        "--peers", default="kafka39,kafka4", help=f"comma list of {','.join(brokers_mod.KNOWN[1:])}, or 'none'"
    )
    ap.add_argument("--baseline-src", default=None, help="the src/ directory of another checkout (peer 'baseline')")
    ap.add_argument("--partitions", default=None, help="partition counts, comma list (default 1,100; --quick 1)")
    ap.add_argument(
        "--configs",
        default=None,
        help="librdkafka produce rows PARTS/ACKS/COMP, comma list (default for each partition count P: "
        "P/1/none,P/all/none,P/1/lz4)",
    )
    ap.add_argument("--tools-configs", default=None, help="ProducerPerformance rows (default P/1/none,P/all/none)")
    ap.add_argument("--records", type=int, default=None, help="records per librdkafka run (default 2,000,000)")
    ap.add_argument("--records-tools", type=int, default=None, help="records per Kafka-tools run (default --records)")
    ap.add_argument("--records-python", type=int, default=None, help="records per odradek-driver run (--records/4)")
    ap.add_argument("--drivers", default="confluent,kafka-tools", help="comma list of confluent, kafka-tools, odradek")
    ap.add_argument("--e2e-rates", default=None, help="records/s of the librdkafka e2e rows (default 5000,50000)")
    ap.add_argument("--e2e-seconds", type=float, default=None, help="seconds of sending per e2e row (default 20)")
    ap.add_argument("--e2e-serial", type=int, default=None, help="records of Kafka's EndToEndLatency (default 5000)")
    ap.add_argument("--metadata-requests", type=int, default=200)
    ap.add_argument("--idle-conns", type=int, default=2000, help="idle connections per broker in the idle rows")
    ap.add_argument("--idle-seconds", type=float, default=10)
    ap.add_argument(
        "--workloads",
        default=None,
        help="comma list of produce,consume,metadata,e2e,idle (default all; --quick produce,consume,e2e)",
    )
    ap.add_argument("--repeats", type=int, default=None, help="runs of every row per broker (default 3, --quick 1)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the unmeasured warm-up runs")
    ap.add_argument("--native-batch", type=int, default=10000, help="records per produce_batch() call")
    ap.add_argument("--profile", action="store_true", help="py-spy profiles of odradek (first repetition)")
    ap.add_argument("--profile-workloads", default="produce,consume", help="which workloads --profile records")
    ap.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE", help="odradek setting")
    ap.add_argument("--chart", default=str(ROOT / "docs" / "benchmarks-kafka.png"), help="PNG path ('' for none)")
    ap.add_argument("--title", default=None, help="title of the charts")
    ap.add_argument("--out", default=str(RESULTS / "latest.json"))
    a = ap.parse_args(argv)
    a.records = a.records or (200_000 if a.quick else 2_000_000)
    a.records_tools = a.records_tools or a.records
    a.records_python = a.records_python or max(1, a.records // 4)
    a.e2e_seconds = a.e2e_seconds or (5 if a.quick else 20)
    a.e2e_serial = a.e2e_serial or (500 if a.quick else 5000)
    a.e2e_rates = [int(x) for x in (a.e2e_rates or ("5000" if a.quick else "5000,50000")).split(",") if x]
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.partitions = [int(x) for x in (a.partitions or ("1" if a.quick else "1,100")).split(",") if x]
    a.configs = parse_configs(a.configs) if a.configs else [
        (p, acks, comp) for p in a.partitions for acks, comp in (("1", "none"), ("all", "none"), ("1", "lz4"))
    ]  # fmt: skip
    a.tools_configs = parse_configs(a.tools_configs) if a.tools_configs else [
        (p, acks, "none") for p in a.partitions for acks in ("1", "all")
    ]  # fmt: skip
    a.drivers = [d for d in a.drivers.split(",") if d]
    default_workloads = "produce,consume,e2e" if a.quick else "produce,consume,metadata,e2e,idle"
    a.workloads = {w for w in (a.workloads or default_workloads).split(",") if w}
    a.profile_workloads = {w for w in a.profile_workloads.split(",") if w}
    a.peers = [] if a.peers in ("none", "") else [p.strip() for p in a.peers.split(",") if p.strip()]
    return a


def warm_up(runners: list[Runner], a) -> None:
    """One unmeasured produce and consume of each driver on every broker (2 partitions, a
    quarter of --records): the JVM compiles its hot paths during the first loads it serves."""
    n = max(1000, a.records // 4)
    for r in runners:
        for driver in [d for d in ("confluent", "kafka-tools") if d in a.drivers]:
            t = {
                "workload": "produce",
                "driver": "confluent-batch" if driver == "confluent" else driver,
                "partitions": 2,
                "acks": "1",
                "compression": "none",
                "records": n,
                "idle_conns": 0,
            }
            row, topic = wl.run_produce(r, t, -1, None)
            if row is not None:
                wl.run_consume(r, t, driver, topic, -1, None)
            r.delete_topic(topic)
        r.results = [x for x in r.results if x.get("rep") != -1]


def run_partition_count(runners: list[Runner], a, parts: int) -> None:
    def prof(r: Runner, name: str, workload: str, rep: int) -> str | None:
        ok = a.profile and r.name == "odradek" and workload in a.profile_workloads and rep == 0
        return str(RESULTS / name) if ok else None

    kept: dict[str, tuple[dict, str]] = {}  # broker -> (task, topic) of the topic the consume rows read
    if "produce" in a.workloads or "consume" in a.workloads or "metadata" in a.workloads:
        tasks = [t for t in wl.produce_tasks(a) if t["partitions"] == parts]
        if "produce" not in a.workloads:
            tasks = [t for t in tasks if t["feeds_consume"]][:1]
        for t in tasks:
            for rep in range(a.repeats):
                for r in rotation(runners, rep):
                    profile = prof(r, f"profile-produce-{parts}p.txt", "produce", rep)
                    profiled = t["driver"] == "confluent-batch" and (t["acks"], t["compression"]) == ("1", "none")
                    row, topic = wl.run_produce(r, t, rep, profile if profiled else None)
                    if t["feeds_consume"] and row is not None and r.name not in kept:
                        kept[r.name] = (t, topic)
                    else:
                        r.delete_topic(topic)
    if "consume" in a.workloads:
        for driver in [d for d in a.drivers if d in ("confluent", "kafka-tools", "odradek")]:
            for rep in range(a.repeats):
                for r in rotation(runners, rep):
                    if r.name in kept:
                        t, topic = kept[r.name]
                        profile = prof(r, f"profile-consume-{parts}p.txt", "consume", rep)
                        wl.run_consume(r, t, driver, topic, rep, profile if driver == "confluent" else None)
    if "metadata" in a.workloads:
        for rep in range(a.repeats):
            for r in rotation(runners, rep):
                if r.name in kept and r.name != "mock":
                    wl.run_metadata(r, kept[r.name][1], parts, rep, a.metadata_requests)
    for r in runners:
        if r.name in kept:
            r.delete_topic(kept[r.name][1])


def run_idle(runners: list[Runner], a) -> list[dict]:
    rows = wl.idle_baseline(runners, a.idle_seconds)
    idle = wl.IdleConnections(runners, a.idle_conns, a.idle_seconds)
    try:
        rows += idle.open()
        tasks = [t for t in wl.produce_tasks(a, idle_conns=a.idle_conns) if t["partitions"] == 1]
        tasks = [t for t in tasks if t["acks"] == "1" and t["compression"] == "none" and t["driver"] != "odradek"]
        for t in tasks:
            for rep in range(a.repeats):
                for r in rotation(runners, rep):
                    _, topic = wl.run_produce(r, t, rep, None)
                    r.delete_topic(topic)
    finally:
        idle.close()
    return rows


def run_all(runners: list[Runner], a) -> list[dict]:
    extra: list[dict] = []
    if not a.no_warmup and ({"produce", "consume"} & a.workloads):
        warm_up(runners, a)
    for parts in a.partitions:
        run_partition_count(runners, a, parts)
    if "e2e" in a.workloads:
        drivers = [d for d in a.drivers if d in ("confluent", "odradek")]
        for driver in drivers:
            for rate in a.e2e_rates:
                for r in runners:
                    want = a.profile and "e2e" in a.profile_workloads and r.name == "odradek"
                    wl.run_e2e(r, driver, rate, a, str(RESULTS / f"profile-e2e-{rate}.txt") if want else None)
        if "kafka-tools" in a.drivers:
            for r in runners:
                if r.name != "mock":
                    wl.run_e2e(r, "kafka-tools", None, a, None)
    if "idle" in a.workloads:
        extra += run_idle(runners, a)
    return extra


def raise_fd_limit() -> None:
    """Brokers inherit the runner's limits: 2,000 idle connections need more than 1,024 fds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv=None) -> int:
    a = options(argv)
    for p in list(a.peers):
        why = brokers_mod.available(p)
        if why:
            log(f"{p}: {why}; left out")
            a.peers.remove(p)
    if "baseline" in a.peers and not a.baseline_src:
        raise SystemExit("peer 'baseline' needs --baseline-src")
    if "kafka-tools" in a.drivers and brokers_mod.available("kafka39"):
        log(f"kafka-tools driver: {brokers_mod.available('kafka39')}; left out")
        a.drivers.remove("kafka-tools")
    names = ["odradek", *a.peers]
    raise_fd_limit()
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": os.uname().nodename,
        "cpus": os.cpu_count(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "records": a.records,
        "records_tools": a.records_tools,
        "records_python": a.records_python,
        "partitions": a.partitions,
        "e2e_rates": a.e2e_rates,
        "e2e_seconds": a.e2e_seconds,
        "repeats": a.repeats,
        "native_batch": a.native_batch,
        "argv": sys.argv[1:] if argv is None else argv,
        "versions": {},
    }
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
        runners: list[Runner] = []
        try:
            overrides = dict(o.split("=", 1) for o in a.broker_override)
            for name in names:
                peer = brokers_mod.start_peer(name, Path(tmp), overrides, a.baseline_src)
                meta["versions"][name] = peer.version
                runners.append(Runner(peer, a))
                log(f"== {name} {peer.version} at {peer.bootstrap} (pid {peer.pid})")
            for r in runners:
                brokers_mod.settle(r.pid, timeout=60)
            rows += run_all(runners, a)
        finally:
            meta["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
            for r in runners:
                r.peer.stop()
                rows += r.results
            Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    md = report(rows, names, meta)
    Path(a.out).with_suffix(".md").write_text(md + "\n")
    print(md)
    if a.chart:
        try:
            import plots
        except ImportError:
            log("matplotlib not installed (pip install -e '.[bench]'): no chart")
        else:
            title = a.title or (
                f"odradek vs {', '.join(a.peers) or 'nothing'}: 100-byte records, "
                f"partitions {', '.join(map(str, a.partitions))}, one 2-core machine ({meta['when']})"
            )
            for p in plots.charts(rows, names, Path(a.chart), title):
                log(f"chart: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
