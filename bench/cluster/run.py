"""Cluster benchmark: an odradek 3-broker cluster beside Apache Kafka 3.9's, and a single node.

Started together (127.0.0.1, free ports, temp dirs), all up for the whole run:
* `single`: one odradek broker, no ZooKeeper (the embedded default: its figures must not move);
* `odradek`: 3 odradek brokers and a private ZooKeeper (Debian's server);
* `kafka`: 3 Apache Kafka 3.9.2 brokers in ZooKeeper mode with their own ZooKeeper (`-Xmx512m`
  each; tests/support/apache_kafka.py), the reference;
* `single-baseline`, `baseline`: the same two odradek set-ups running another checkout's code
  (--baseline-src, e.g. a worktree of the previous main), for before/after in the same run.
Both clusters run with `zookeeper.session.timeout.ms=6000`. Load comes from librdkafka (`odradek
perf ... --driver confluent`, fed by `produce_batch` lists of 1000 records: a C client, so no
Python loop per record hides the brokers). Broker CPU is utime+stime from /proc of every broker
process (the JVMs' every thread included; the ZooKeepers not counted), summed over the cluster.

Rows (every throughput row --repeats times, the systems taking turns in a rotating order; the
report gives medians and each run's ratio odradek / Kafka):
* produce: N records of 100 B into 6 partitions, replication factor 3, acks=all,
  min.insync.replicas=2 (single node: replication factor 1, acks=1 and acks=all);
* consume: the same topic from earliest (the clusters' consumers read from the leaders);
* one partition, acks=all: each broker's CPU per million records, leader against followers;
* e2e: send->consumed latency p50/p99 at fixed rates, acks=all (single node acks=1);
* failover: a producer writing acks=all at 2,000 records/s, idempotent; the partition's leader
  is killed (-9) or stopped (SIGTERM, controlled shutdown); the longest time between two
  acknowledgements around it is the unavailability clients saw.

    .venv/bin/python bench/cluster/run.py [--records 1000000] [--repeats 3] [--systems single,odradek,kafka]
        [--chart docs/cluster-bench.png]
    .venv/bin/python bench/cluster/run.py --systems single,single-baseline,odradek,baseline,kafka \
        --baseline-src /path/to/previous/main/src

Writes bench/cluster/results/latest.json (every run) and latest.md (the report).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support.apache_kafka import ApacheKafka, unavailable_reason  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402
from support.odradek_cluster import OdradekCluster  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PERF = [sys.executable, "-m", "odradek", "perf"]
SESSION_MS = 6000
E2E_RATES = ((1000, 0), (5000, 5))  # (records/s, linger.ms)


def cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class System:
    """One system under test: its name, bootstrap, broker processes by id, and how to create topics."""

    def __init__(self, name: str, rf: int, handle: object) -> None:
        self.name = name
        self.rf = rf
        self.handle = handle

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    def processes(self) -> dict[int, object]:
        h = self.handle
        if isinstance(h, BrokerProcess):
            return {1: h}
        if isinstance(h, OdradekCluster):
            return dict(h.brokers)
        return {n.node_id: n for n in h.nodes}

    def pids(self) -> dict[int, int]:
        return {i: p.proc.pid for i, p in self.processes().items()}

    def create(self, topic: str, partitions: int) -> None:
        config = {"min.insync.replicas": "2"} if self.rf > 1 else {}
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics(
            [NewTopic(topic, partitions, self.rf, config=config)], operation_timeout=30
        ).values():
            f.result()
        wait_for(lambda: all(len(p.isrs) == self.rf for p in partitions_of(self.bootstrap, topic)), 60, "a full ISR")

    def leader(self, topic: str) -> int:
        return partitions_of(self.bootstrap, topic)[0].leader


def partitions_of(bootstrap: str, topic: str) -> list:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        return []
    return [t.partitions[p] for p in sorted(t.partitions)]


def wait_for(cond, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001, S110 - metadata not there yet
            pass
        time.sleep(0.2)
    raise TimeoutError(f"waited {timeout} s for {what}")


def perf(kind: str, bootstrap: str, topic: str, *args: str) -> tuple[dict, list[str]]:
    cmd = [*PERF, kind, "-b", bootstrap, "-t", topic, "--driver", "confluent", "--json", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), cmd


def measured(system: System, name: str, kind: str, topic: str, n: int, *args: str) -> dict:
    pids = system.pids()
    before = {i: cpu(p) for i, p in pids.items()}
    res, cmd = perf(kind, system.bootstrap, topic, *args)
    used = {i: cpu(p) - before[i] for i, p in pids.items()}
    return {
        "row": name,
        "system": system.name,
        "records_per_s": res.get("records_per_s"),
        "cpu_per_m": sum(used.values()) / (n / 1e6),
        "cpu_per_broker_per_m": {i: u / (n / 1e6) for i, u in used.items()},
        "rss_mb": {i: rss_mb(p) for i, p in pids.items()},
        "command": " ".join(cmd[2:]),
        "raw": res,
    }


def failover(system: System, topic: str, how: str, rate: int = 2000, seconds: float = 12) -> dict:
    """Longest gap between acknowledgements (s) while the partition's leader is killed or stopped."""
    leader = system.leader(topic)
    acks: list[float] = []
    errors: list[str] = []
    conf = {"bootstrap.servers": system.bootstrap, "acks": "all", "linger.ms": 1, "enable.idempotence": True}
    p = Producer(conf)
    stop = threading.Event()

    def delivered(err, _msg) -> None:  # noqa: ANN001
        if err is None:
            acks.append(time.monotonic())
        else:
            errors.append(str(err))

    def write() -> None:
        i = 0
        start = time.monotonic()
        while not stop.is_set():
            p.produce(topic, b"x" * 100, partition=0, on_delivery=delivered)
            p.poll(0)
            i += 1
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        p.flush(60)

    t = threading.Thread(target=write)
    t.start()
    time.sleep(3)
    proc = system.processes()[leader]
    killed_at = time.monotonic()
    if how == "kill":
        proc.kill()
    else:
        proc.stop()
    time.sleep(seconds)
    stop.set()
    t.join()
    proc.start(timeout=120)
    wait_for(lambda: all(len(x.isrs) == system.rf for x in partitions_of(system.bootstrap, topic)), 120, "the ISR")
    gaps = [(b - a, a) for a, b in zip(acks, acks[1:])]
    gap, at = max(gaps) if gaps else (float("nan"), 0.0)
    return {
        "row": f"failover {how}",
        "system": system.name,
        "max_gap_s": gap,
        "gap_started_after_s": at - killed_at,
        "acked": len(acks),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


SYSTEMS = ("single", "single-baseline", "odradek", "baseline", "kafka")
#: after / before pairs of the report
BEFORE_AFTER = (("single", "single-baseline"), ("odradek", "baseline"))


def start_systems(names: list[str], tmp: Path, baseline_src: str | None = None) -> dict[str, System]:
    unknown = set(names) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)} (known: {', '.join(SYSTEMS)})")
    if {"baseline", "single-baseline"} & set(names) and not baseline_src:
        raise SystemExit("the baseline systems need --baseline-src")
    base = str(Path(baseline_src).resolve()) if baseline_src else ""
    systems: dict[str, System] = {}
    for name in ("single", "single-baseline"):
        if name in names:
            src = base if name == "single-baseline" else None
            single = BrokerProcess(tmp / name, {"log.segment.delete.delay.ms": 0}, src=src)
            single.start(timeout=60)
            systems[name] = System(name, 1, single)
    for name in ("odradek", "baseline"):
        if name in names:
            env = {i: {"PYTHONPATH": base} for i in (1, 2, 3)} if name == "baseline" else None
            c = OdradekCluster(
                tmp / name, brokers=3, overrides={"zookeeper.session.timeout.ms": SESSION_MS}, broker_env=env
            )
            c.start()
            systems[name] = System(name, 3, c)
    if "kafka" in names:
        why = unavailable_reason("3.9")
        if why:
            raise SystemExit(f"Kafka 3.9 cannot run here: {why} (bash scripts/install-test-deps.sh)")
        k = ApacheKafka(
            tmp / "kafka", line="3.9", brokers=3, zookeeper=True, overrides={"zookeeper.session.timeout.ms": SESSION_MS}
        )
        k.start(timeout=180)
        systems["kafka"] = System("kafka", 3, k)
    return systems


def stop_systems(systems: dict[str, System]) -> None:
    for s in systems.values():
        try:
            s.handle.stop()
        except Exception as e:  # noqa: BLE001
            log(f"stopping {s.name}: {e!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default="single,odradek,kafka")
    ap.add_argument("--e2e-seconds", type=float, default=20)
    ap.add_argument("--no-failover", action="store_true")
    ap.add_argument("--baseline-src", default=None, help="the src/ of another checkout, for the baseline systems")
    ap.add_argument(
        "--parts",
        default="throughput,one,e2e,failover",
        help="which rows to run: throughput (produce/consume), one (one partition's CPU), e2e, failover",
    )
    ap.add_argument("--out", default=str(RESULTS / "latest.json"))
    ap.add_argument("--chart", default="")
    a = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    names = a.systems.split(",")
    load = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    rows: list[dict] = []
    n = a.records
    batch = ("--native-batch", "1000")
    with tempfile.TemporaryDirectory(prefix="odradek-cluster-bench-") as tmp:
        systems = start_systems(names, Path(tmp), a.baseline_src)
        try:
            order = list(systems.values())
            for s in order:  # warm up produce and consume (the JVMs' JIT, odradek's caches), not measured
                s.create("warmup", 6)
                perf("produce", s.bootstrap, "warmup", "-n", "300000", "--acks", "all", *batch)
                perf("consume", s.bootstrap, "warmup", "-n", "300000", "--fetch-max-wait-ms", "10", "--timeout", "30")
            rows.append({"row": "idle", "rss_mb": {s.name: {i: rss_mb(p) for i, p in s.pids().items()} for s in order}})
            parts = set(a.parts.split(","))
            for r in range(a.repeats if "throughput" in parts else 0):
                turn = order[r % len(order) :] + order[: r % len(order)]
                for s in turn:
                    ackses = ("1", "all") if s.rf == 1 else ("all",)
                    for acks in ackses:
                        tp = f"t{r}-acks{acks}"
                        s.create(tp, 6)
                        row = measured(
                            s, f"produce acks={acks}", "produce", tp, n, "-n", str(n), "--acks", acks, *batch
                        )
                        row["repeat"] = r
                        rows.append(row)
                        log(
                            f"{s.name} produce acks={acks}: {row['records_per_s']:,.0f} rec/s, "
                            f"{row['cpu_per_m']:.2f} CPU-s/M"
                        )
                    topic = f"t{r}-acks{ackses[0]}"
                    row = measured(
                        s, "consume", "consume", topic, n, "-n", str(n), "--fetch-max-wait-ms", "10", "--timeout", "30"
                    )
                    row["repeat"] = r
                    rows.append(row)
                    log(f"{s.name} consume: {row['records_per_s']:,.0f} rec/s, {row['cpu_per_m']:.2f} CPU-s/M")
            for s in order if "one" in parts else ():
                if s.rf == 1:
                    continue
                s.create("one", 1)
                leader = s.leader("one")
                row = measured(s, "one partition acks=all", "produce", "one", n, "-n", str(n), "--acks", "all", *batch)
                row["leader"] = leader
                rows.append(row)
                per = row["cpu_per_broker_per_m"]
                log(
                    f"{s.name} one partition: leader {per[leader]:.2f}, followers "
                    + ", ".join(f"{v:.2f}" for i, v in per.items() if i != leader)
                )
            for rate, linger in E2E_RATES if "e2e" in parts else ():
                for s in order:
                    topic = f"e2e-{rate}"
                    s.create(topic, 1)
                    acks = "1" if s.rf == 1 else "all"
                    res, cmd = perf(
                        "e2e",
                        s.bootstrap,
                        topic,
                        "--rate",
                        str(rate),
                        "--duration",
                        str(a.e2e_seconds),
                        "--acks",
                        acks,
                        "--linger-ms",
                        str(linger),
                    )
                    rows.append(
                        {
                            "row": f"e2e {rate}/s linger {linger}",
                            "system": s.name,
                            "raw": res,
                            "command": " ".join(cmd[2:]),
                        }
                    )
                    lat = res["latency_ms"]
                    log(f"{s.name} e2e {rate}/s: p50 {lat['p50']:.2f} ms p99 {lat['p99']:.2f} ms")
            if not a.no_failover and "failover" in parts:
                for s in order:
                    if s.rf == 1:
                        continue
                    s.create("fail", 1)
                    for how in ("kill", "sigterm"):
                        row = failover(s, "fail", how)
                        rows.append(row)
                        log(f"{s.name} failover by {how}: longest gap {row['max_gap_s']:.2f} s, errors {row['errors']}")
        finally:
            stop_systems(systems)
    meta = {"started": started, "loadavg": load, "argv": sys.argv[1:], "records": n, "host": os.uname().nodename}
    Path(a.out).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    md = report(meta, rows)
    Path(a.out).with_suffix(".md").write_text(md + "\n")
    print(md)
    if a.chart:
        chart(rows, Path(a.chart))
    return 0


def _runs(rows: list[dict], row: str, system: str) -> list[dict]:
    return [r for r in rows if r["row"] == row and r.get("system") == system]


def _median(rows: list[dict], row: str, system: str, key: str) -> float:
    vals = [r[key] for r in _runs(rows, row, system) if r.get(key) is not None]
    return statistics.median(vals) if vals else float("nan")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and b == b and a == a else "-"


def report(meta: dict, rows: list[dict]) -> str:
    la = " ".join(f"{x:.2f}" for x in meta["loadavg"])
    out = [
        f"Run {meta['started']} on {meta['host']} ({os.cpu_count()} CPUs, load avg at start {la}); "
        f"{meta['records']:,} records of 100 B per produce/consume run; medians of the runs; "
        "CPU = broker CPU-seconds per million records, summed over the cluster's brokers.",
        "",
        "| row | system | records/s | CPU-s/M | odradek / Kafka records/s (each run) | odradek / Kafka CPU-s/M |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in ("produce acks=1", "produce acks=all", "consume"):
        for system in SYSTEMS:
            if not _runs(rows, row, system):
                continue
            rps = _median(rows, row, system, "records_per_s")
            cpu_m = _median(rows, row, system, "cpu_per_m")
            vs = vs_cpu = ""
            if system == "odradek" and _runs(rows, row, "kafka"):
                each = [
                    o["records_per_s"] / k["records_per_s"]
                    for o, k in zip(_runs(rows, row, "odradek"), _runs(rows, row, "kafka"))
                ]
                k_rps = _median(rows, row, "kafka", "records_per_s")
                vs = f"{_ratio(rps, k_rps)} ({' '.join(f'{x:.2f}' for x in each)})"
                vs_cpu = _ratio(cpu_m, _median(rows, row, "kafka", "cpu_per_m"))
            out.append(f"| {row} | {system} | {rps:,.0f} | {cpu_m:.2f} | {vs} | {vs_cpu} |")
    pairs = [(a, b) for a, b in BEFORE_AFTER if any(r.get("system") == b for r in rows)]
    if pairs:
        out += [
            "",
            "| row | after / before | records/s (after / before) | CPU-s/M (after / before) |",
            "|---|---|---:|---:|",
        ]
        for row in ("produce acks=1", "produce acks=all", "consume", "one partition acks=all"):
            for after, before in pairs:
                if not (_runs(rows, row, after) and _runs(rows, row, before)):
                    continue
                rps = _ratio(_median(rows, row, after, "records_per_s"), _median(rows, row, before, "records_per_s"))
                cpu_m = _ratio(_median(rows, row, after, "cpu_per_m"), _median(rows, row, before, "cpu_per_m"))
                out.append(f"| {row} | {after} / {before} | {rps} | {cpu_m} |")
    single = _median(rows, "produce acks=1", "single", "records_per_s")
    clus = _median(rows, "produce acks=all", "odradek", "records_per_s")
    if single == single and clus == clus:
        out.append(f"\nodradek cluster (rf 3, acks=all) / single node (acks=1) records/s: {clus / single:.2f}x")
    for r in rows:
        if r["row"] == "one partition acks=all":
            per = r["cpu_per_broker_per_m"]
            fol = ", ".join(f"{v:.2f}" for i, v in per.items() if i != r["leader"])
            out.append(
                f"\n{r['system']}, one partition acks=all: {r['records_per_s']:,.0f} rec/s; "
                f"CPU-s/M leader {per[r['leader']]:.2f}, followers {fol}"
            )
    e2e = [r for r in rows if r["row"].startswith("e2e")]
    if e2e:
        out += [
            "",
            "| e2e (acks=all; single node acks=1) | system | p50 ms | p99 ms | p99.9 ms |",
            "|---|---|---:|---:|---:|",
        ]
        for r in e2e:
            lat = r["raw"]["latency_ms"]
            out.append(f"| {r['row']} | {r['system']} | {lat['p50']:.2f} | {lat['p99']:.2f} | {lat['p999']:.2f} |")
    fo = [r for r in rows if r["row"].startswith("failover")]
    if fo:
        out += [
            "",
            "| failover (2,000 rec/s, acks=all, idempotent) | system | longest gap s | errors |",
            "|---|---|---:|---:|",
        ]
        for r in fo:
            out.append(f"| {r['row']} | {r['system']} | {r['max_gap_s']:.2f} | {r['errors']} |")
    idle = next((r for r in rows if r["row"] == "idle"), None)
    if idle:
        out.append(
            "\nResident memory after warm-up (MB per broker): "
            + "; ".join(f"{s}: " + ", ".join(f"{v:.0f}" for v in m.values()) for s, m in idle["rss_mb"].items())
        )
    return "\n".join(out)


def chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    bars = [
        ("single\nacks=1", "produce acks=1", "single", "#888"),
        ("single\nacks=all", "produce acks=all", "single", "#aaa"),
        ("odradek 3\nrf3 acks=all", "produce acks=all", "odradek", "#2a7"),
        ("Kafka 3.9 ×3\nrf3 acks=all", "produce acks=all", "kafka", "#c63"),
    ]
    bars = [b for b in bars if _runs(rows, b[1], b[2])]
    labels = [b[0] for b in bars]
    colors = [b[3] for b in bars]
    axes[0].bar(labels, [_median(rows, b[1], b[2], "records_per_s") / 1e3 for b in bars], color=colors)
    axes[0].set_title("produce, 6 partitions: thousand records/s")
    axes[1].bar(labels, [_median(rows, b[1], b[2], "cpu_per_m") for b in bars], color=colors)
    axes[1].set_title("broker CPU-s per million records (all brokers)")
    e2e = [r for r in rows if r["row"].startswith("e2e")]
    names = sorted({r["row"] for r in e2e})
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in e2e)]
    width = 0.8 / max(len(systems), 1)
    for j, s in enumerate(systems):
        ys = [
            next((r["raw"]["latency_ms"]["p99"] for r in e2e if r["row"] == nm and r["system"] == s), 0) for nm in names
        ]
        axes[2].bar([i + j * width for i in range(len(names))], ys, width, label=s)
    axes[2].set_xticks([i + width for i in range(len(names))], [nm.replace("e2e ", "") for nm in names])
    axes[2].set_yscale("log")
    axes[2].set_title("end-to-end p99 ms (log)")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
