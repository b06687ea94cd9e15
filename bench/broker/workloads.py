"""The workloads of a broker benchmark run: one function per kind of row, run on one broker.

Drivers:
  * ``confluent-batch`` librdkafka producer fed by ``produce_batch`` (``odradek perf produce
    --driver confluent --native-batch``): no Python call per record, so the client is not what
    is measured. With more than one partition the records are spread over all of them
    (``sticky.partitioning.linger.ms=0``: librdkafka's random partitioner, so every Produce
    request carries a batch for most partitions), the per-partition work the partition counts
    are there to show;
  * ``confluent``       librdkafka consumer (``odradek perf consume``) and e2e at a fixed rate
    (``odradek perf e2e``);
  * ``kafka-tools``     Kafka's ProducerPerformance, ConsumerPerformance and EndToEndLatency
    (kafka_tools.py);
  * ``odradek``         odradek's Python client (optional: its own benchmark is bench/client).

The consume rows read the topic of the ProducerPerformance acks=1 row (the librdkafka one when
Kafka's tools are not among the drivers): the Java producer fills its 16 KiB batches whatever
the broker's speed, so every broker's consumers read the same batch layout. librdkafka's
batches (up to 1 MB) come out larger or smaller with the timing of the run, and a fetch
limited to 1 MiB per partition then carries one batch or several: that alone moved the
consume rows by ±40 % between brokers.

Every row carries: workload, driver, partitions, acks, compression, rate (e2e: records/s
asked for), idle_conns (idle connections held open to the broker meanwhile), rep.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import kafka_tools
from brokers import proc_cpu, proc_memory
from runner import Runner, log, perf_cmd

HERE = Path(__file__).resolve().parent
SPREAD = ("-X", "sticky.partitioning.linger.ms=0")


def produce_tasks(a, idle_conns: int = 0) -> list[dict]:
    """One entry per produce row. `a.configs`: (partitions, acks, compression) of the librdkafka
    rows; `a.tools_configs` those of ProducerPerformance."""
    tasks = []
    drivers = [d for d in ("confluent", "kafka-tools", "odradek") if d in a.drivers]
    for parts, acks, comp in a.configs:
        if "confluent" in drivers:
            tasks.append(
                {
                    "workload": "produce",
                    "driver": "confluent-batch",
                    "partitions": parts,
                    "acks": acks,
                    "compression": comp,
                    "records": a.records,
                    "feeds_consume": "kafka-tools" not in drivers and acks == "1" and comp == "none",
                }
            )
    for parts, acks, comp in a.tools_configs:
        if "kafka-tools" in drivers:
            tasks.append(
                {
                    "workload": "produce",
                    "driver": "kafka-tools",
                    "partitions": parts,
                    "acks": acks,
                    "compression": comp,
                    "records": a.records_tools,
                    "feeds_consume": acks == "1" and comp == "none",
                }
            )
    if "odradek" in drivers:
        for parts in sorted({c[0] for c in a.configs}):
            tasks.append(
                {
                    "workload": "produce",
                    "driver": "odradek",
                    "partitions": parts,
                    "acks": "1",
                    "compression": "none",
                    "records": a.records_python,
                    "feeds_consume": False,
                }
            )
    for t in tasks:
        t["idle_conns"] = idle_conns
    return tasks


def meta_of(t: dict, rep: int, **extra) -> dict:
    keys = ("workload", "driver", "partitions", "acks", "compression", "idle_conns")
    return {**{k: t.get(k) for k in keys}, "rate": t.get("rate"), "rep": rep, **extra}


def run_produce(r: Runner, t: dict, rep: int, profile: str | None) -> tuple[dict | None, str]:
    topic = f"bench-{t['partitions']}p-{t['acks']}-{t['compression']}-{t['driver']}-{uuid.uuid4().hex[:6]}"
    r.create_topic(topic, t["partitions"])
    n = t["records"]
    if t["driver"] == "kafka-tools":
        cmd = kafka_tools.producer_performance(r.bootstrap, topic, n, t["acks"], t["compression"], 5)
        row = r.run(cmd, meta_of(t, rep), parse=kafka_tools.parse_producer, profile=profile)
        return row, topic
    args = ["--driver", "odradek"]
    if t["driver"] == "confluent-batch":
        args = ["--driver", "confluent", "--native-batch", str(r.args.native_batch)]
        if t["partitions"] > 1 and r.name != "mock":
            args += SPREAD
    common = ["-b", r.bootstrap, "-t", topic, "-n", str(n), "-s", "100", "--acks", t["acks"]]
    cmd = perf_cmd("produce", *common, "-z", t["compression"], "--linger-ms", "5", *args)
    return r.run(cmd, meta_of(t, rep), profile=profile), topic


def run_consume(r: Runner, t: dict, driver: str, topic: str, rep: int, profile: str | None) -> None:
    parts, want = t["partitions"], t["records"]
    if r.name == "mock":
        lo, hi = r.watermarks(topic, parts)
        want = hi - lo
        log(f"[mock] retained {want} of {t['records']} records in {topic} (low {lo}, high {hi})")
    meta = meta_of({**t, "workload": "consume", "driver": driver, "acks": "1", "compression": "none"}, rep)
    meta["retained"] = want
    if driver == "kafka-tools":
        group = f"perf-{uuid.uuid4().hex[:8]}"
        cmd = kafka_tools.consumer_performance(r.bootstrap, topic, want, group)
        r.run(cmd, meta, parse=kafka_tools.parse_consumer, profile=profile)
        return
    cmd = perf_cmd(
        "consume", "-b", r.bootstrap, "-t", topic, "-n", str(want), "--fetch-max-wait-ms", "10", "--timeout", "15",
        "--driver", driver,
    )  # fmt: skip
    r.run(cmd, meta, profile=profile)


def run_e2e(r: Runner, driver: str, rate: int | None, a, profile: str | None) -> None:
    """librdkafka at a fixed rate (``odradek perf e2e``), or Kafka's EndToEndLatency (one
    record at a time: `rate` None)."""
    topic = f"bench-e2e-{driver}-{uuid.uuid4().hex[:6]}"
    r.create_topic(topic, 1)
    meta = {
        "workload": "e2e",
        "driver": driver,
        "partitions": 1,
        "acks": "1",
        "compression": "none",
        "idle_conns": 0,
        "rate": rate,
        "rep": 0,
    }
    if driver == "kafka-tools":
        n = a.e2e_serial
        cmd = kafka_tools.end_to_end_latency(r.bootstrap, topic, n)
        r.run(cmd, meta, parse=lambda out: kafka_tools.parse_end_to_end(out, n), profile=profile)
    else:
        wait = "5" if r.name == "mock" else "500"
        meta["fetch_max_wait_ms"] = int(wait)
        cmd = perf_cmd(
            "e2e", "-b", r.bootstrap, "-t", topic, "--rate", str(rate), "--duration", str(a.e2e_seconds),
            "--acks", "1", "--linger-ms", "0", "--fetch-max-wait-ms", wait, "--partitions", "0", "--driver", driver,
        )  # fmt: skip
        r.run(cmd, meta, records_key="sent", profile=profile)
    r.delete_topic(topic)


def run_metadata(r: Runner, topic: str, parts: int, rep: int, n: int) -> None:
    """Metadata v12 round trips for the topic of `parts` partitions (metadata_probe.py)."""
    cmd = [sys.executable, str(HERE / "metadata_probe.py"), "-b", r.bootstrap, "-t", topic, "-n", str(n), "--json"]
    meta = {
        "workload": "metadata",
        "driver": "raw-sockets",
        "partitions": parts,
        "acks": None,
        "compression": None,
        "idle_conns": 0,
        "rate": None,
        "rep": rep,
    }
    r.run(cmd, meta)


class IdleConnections:
    """`n` idle connections to every broker, held by one idle_conns.py process; `open()`
    returns one row per broker: its CPU while they were opened, its CPU per second and its
    memory over `idle_s` seconds of their idleness. `address` gives the listener of a broker
    to connect to (its bootstrap by default), `options` more idle_conns.py options (--tls)."""

    def __init__(
        self,
        runners: list[Runner],
        n: int,
        idle_s: float,
        address: Callable[[Runner], str] = lambda r: r.bootstrap,
        options: tuple[str, ...] = (),
    ) -> None:
        self.runners = runners
        self.n = n
        self.idle_s = idle_s
        self.address = address
        self.options = options
        self.proc: subprocess.Popen | None = None

    def open(self) -> list[dict]:
        before = {r.name: (proc_cpu(r.pid), proc_memory(r.pid)) for r in self.runners}
        cmd = [sys.executable, str(HERE / "idle_conns.py"), "-n", str(self.n), *self.options]
        cmd += [self.address(r) for r in self.runners]
        log(f"[idle] {' '.join(cmd[1:])}")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        opened = json.loads(line) if line.startswith("{") else {"opened": {}, "failed": {}}
        log(f"[idle] {line.strip()}")
        t_open = time.monotonic()
        after_open = {r.name: (proc_cpu(r.pid), proc_memory(r.pid)) for r in self.runners}
        time.sleep(self.idle_s)
        held_s = time.monotonic() - t_open
        rows = []
        for r in self.runners:
            cpu0, mem0 = before[r.name]
            cpu1, mem1 = after_open[r.name]
            cpu2, mem2 = proc_cpu(r.pid), proc_memory(r.pid)
            got = opened["opened"].get(self.address(r), 0)
            row = {
                "broker": r.name,
                "workload": "idle",
                "driver": "raw-sockets",
                "partitions": None,
                "acks": None,
                "compression": None,
                "rate": None,
                "idle_conns": self.n,
                "rep": 0,
                "opened": got,
                "failed": opened["failed"].get(self.address(r), self.n),
                "open_cpu_s": cpu1 - cpu0,
                "idle_cpu_per_s": (cpu2 - cpu1) / held_s,
                "rss_before_mb": mem0.get("rss_mb"),
                "rss_mb": mem2.get("rss_mb"),
                "hwm_mb": mem2.get("hwm_mb"),
                "rss_per_conn_kib": (mem2["rss_mb"] - mem0["rss_mb"]) * 1024 / got if got else None,
                "command": " ".join(cmd[1:]),
            }
            log(
                f"[{r.name}] {got} idle connections: opening {row['open_cpu_s']:.2f} CPU-s, idle "
                f"{row['idle_cpu_per_s'] * 100:.1f} % of a core, RSS {mem0.get('rss_mb', 0):.0f} -> "
                f"{mem2.get('rss_mb', 0):.0f} MiB"
            )
            rows.append(row)
        return rows

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def idle_baseline(runners: list[Runner], seconds: float) -> list[dict]:
    """Each broker's CPU per second and memory with nothing to do (no client connected), all
    measured over the same `seconds`."""
    t0 = time.monotonic()
    before = {r.name: proc_cpu(r.pid) for r in runners}
    time.sleep(seconds)
    dt = time.monotonic() - t0
    rows = []
    for r in runners:
        mem = proc_memory(r.pid)
        rows.append(
            {
                "broker": r.name,
                "workload": "idle",
                "driver": "none",
                "partitions": None,
                "acks": None,
                "compression": None,
                "rate": None,
                "idle_conns": 0,
                "rep": 0,
                "idle_cpu_per_s": (proc_cpu(r.pid) - before[r.name]) / dt,
                **mem,
                "command": f"(nothing: {seconds:.0f} s idle)",
            }
        )
        log(f"[{r.name}] idle: {rows[-1]['idle_cpu_per_s'] * 100:.1f} % of a core, RSS {mem.get('rss_mb', 0):.0f} MiB")
    return rows
