"""Using more than one core: one odradek broker, two odradek brokers on the same machine, and
one Apache Kafka 4.4 broker (a JVM, which uses every core), under the same client and load.

One odradek broker process runs one event loop, so it uses about one core; the way to use a
machine's cores is one broker per core in a cluster (docs/cluster.md, "Using more than one
core"). This measures what that gives on this machine.

Systems (127.0.0.1, free ports, temp dirs; one per invocation, so each holds the heavy lock
alone, and the rows are merged into one results file):
* `single`: one odradek broker, no ZooKeeper (bench/cluster/run.py's `single`);
* `odradek2`: two odradek brokers and a private ZooKeeper (tests/support/odradek_cluster.py),
  topics whose 6 partitions' leaders are split 3/3 over the two brokers, at replication factor
  1 (acks=1) and 2 (acks=all, min.insync.replicas=2);
* `kafka`: one Apache Kafka 4.4 broker, KRaft, combined broker+controller, `-Xmx512m`
  (tests/support/apache_kafka.py).

Load (librdkafka through `odradek perf ... --driver confluent`, as bench/cluster/run.py; the
client runs on the same 2 cores and its CPU is reported too), 100 B records, 6 partitions:
* `batched`: `--native-batch 1000`, linger 5 ms: large batches, few requests;
* `small`: linger 0 and `batch.num.messages=10`: many small requests, where a broker's CPU per
  request, not per byte, is the limit;
* `consume`: the batched topic read back from earliest.
Broker CPU is utime+stime of every broker process (JVM threads included; ZooKeeper not counted).

    .venv/bin/python bench/cluster/multicore.py --system single     # then odradek2, then kafka
    .venv/bin/python bench/cluster/multicore.py --report            # the report from the rows so far

Rows go to bench/cluster/results/multicore.json (a system's earlier rows are replaced), the
report to multicore.md.
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
import run as bench  # noqa: E402  (bench/cluster/run.py: systems, perf, CPU and RSS helpers)
from support.apache_kafka import ApacheKafka, unavailable_reason  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402
from support.odradek_cluster import OdradekCluster  # noqa: E402

OUT = bench.RESULTS / "multicore.json"
SYSTEMS = ("single", "odradek2", "kafka")
LOADS = {
    "batched": ("--native-batch", "1000"),
    "small": ("--native-batch", "1000", "--linger-ms", "0", "-X", "batch.num.messages=10"),
}
PARTITIONS = 6


def start(name: str, tmp: Path) -> tuple[object, list[bench.System]]:
    """The system's handle and one bench.System per replication factor it is measured at."""
    if name == "single":
        h = BrokerProcess(tmp / name, {"log.segment.delete.delay.ms": 0})
        h.start(timeout=60)
        return h, [bench.System("single", 1, h)]
    if name == "odradek2":
        c = OdradekCluster(tmp / name, brokers=2, overrides={"zookeeper.session.timeout.ms": bench.SESSION_MS})
        c.start()
        return c, [bench.System("odradek2 rf1", 1, c), bench.System("odradek2 rf2", 2, c)]
    why = unavailable_reason("4")
    if why:
        raise SystemExit(f"Kafka 4.4 cannot run here: {why}")
    k = ApacheKafka(tmp / "kafka", line="4", brokers=1)
    k.start(timeout=180)
    return k, [bench.System(f"kafka {k.version}", 1, k)]


def leaders(system: bench.System, topic: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for p in bench.partitions_of(system.bootstrap, topic):
        out[p.leader] = out.get(p.leader, 0) + 1
    return out


def run_system(name: str, a: argparse.Namespace) -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="odradek-multicore-") as tmp:
        handle, systems = start(name, Path(tmp))
        try:
            s0 = systems[0]
            s0.create("warmup", PARTITIONS)  # the JVM's JIT, odradek's caches; not measured
            bench.perf("produce", s0.bootstrap, "warmup", "-n", "300000", *LOADS["batched"])
            bench.perf(
                "consume", s0.bootstrap, "warmup", "-n", "300000", "--fetch-max-wait-ms", "10", "--timeout", "30"
            )
            for r in range(a.repeats):
                for s in systems:
                    acks = "all" if s.rf > 1 else "1"
                    for load, args in LOADS.items():
                        n = a.records if load == "batched" else a.small_records
                        topic = f"{load}-r{r}-rf{s.rf}"
                        s.create(topic, PARTITIONS)
                        row = bench.measured(
                            s, f"produce {load}", "produce", topic, n, "-n", str(n), "--acks", acks, *args
                        )
                        row.update(repeat=r, rf=s.rf, acks=acks, records=n, leaders=leaders(s, topic))
                        rows.append(row)
                        bench.log(f"{s.name} {row['row']}: {row['records_per_s']:,.0f} rec/s, {row['cpu_per_m']:.2f}")
                    topic = f"batched-r{r}-rf{s.rf}"
                    row = bench.measured(
                        s,
                        "consume",
                        "consume",
                        topic,
                        a.records,
                        "-n",
                        str(a.records),
                        "--fetch-max-wait-ms",
                        "10",
                        "--timeout",
                        "30",
                    )
                    row.update(repeat=r, rf=s.rf, records=a.records)
                    rows.append(row)
                    bench.log(f"{s.name} consume: {row['records_per_s']:,.0f} rec/s, {row['cpu_per_m']:.2f}")
        finally:
            handle.stop()
    return rows


def _med(rows: list[dict], key) -> float:  # noqa: ANN001
    vals = [key(r) for r in rows]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else float("nan")


def report(doc: dict) -> str:
    rows = doc["rows"]
    runs = doc["runs"]
    out = [
        f"{os.cpu_count()} CPUs ({doc.get('host', '')}); one system at a time under the heavy lock (no other "
        "broker or benchmark running; other developers' lighter work was, see the load averages): "
        + "; ".join(f"{k} at {v['started']} (load avg {v['loadavg'][0]:.2f})" for k, v in runs.items()),
        f"Medians of {max((r.get('repeat', 0) for r in rows), default=0) + 1} runs; 100 B records, {PARTITIONS} "
        "partitions; CPU-s/M = broker CPU-seconds per million records (all brokers); cores = broker CPU-seconds "
        "per second of the run; client = the librdkafka process's CPU-seconds per million.",
        "",
        "| row | system | acks | records/s | CPU-s/M | per broker | broker cores | client CPU-s/M | leaders per broker "
        "| RSS MB | records/s vs single | vs Kafka |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    names = sorted({r["system"] for r in rows}, key=lambda s: (s.startswith("kafka"), s))
    kafka = next((n for n in names if n.startswith("kafka")), None)
    for row in ("produce batched", "produce small", "consume"):
        base = {}
        for ref in ("single", kafka):
            sel = [r for r in rows if r["row"] == row and r["system"] == ref]
            base[ref] = _med(sel, lambda r: r["records_per_s"]) if sel else float("nan")
        for name in names:
            sel = [r for r in rows if r["row"] == row and r["system"] == name]
            if not sel:
                continue
            rps = _med(sel, lambda r: r["records_per_s"])
            cpu_m = _med(sel, lambda r: r["cpu_per_m"])
            cores = _med(sel, lambda r: r["cpu_per_m"] * r["records_per_s"] / 1e6)
            client = _med(sel, lambda r: (r["raw"].get("client_cpu_s") or 0) / (r["records"] / 1e6))
            lead = sel[0].get("leaders")
            lead_s = "/".join(str(v) for _, v in sorted(lead.items())) if lead else ""
            ids = sorted(sel[0]["cpu_per_broker_per_m"])
            per = "/".join(f"{_med(sel, lambda r, i=i: r['cpu_per_broker_per_m'][i]):.2f}" for i in ids)
            rss = "/".join(f"{sel[-1]['rss_mb'][i]:.0f}" for i in ids)
            out.append(
                f"| {row} | {name} | {sel[0].get('acks', '')} | {rps:,.0f} | {cpu_m:.2f} | {per} | {cores:.2f} "
                f"| {client:.2f} "
                f"| {lead_s} | {rss} | {bench._ratio(rps, base['single'])} | {bench._ratio(rps, base[kafka])} |"
            )
    out.append("")
    out.append("Commands (-b and -t left out): " + "; ".join(f"`{c}`" for c in sorted({_args(r) for r in rows})))
    return "\n".join(out)


def _args(r: dict) -> str:
    parts = r["command"].split()
    keep = [p for i, p in enumerate(parts) if not (i > 0 and parts[i - 1] in ("-b", "-t"))]
    return " ".join(x for x in keep if x not in ("-b", "-t"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=SYSTEMS)
    ap.add_argument("--report", action="store_true", help="only rebuild the report from --out")
    ap.add_argument("--records", type=int, default=2_000_000, help="records per batched produce/consume run")
    ap.add_argument("--small-records", type=int, default=500_000, help="records per small-request run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops the brokers (finally)
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.exists() else {"runs": {}, "rows": []}
    if a.system:
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        load = os.getloadavg()
        rows = run_system(a.system, a)
        prefix = a.system if a.system != "kafka" else "kafka"
        doc["rows"] = [r for r in doc["rows"] if not r["system"].startswith(prefix)] + rows
        doc["runs"][a.system] = {"started": started, "loadavg": load, "argv": sys.argv[1:]}
        doc["host"] = os.uname().nodename
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1))
    elif not a.report:
        ap.error("--system or --report")
    md = report(doc)
    out.with_suffix(".md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
