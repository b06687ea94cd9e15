"""Broker benchmarks: the same workloads against odradek and its peers, with ratios.

Brokers (all started by this script at once, on 127.0.0.1, free ports):
  * ``odradek``  this repository's broker (``python -m odradek broker``, default settings, data in a temp dir);
  * ``mock``     librdkafka's mock cluster (C, in-process of a confluent-kafka client);
  * ``tansu``    Tansu 0.6.0 (Rust), ``--storage-engine memory://tansu/`` (``.deps/bin/tansu``).

Workloads (all load from ``odradek perf ...`` subprocesses, see src/odradek/cli/perf.py):
  * produce: N records of 100 B; partitions {1, 6} x acks {1, all} x compression {none, lz4}, driven by
    confluent-kafka fed with produce_batch (librdkafka batching, linger.ms=5: a C client, so no Python
    loop per record hides the broker; --producer-modes batch,loop adds the one-produce()-per-record
    rows); plus 1 and 6 partitions, acks=1, none with odradek's Python client;
  * consume: the records of the 1- and 6-partition acks=1/none topics, from earliest, with both drivers;
  * e2e:     send->consumed latency at 5,000 records/s for 20 s, both drivers.

Every produce and consume row runs --repeats times (default 3) on every broker, the brokers taking
turns run by run in a rotating order, and the report gives the medians (every run is in the JSON).
For every run: records/s and the broker's CPU-seconds per million records (utime+stime of the broker
process from /proc/<pid>/stat, before and after the run) — steadier than wall time on a shared machine.

Honest adaptations for the mock cluster: it keeps only ~5 MiB per partition, so its consume runs read
what it retained (watermarks), not N records; it answers a Fetch only after fetch.wait.max.ms, so the
consume runs use fetch.wait.max.ms=10 for every broker, and its e2e run uses 5 ms (other brokers 500 ms,
they answer as soon as data arrives).

    .venv/bin/python bench/broker/run.py                      # full (2,000,000 records, 20 s e2e)
    .venv/bin/python bench/broker/run.py --quick              # 200,000 records, 5 s e2e
    .venv/bin/python bench/broker/run.py --quick --peers none # odradek only (smoke)
    .venv/bin/python bench/broker/run.py --profile            # + py-spy profiles of odradek (produce, consume)
    .venv/bin/python bench/broker/run.py --peers none --workloads e2e --drivers confluent   # e2e only
    .venv/bin/python bench/broker/run.py --peers none --workloads produce --configs 1/1/none,1/all/none

Writes bench/broker/results/latest.json and latest.md (and --chart, default docs/benchmarks.png).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from support.broker import BrokerProcess, MockClusterBroker, TansuBroker  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
RESULTS = Path(__file__).resolve().parent / "results"

GOALS = {
    "produce_cpu_per_m": 0.30,  # broker CPU-s per million 100-byte records produced
    "consume_cpu_per_m": 0.25,  # ... consumed
    "vs_tansu_rps": 1.0,  # records/s ratio odradek / Tansu
    "e2e_p99_ms": 5.0,  # at 5,000 records/s
    "acks_all_vs_1": 0.10,  # acks=all within 10% of acks=1
}


def proc_cpu(pid: int) -> float:
    """utime+stime of one process, seconds (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def settle(pid: int, timeout: float = 20.0) -> None:
    """Wait until a freshly started broker is idle (odradek warms its schema caches and runs a
    full GC in the background after start: ~1 s of CPU that would otherwise land in the first
    measured run — it made the first produce config look 35-50 % dearer)."""
    deadline = time.monotonic() + timeout
    last = proc_cpu(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = proc_cpu(pid)
        if now - last < 0.02:
            return
        last = now


def perf_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "odradek", "perf", *args, "--json"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Runner:
    def __init__(self, name: str, broker, args) -> None:
        self.name = name
        self.broker = broker
        self.args = args
        self.results: list[dict] = []

    @property
    def pid(self) -> int:
        return self.broker.proc.pid

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def run(self, cmd: list[str], meta: dict, records_key: str = "records", profile: str | None = None) -> dict | None:
        shown = " ".join(c if " " not in c else repr(c) for c in cmd[1:])
        log(f"[{self.name}] {shown}")
        spy = None
        if profile:
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "-p",
                    str(self.pid),
                    "-r",
                    "200",
                    "--nonblocking",
                    "-f",
                    "raw",
                    "-o",
                    profile,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)
        cpu0, t0 = proc_cpu(self.pid), time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env(), timeout=1800)
        cpu1, t1 = proc_cpu(self.pid), time.perf_counter()
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
        if p.returncode != 0:
            log(f"[{self.name}] FAILED ({p.returncode}): {p.stderr.strip()[-800:]}")
            row = {"broker": self.name, **meta, "error": p.stderr.strip()[-300:], "command": shown}
            self.results.append(row)
            return None
        res = json.loads(p.stdout.strip().splitlines()[-1])
        n = res.get(records_key) or 0
        cpu = cpu1 - cpu0
        row = {
            "broker": self.name,
            **res,
            **meta,
            "broker_cpu_s": cpu,
            "wall_s": t1 - t0,
            "broker_cpu_s_per_m": cpu / n * 1e6 if n else None,
            "command": shown,
        }
        self.results.append(row)
        lat = res.get("latency_ms") or {}
        log(
            f"[{self.name}]   -> {res.get('records_per_s', res.get('achieved_rate', 0)):,.0f} rec/s, "
            f"broker {cpu:.2f} CPU-s ({row['broker_cpu_s_per_m'] or 0:.3f}/M)"
            + (
                f", p50 {lat['p50']:.2f} p99 {lat['p99']:.2f} p99.9 {lat['p999']:.2f} ms"
                if lat.get("count") and res["workload"] == "e2e"
                else ""
            )
        )
        return row

    def create_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        if self.name == "mock":  # its CreateTopics never answers (20 s each); topics auto-create, 4 partitions
            return

        a = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        fs = a.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=15)
        for f in fs.values():
            try:
                f.result(20)
            except Exception as e:  # noqa: BLE001
                log(f"[{self.name}] create {topic}: {e}")
        time.sleep(0.3)

    def watermarks(self, topic: str, partitions: int) -> tuple[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": "wm"})
        lo = hi = 0
        try:
            md = c.list_topics(topic, timeout=10)
            actual = sorted(md.topics[topic].partitions) if topic in md.topics else range(partitions)
            if len(actual) != partitions:
                log(f"[{self.name}] {topic} has {len(actual)} partitions, not {partitions} (CreateTopics failed?)")
            for p in actual:
                try:
                    a, b = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                except Exception as e:  # noqa: BLE001
                    log(f"[{self.name}] watermarks {topic}-{p}: {e}")
                    continue
                lo += a
                hi += b
        finally:
            c.close()
        return lo, hi

    def delete_topic(self, topic: str) -> None:
        """Drop a finished run's topic so memory-backed peers do not accumulate N records per run,
        then wait until the broker is idle again: removing the files (odradek runs with
        file.delete.delay.ms=0 here) must not land in the next run's CPU."""
        from confluent_kafka.admin import AdminClient

        if self.name == "mock":  # keeps ~5 MiB per partition anyway, and DeleteTopics never answers
            return
        a = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        for f in a.delete_topics([topic], operation_timeout=15).values():
            try:
                f.result(20)
            except Exception as e:  # noqa: BLE001
                log(f"[{self.name}] delete {topic}: {e}")
        time.sleep(0.3)
        settle(self.pid, timeout=10)


# ------------------------------------------------------------------ workloads


def produce_tasks(a) -> list[dict]:
    """One entry per produce row: librdkafka with native batching over the configuration matrix
    (the C client, so the broker and not a Python loop is what is measured), optionally the
    per-record produce() loop of the same client, and odradek's Python client."""
    configs = [(p, acks, comp) for p in (1, 6) for acks in ("1", "all") for comp in ("none", "lz4")]
    if a.quick_matrix:
        configs = [(1, "1", "none"), (6, "1", "none"), (1, "all", "none"), (1, "1", "lz4")]
    if a.configs:
        configs = a.configs
    if "produce" not in a.workloads:  # consume still needs its acks=1/none topics
        configs = [c for c in configs if c[1:] == ("1", "none")] if "consume" in a.workloads else []
    tasks = []
    for parts, acks, comp in configs:
        for mode in a.producer_modes:
            batch = a.native_batch if mode == "batch" else 0
            tasks.append(
                {
                    "workload": "produce",
                    "driver": "confluent-batch" if batch else "confluent",
                    "partitions": parts,
                    "acks": acks,
                    "compression": comp,
                    "records": a.records,
                    "args": ["--driver", "confluent", "--native-batch", str(batch)],
                    "feeds_consume": acks == "1" and comp == "none" and mode == a.producer_modes[0],
                }
            )
    if "odradek" in a.drivers and "produce" in a.workloads:
        for parts in (1, 6):
            tasks.append(
                {
                    "workload": "produce",
                    "driver": "odradek",
                    "partitions": parts,
                    "acks": "1",
                    "compression": "none",
                    "records": a.records_python,
                    "args": ["--driver", "odradek"],
                    "feeds_consume": False,
                }
            )
    return tasks


def run_produce(r: Runner, t: dict, rep: int, profile: str | None) -> tuple[dict | None, str]:
    topic = f"bench-{t['partitions']}p-{t['acks']}-{t['compression']}-{t['driver']}-{uuid.uuid4().hex[:6]}"
    r.create_topic(topic, t["partitions"])
    meta = {k: t[k] for k in ("workload", "driver", "partitions", "acks", "compression")}
    row = r.run(
        perf_cmd(
            "produce",
            "-b",
            r.broker.bootstrap,
            "-t",
            topic,
            "-n",
            str(t["records"]),
            "-s",
            "100",
            "--acks",
            t["acks"],
            "-z",
            t["compression"],
            "--linger-ms",
            "5",
            *t["args"],
        ),
        {**meta, "rep": rep},
        profile=profile,
    )
    return row, topic


def run_consume(r: Runner, parts: int, driver: str, topic: str, n: int, rep: int, profile: str | None) -> None:
    want = n
    if r.name == "mock":
        lo, hi = r.watermarks(topic, parts)
        want = hi - lo
        log(f"[mock] retained {want} of {n} records in {topic} (low {lo}, high {hi})")
    r.run(
        perf_cmd(
            "consume",
            "-b",
            r.broker.bootstrap,
            "-t",
            topic,
            "-n",
            str(want),
            "--fetch-max-wait-ms",
            "10",
            "--timeout",
            "15",
            "--driver",
            driver,
        ),
        {
            "workload": "consume",
            "driver": driver,
            "partitions": parts,
            "acks": "1",
            "compression": "none",
            "retained": want,
            "rep": rep,
        },
        profile=profile,
    )


def run_e2e(r: Runner, driver: str, a, profile: str | None) -> None:
    wait = "5" if r.name == "mock" else "500"
    topic = f"bench-e2e-{driver}-{uuid.uuid4().hex[:6]}"
    r.create_topic(topic, 1)
    r.run(
        perf_cmd(
            "e2e",
            "-b",
            r.broker.bootstrap,
            "-t",
            topic,
            "--rate",
            str(a.e2e_rate),
            "--duration",
            str(a.e2e_seconds),
            "--acks",
            "1",
            "--linger-ms",
            "0",
            "--fetch-max-wait-ms",
            wait,
            "--partitions",
            "0",
            "--driver",
            driver,
        ),
        {
            "workload": "e2e",
            "driver": driver,
            "partitions": 1,
            "acks": "1",
            "compression": "none",
            "fetch_max_wait_ms": int(wait),
            "rep": 0,
        },
        records_key="sent",
        profile=profile,
    )


def rotation(runners: list[Runner], rep: int) -> list[Runner]:
    """Brokers in a different order each repetition, so none always runs first after a change of
    workload (or always last, when the machine's background load has crept up)."""
    k = rep % len(runners)
    return runners[k:] + runners[:k]


def run_all(runners: list[Runner], a) -> None:
    """Every row on every broker before the next row; each row `a.repeats` times in rotating
    broker order. Brokers are all up for the whole run (idle ones cost nothing measurable), so a
    row's numbers for odradek and its peers come from the same minute of the machine's life."""

    def prof(r: Runner, name: str, workload: str, rep: int, want: bool) -> str | None:
        ok = a.profile and r.name == "odradek" and workload in a.profile_workloads and want and rep == 0
        return str(RESULTS / name) if ok else None

    consume_topics: dict[tuple[str, int], str] = {}
    for t in produce_tasks(a):
        for rep in range(a.repeats):
            for r in rotation(runners, rep):
                base = (t["partitions"], t["acks"], t["compression"]) == (1, "1", "none") and t["driver"].startswith(
                    "confluent"
                )
                row, topic = run_produce(r, t, rep, prof(r, "profile-produce.txt", "produce", rep, base))
                keep = t["feeds_consume"] and row is not None and (r.name, t["partitions"]) not in consume_topics
                if keep:
                    consume_topics[(r.name, t["partitions"])] = topic
                else:
                    r.delete_topic(topic)
    if "consume" in a.workloads:
        for parts in sorted({p for _, p in consume_topics}):
            for driver in a.drivers:
                for rep in range(a.repeats):
                    for r in rotation(runners, rep):
                        topic = consume_topics.get((r.name, parts))
                        if topic:
                            run_consume(
                                r,
                                parts,
                                driver,
                                topic,
                                a.records,
                                rep,
                                prof(r, "profile-consume.txt", "consume", rep, parts == 1 and driver == "confluent"),
                            )
    if "e2e" in a.workloads:
        for driver in a.drivers:
            for r in runners:
                run_e2e(r, driver, a, prof(r, f"profile-e2e-{driver}.txt", "e2e", 0, True))


# ---------------------------------------------------------------------------- reporting
def key(r: dict) -> tuple:
    return (r["workload"], r["driver"], r.get("partitions"), r.get("acks"), r.get("compression"))


def rate(r: dict) -> float | None:
    if "error" in r:
        return None
    return r.get("records_per_s") if r["workload"] != "e2e" else r.get("achieved_rate")


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per (broker, workload row): the median records/s and the median broker CPU-s/M of
    its repeated runs (each median taken on its own), with every run's figures kept beside it."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["broker"], *key(r)), []).append(r)
    out = []
    for g in groups.values():
        ok = [r for r in g if "error" not in r]
        if not ok:
            out.append(g[0])
            continue
        m = dict(ok[0])
        rates = [rate(r) for r in ok]
        m["records_per_s" if m["workload"] != "e2e" else "achieved_rate"] = statistics.median(rates)
        cpus = [r["broker_cpu_s_per_m"] for r in ok if r.get("broker_cpu_s_per_m") is not None]
        m["broker_cpu_s_per_m"] = statistics.median(cpus) if cpus else None
        m["runs"] = len(ok)
        m["failed_runs"] = len(g) - len(ok)
        m["rate_by_rep"] = {r.get("rep", 0): rate(r) for r in ok}
        m["cpu_runs"] = cpus
        out.append(m)
    return out


def rep_ratios(o: dict | None, p: dict | None) -> list[float]:
    """odradek/peer records/s ratio of each repetition (the two ran minutes apart at most)."""
    if not o or not p or "rate_by_rep" not in o or "rate_by_rep" not in p:
        return []
    return [
        o["rate_by_rep"][k] / p["rate_by_rep"][k]
        for k in sorted(o["rate_by_rep"])
        if k in p["rate_by_rep"] and p["rate_by_rep"][k]
    ]


def fmt(v, spec=",.0f") -> str:
    return "-" if v is None else format(v, spec)


def ratio(a, b) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def report(runs: list[dict], brokers: list[str], meta: dict) -> str:
    rows = aggregate(runs)
    by = {(r["broker"], *key(r)): r for r in rows}
    keys = []
    for r in rows:
        if key(r) not in keys:
            keys.append(key(r))
    peers = [b for b in brokers if b != "odradek"]
    out = [
        f"Run {meta['when']} on {meta['host']} ({meta['cpus']} CPUs, load avg at start {meta['load']}); "
        f"records: {meta['records']:,} (confluent driver), {meta['records_python']:,} (odradek driver); "
        f"e2e {meta['e2e_rate']:,}/s for {meta['e2e_seconds']} s. Throughput rows: median of "
        f"{meta.get('repeats', 1)} runs per broker, brokers interleaved run by run "
        f"(confluent-batch: librdkafka fed by produce_batch, {meta.get('native_batch', 0):,} records per call).",
        "",
    ]
    # throughput table
    head = ["workload", "driver", "parts", "acks", "comp"]
    for b in brokers:
        head += [f"{b} rec/s", f"{b} CPU-s/M"]
    for p in peers:
        head += [f"rec/s vs {p}", f"CPU/M vs {p}"]
    if "tansu" in peers:
        head.append("vs tansu, each run")
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for k in keys:
        if k[0] == "e2e":
            continue
        row = [k[0], k[1], str(k[2]), str(k[3]), str(k[4])]
        for b in brokers:
            r = by.get((b, *k))
            row += [
                fmt(rate(r)) if r else "-",
                fmt(r.get("broker_cpu_s_per_m"), ".3f") if r and "error" not in r else "-",
            ]
        o = by.get(("odradek", *k))
        for p in peers:
            r = by.get((p, *k))
            row += [
                ratio(rate(o) if o else None, rate(r) if r else None),
                ratio(
                    o.get("broker_cpu_s_per_m") if o and "error" not in o else None,
                    r.get("broker_cpu_s_per_m") if r and "error" not in r else None,
                ),
            ]
        if "tansu" in peers:
            row.append(" ".join(f"{x:.2f}" for x in rep_ratios(o, by.get(("tansu", *k)))) or "-")
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    out.append(
        "(rec/s ratio: >1 means odradek is faster; CPU/M ratio: <1 means odradek uses less broker CPU. "
        "mock consume rows read only what the mock retained, see `retained` in latest.json.)"
    )
    out.append("")
    # e2e
    head = ["e2e driver"] + [f"{b} p50/p99/p99.9 ms" for b in brokers] + [f"{b} CPU-s/M" for b in brokers]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for k in keys:
        if k[0] != "e2e":
            continue
        row = [k[1]]
        for b in brokers:
            r = by.get((b, *k))
            lat = (r or {}).get("latency_ms") or {}
            row.append(f"{lat['p50']:.2f} / {lat['p99']:.2f} / {lat['p999']:.2f}" if lat.get("count") else "-")
        for b in brokers:
            r = by.get((b, *k))
            row.append(fmt((r or {}).get("broker_cpu_s_per_m"), ".3f"))
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    out += goals(by, peers)
    return "\n".join(out)


def goals(by: dict, peers: list[str]) -> list[str]:
    lines = ["Goals (odradek):", ""]

    def g(name, ok, detail):
        lines.append(f"- [{'x' if ok else ' '}] {name}: {detail}")

    pdrv = "confluent-batch" if any(k[1] == "confluent-batch" for _, *k in by) else "confluent"
    prod = [
        r for (b, *k), r in by.items() if b == "odradek" and k[0] == "produce" and k[1] == pdrv and "error" not in r
    ]
    cons = [
        r
        for (b, *k), r in by.items()
        if b == "odradek" and k[0] == "consume" and k[1] == "confluent" and "error" not in r
    ]
    if prod:
        base = by.get(("odradek", "produce", pdrv, 1, "1", "none"))
        worst = max(r["broker_cpu_s_per_m"] for r in prod)
        b = base["broker_cpu_s_per_m"] if base and "error" not in base else None
        g(
            "broker CPU per million produced <= 0.30 s",
            b is not None and b <= GOALS["produce_cpu_per_m"],
            f"{fmt(b, '.3f')} s (1 partition, acks=1, none); worst config {worst:.3f} s",
        )
    if cons:
        worst = max(r["broker_cpu_s_per_m"] for r in cons)
        g(
            "broker CPU per million consumed <= 0.25 s",
            worst <= GOALS["consume_cpu_per_m"],
            ", ".join(f"{r['partitions']}p {r['broker_cpu_s_per_m']:.3f} s" for r in cons),
        )
    if "tansu" in peers:
        rs = []
        for (b, *k), r in by.items():
            if b == "odradek" and k[0] in ("produce", "consume") and "error" not in r:
                t = by.get(("tansu", *k))
                if t and "error" not in t and rate(t):
                    rs.append((k, rate(r) / rate(t)))
        if rs:
            worst = min(rs, key=lambda x: x[1])
            g(
                "records/s >= 1.0x Tansu",
                worst[1] >= GOALS["vs_tansu_rps"],
                f"min {worst[1]:.2f}x ({worst[0][0]} {worst[0][1]} {worst[0][2]}p acks={worst[0][3]} {worst[0][4]}), "
                f"median {sorted(x for _, x in rs)[len(rs) // 2]:.2f}x over {len(rs)} rows",
            )
    for d in ("confluent", "odradek"):
        r = by.get(("odradek", "e2e", d, 1, "1", "none"))
        if r and "error" not in r and r["latency_ms"]["count"]:
            p99 = r["latency_ms"]["p99"]
            g(f"e2e p99 <= 5 ms at 5,000/s ({d} driver)", p99 <= GOALS["e2e_p99_ms"], f"{p99:.2f} ms")
    for parts in (1, 6):
        for comp in ("none", "lz4"):
            a1 = by.get(("odradek", "produce", pdrv, parts, "1", comp))
            aa = by.get(("odradek", "produce", pdrv, parts, "all", comp))
            if a1 and aa and "error" not in a1 and "error" not in aa:
                rr = rate(aa) / rate(a1)
                g(
                    f"acks=all within 10% of acks=1 ({parts}p, {comp})",
                    rr >= 1 - GOALS["acks_all_vs_1"],
                    f"{rr:.2f}x records/s; CPU/M {aa['broker_cpu_s_per_m']:.3f} vs {a1['broker_cpu_s_per_m']:.3f}",
                )
    return lines


def label(r: dict) -> str:
    drv = {
        "confluent-batch": "rdkafka batch",
        "confluent": "rdkafka loop" if r["workload"] == "produce" else "rdkafka",
        "odradek": "odradek py",
    }
    driver = drv.get(r["driver"], r["driver"])
    return f"{r['workload'][:4]} {driver} {r['partitions']}p acks={r['acks']} {r['compression']}"


def chart(runs: list[dict], brokers: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = aggregate(runs)
    prod = [r for r in rows if r["workload"] in ("produce", "consume") and "error" not in r]
    labels = []
    for r in prod:
        lab = label(r)
        if lab not in labels:
            labels.append(lab)
    colors = {"odradek": "#1f77b4", "tansu": "#ff7f0e", "mock": "#2ca02c"}
    fig, axes = plt.subplots(1, 3, figsize=(18, 6.5), gridspec_kw={"width_ratios": [3, 3, 1.4]})
    width = 0.8 / max(1, len(brokers))
    for ax, field, title in (
        (axes[0], "rate", "records/s (higher is better)"),
        (axes[1], "broker_cpu_s_per_m", "broker CPU-s per million records (lower is better)"),
    ):
        for i, b in enumerate(brokers):
            vals = []
            for lab in labels:
                r = next((r for r in prod if r["broker"] == b and label(r) == lab), None)
                vals.append((rate(r) if field == "rate" else r.get(field)) or 0 if r else 0)
            ax.barh([y + i * width for y in range(len(labels))], vals, height=width, label=b, color=colors.get(b))
        ax.set_yticks([y + width * (len(brokers) - 1) / 2 for y in range(len(labels))])
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[1].axvline(GOALS["produce_cpu_per_m"], color="red", ls="--", lw=0.8, label="produce goal 0.30")
    axes[1].axvline(GOALS["consume_cpu_per_m"], color="purple", ls=":", lw=0.8, label="consume goal 0.25")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    ax = axes[2]
    e2e = [r for r in rows if r["workload"] == "e2e" and "error" not in r and r["latency_ms"]["count"]]
    drivers = sorted({r["driver"] for r in e2e})
    for i, b in enumerate(brokers):
        vals = []
        for d in drivers:
            r = next((r for r in e2e if r["broker"] == b and r["driver"] == d), None)
            vals.append(r["latency_ms"]["p99"] if r else 0)
        ax.bar([x + i * width for x in range(len(drivers))], vals, width=width, label=b, color=colors.get(b))
    ax.set_xticks([x + width * (len(brokers) - 1) / 2 for x in range(len(drivers))])
    ax.set_xticklabels([f"{d} driver" for d in drivers], fontsize=8)
    ax.axhline(GOALS["e2e_p99_ms"], color="red", ls="--", lw=0.8, label="goal 5 ms")
    ax.set_yscale("log")
    ax.set_title("e2e p99 ms at 5,000/s (log)", fontsize=10)
    ax.legend(fontsize=8)
    fig.suptitle("odradek vs librdkafka mock vs Tansu 0.6.0 — 100-byte records, one 2-core machine", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    log(f"chart: {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200k records, 5 s e2e, a reduced produce matrix")
    ap.add_argument("--peers", default="mock,tansu", help="comma list of mock,tansu,baseline or 'none'")
    ap.add_argument(
        "--baseline-src",
        default=None,
        help="the src/ directory of another odradek checkout (e.g. a `git worktree` of an earlier commit): "
        "peer 'baseline' runs that broker beside this one, for before/after figures from one run",
    )
    ap.add_argument("--records", type=int, default=None, help="records per run, confluent driver (default 2,000,000)")
    ap.add_argument(
        "--records-python", type=int, default=None, help="records per run, odradek driver (default: --records / 4)"
    )
    ap.add_argument("--drivers", default="confluent,odradek")
    ap.add_argument("--e2e-rate", type=int, default=5000)
    ap.add_argument("--e2e-seconds", type=float, default=None)
    ap.add_argument("--full-matrix", action="store_true", help="with --quick: still run all 8 produce configs")
    ap.add_argument(
        "--workloads",
        default="produce,consume,e2e",
        help="comma list of produce,consume,e2e (consume alone still produces its acks=1/none topics)",
    )
    ap.add_argument(
        "--configs", default=None, help="produce configs PARTS/ACKS/COMP, comma separated, e.g. 1/1/none,1/all/none"
    )
    ap.add_argument("--profile", action="store_true", help="py-spy profiles of odradek during produce, consume, e2e")
    ap.add_argument(
        "--profile-workloads",
        default="produce,consume",
        help="which workloads --profile records (comma list of produce,consume,e2e)",
    )
    ap.add_argument(
        "--broker-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra odradek broker setting (repeatable), e.g. metrics.listener=127.0.0.1:0",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs of every produce/consume row per broker, interleaved (default 3, --quick 1)",
    )
    ap.add_argument(
        "--native-batch", type=int, default=10000, help="records per produce_batch() call of the C producer rows"
    )
    ap.add_argument(
        "--producer-modes",
        default="batch",
        help="C producer rows: comma list of batch (produce_batch) and loop (one produce() per record)",
    )
    ap.add_argument("--chart", default=str(ROOT / "docs" / "benchmarks.png"), help="PNG path ('' for none)")
    ap.add_argument("--out", default=str(RESULTS / "latest.json"))
    ap.add_argument("--brokers", default=None, help="run only these (comma list of odradek,mock,tansu)")
    ap.add_argument("--merge", action="store_true", help="keep --out's rows of brokers not run now")
    a = ap.parse_args(argv)
    a.records = a.records or (200_000 if a.quick else 2_000_000)
    a.records_python = a.records_python or max(1, a.records // 4)
    a.e2e_seconds = a.e2e_seconds or (5 if a.quick else 20)
    a.quick_matrix = a.quick and not a.full_matrix
    a.repeats = a.repeats or (1 if a.quick else 3)
    a.producer_modes = [m for m in a.producer_modes.split(",") if m in ("batch", "loop")] or ["batch"]
    a.drivers = [d for d in a.drivers.split(",") if d]
    a.workloads = {w for w in a.workloads.split(",") if w}
    a.profile_workloads = {w for w in a.profile_workloads.split(",") if w}
    if a.configs:
        a.configs = [(int(c.split("/")[0]), c.split("/")[1], c.split("/")[2]) for c in a.configs.split(",") if c]
    peers = [] if a.peers in ("none", "") else [p.strip() for p in a.peers.split(",")]
    if "tansu" in peers and not TansuBroker.available():
        log("tansu: not installed (.deps/bin/tansu), skipped")
        peers.remove("tansu")
    if "baseline" in peers and not a.baseline_src:
        raise SystemExit("peer 'baseline' needs --baseline-src")
    brokers = ["odradek", *peers]
    if a.brokers:
        brokers = [b for b in a.brokers.split(",") if b]
    kept: list[dict] = []
    if a.merge and Path(a.out).exists():
        prev = json.loads(Path(a.out).read_text())
        kept = [r for r in prev["rows"] if r["broker"] not in brokers]
        order = list(dict.fromkeys([r["broker"] for r in prev["rows"]] + brokers))
        brokers_all = [b for b in ["odradek", "mock", "tansu"] if b in order]
    else:
        brokers_all = brokers
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": os.uname().nodename,
        "cpus": os.cpu_count(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "records": a.records,
        "records_python": a.records_python,
        "e2e_rate": a.e2e_rate,
        "e2e_seconds": a.e2e_seconds,
        "repeats": a.repeats,
        "native_batch": a.native_batch,
        "producer_modes": a.producer_modes,
        "argv": sys.argv[1:],
    }
    rows: list[dict] = list(kept)
    with tempfile.TemporaryDirectory(prefix="odradek-bench-") as tmp:
        runners: list[Runner] = []
        try:
            for name in brokers:
                if name == "odradek":
                    b = BrokerProcess(
                        Path(tmp) / "odradek",
                        {
                            "num.partitions": 1,
                            "log.segment.delete.delay.ms": 0,
                            **dict(o.split("=", 1) for o in a.broker_override),
                        },
                    )
                elif name == "baseline":
                    b = BrokerProcess(
                        Path(tmp) / "baseline",
                        {"num.partitions": 1, "log.segment.delete.delay.ms": 0},
                        src=a.baseline_src,
                    )
                elif name == "mock":
                    b = MockClusterBroker(Path(tmp) / "mock")
                elif name == "tansu":
                    b = TansuBroker(Path(tmp) / "tansu")
                else:
                    raise SystemExit(f"unknown peer {name}")
                b.start(timeout=60)
                runners.append(Runner(name, b, a))
                log(f"== {name} at {b.bootstrap} (pid {b.proc.pid})")
            for r in runners:
                settle(r.pid)
            run_all(runners, a)
        finally:
            for r in runners:
                r.broker.stop()
                rows += r.results
            Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    md = report(rows, brokers_all, meta)
    (Path(a.out).with_suffix(".md")).write_text(md + "\n")
    print(md)
    if a.chart:
        try:
            chart(rows, brokers_all, Path(a.chart))
        except ImportError:
            log("matplotlib not installed (pip install -e '.[bench]'): no chart")
    failed = [r for r in rows if "error" in r]
    return 1 if failed and not rows else 0


if __name__ == "__main__":
    sys.exit(main())
