"""Coordinator writes that share one partition, in a 3-broker cluster: many groups committing
offsets, and many transactional producers, each coordinator's topic with a single partition
(replication factor 3), so that every write goes through one partition's leader and waits for
its followers.

Systems, started together (127.0.0.1, free ports, temp dirs; bench/cluster/run.py's setup):
* `odradek`: 3 brokers of this checkout and a private ZooKeeper;
* `baseline`: 3 brokers of another checkout (--baseline-src), for before/after in one run;
* `kafka`: Apache Kafka 3.9.2, 3 brokers in ZooKeeper mode (tests/support/apache_kafka.py).
Every system: `offsets.topic.num.partitions=1`, `transaction.state.log.num.partitions=1`.

Rows, for each --clients count K (clients are librdkafka through confluent-kafka, one thread each):
* commits: K consumers, each of its own group (no members: a simple consumer's commit), each
  committing one offset synchronously, again and again, for --seconds;
* transactions: K transactional producers, each of its own transactional id, each running
  begin / produce one 100 B record / commit, again and again, for --seconds.
Each row gives operations per second (all clients together), the latency of one operation
(p50, p99) and the CPU-seconds of the three brokers (utime+stime from /proc; ZooKeeper not
counted) per thousand operations. Rows run --repeats times, the systems taking turns; the report
gives medians. The client threads share the broker's 2 cores: compare the systems' ratios.

    .venv/bin/python bench/cluster/coordinator_writes.py --systems odradek,baseline,kafka \\
        --baseline-src /path/to/main/src [--clients 1,16] [--seconds 10] [--repeats 2]

Writes bench/cluster/results/coordinator_writes.json and .md (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from run import cpu, log, partitions_of, wait_for  # noqa: E402
from support.odradek_cluster import KafkaZkCluster, OdradekCluster  # noqa: E402

TOPIC = "t"
PARTITIONS = 6
COORDINATOR_SETTINGS = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "zookeeper.session.timeout.ms": 6000,
}


class System:
    def __init__(self, name: str, handle: OdradekCluster | KafkaZkCluster) -> None:
        self.name = name
        self.handle = handle

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    def pids(self) -> list[int]:
        return [b.proc.pid for b in self.handle.brokers.values()]

    def cpu(self) -> float:
        return sum(cpu(p) for p in self.pids())


def start(names: list[str], tmp: Path, baseline_src: str | None) -> dict[str, System]:
    systems: dict[str, System] = {}
    for name in names:
        if name == "odradek":
            handle: OdradekCluster | KafkaZkCluster = OdradekCluster(tmp / name, 3, COORDINATOR_SETTINGS)
        elif name == "baseline":
            if not baseline_src:
                raise SystemExit("--baseline-src is needed for the baseline system")
            env = {"PYTHONPATH": str(Path(baseline_src).resolve())}
            handle = OdradekCluster(tmp / name, 3, COORDINATOR_SETTINGS, broker_env={i: env for i in (1, 2, 3)})
        elif name == "kafka":
            why = KafkaZkCluster.unavailable_reason()
            if why:
                raise SystemExit(f"Kafka 3.9 cannot run here: {why}")
            handle = KafkaZkCluster(tmp / name, 3, COORDINATOR_SETTINGS)
        else:
            raise SystemExit(f"unknown system {name!r}")
        log(f"starting {name}")
        handle.start()
        systems[name] = System(name, handle)
        admin = AdminClient({"bootstrap.servers": handle.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=30).values():
            f.result()
        wait_for(lambda h=handle: all(len(p.isrs) == 3 for p in partitions_of(h.bootstrap, TOPIC)), 60, "a full ISR")
    return systems


def committer(bootstrap: str, i: int, tag: str) -> tuple[Callable[[], None], Callable[[], None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{tag}-g{i}", "enable.auto.commit": False})
    n = [0]

    def op() -> None:
        n[0] += 1
        c.commit(offsets=[TopicPartition(TOPIC, i % PARTITIONS, n[0])], asynchronous=False)

    return op, c.close


def transactor(bootstrap: str, i: int, tag: str) -> tuple[Callable[[], None], Callable[[], None]]:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{tag}-tx{i}",
            "linger.ms": 0,
            "transaction.timeout.ms": 60000,
        }
    )
    p.init_transactions(60)

    def op() -> None:
        p.begin_transaction()
        p.produce(TOPIC, b"x" * 100, partition=i % PARTITIONS)
        p.commit_transaction(60)

    def close() -> None:
        p.flush(10)

    return op, close


WORKLOADS = {"commits": committer, "transactions": transactor}


def measure(system: System, workload: str, clients: int, seconds: float, tag: str) -> dict:
    """K clients each running the workload's operation for `seconds`: a row."""
    pairs = [WORKLOADS[workload](system.bootstrap, i, tag) for i in range(clients)]
    for op, _ in pairs:  # each client's first operation (finding its coordinator) is not measured
        op()
    latencies: list[list[float]] = [[] for _ in pairs]
    errors: list[str] = []
    go = threading.Event()
    deadline = [0.0]

    def loop(k: int) -> None:
        op = pairs[k][0]
        mine = latencies[k]
        go.wait()
        while True:
            t0 = time.perf_counter()
            if t0 >= deadline[0]:
                return
            try:
                op()
            except Exception as e:  # noqa: BLE001 - counted and reported
                errors.append(repr(e))
                return
            mine.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    cpu0 = system.cpu()
    started = time.perf_counter()
    deadline[0] = started + seconds
    go.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    used = system.cpu() - cpu0
    for _, close in pairs:
        close()
    lat = sorted(x for mine in latencies for x in mine)
    ops = len(lat)
    return {
        "row": f"{workload} x{clients}",
        "system": system.name,
        "ops": ops,
        "ops_per_s": ops / elapsed,
        "p50_ms": lat[len(lat) // 2] * 1000 if lat else float("nan"),
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan"),
        "cpu_s_per_k_ops": used / ops * 1000 if ops else float("nan"),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", default="odradek,baseline,kafka")
    ap.add_argument("--baseline-src", default=None)
    ap.add_argument("--clients", default="1,16", help="comma list of client counts")
    ap.add_argument("--workloads", default="commits,transactions")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "coordinator_writes.json"))
    a = ap.parse_args()
    names = a.systems.split(",")
    clients = [int(x) for x in a.clients.split(",")]
    workloads = a.workloads.split(",")
    meta = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loadavg": os.getloadavg(),
        "argv": sys.argv[1:],
        "baseline_src": a.baseline_src,
    }
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="odradek-coord-bench-") as tmp:
        systems = start(names, Path(tmp), a.baseline_src)
        try:
            order = list(systems.values())
            for s in order:  # warm up (the JVMs' JIT; odradek's first loads), not measured
                for w in workloads:
                    measure(s, w, 2, 2, "warmup")
            for r in range(a.repeats):
                for w in workloads:
                    for k in clients:
                        turn = order[r % len(order) :] + order[: r % len(order)]
                        for s in turn:
                            row = measure(s, w, k, a.seconds, f"r{r}")
                            row["repeat"] = r
                            rows.append(row)
                            log(
                                f"{s.name} {row['row']}: {row['ops_per_s']:,.0f}/s, p50 {row['p50_ms']:.1f} ms, "
                                f"p99 {row['p99_ms']:.1f} ms, {row['cpu_s_per_k_ops']:.3f} CPU-s/k ops, "
                                f"errors {row['errors']}"
                            )
        finally:
            for s in systems.values():
                try:
                    s.handle.stop()
                except Exception as e:  # noqa: BLE001
                    log(f"stopping {s.name}: {e!r}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**meta, "rows": rows}, indent=1))
    md = report(meta, rows, names)
    out.with_suffix(".md").write_text(md + "\n")
    print(md)
    return 0


def report(meta: dict, rows: list[dict], names: list[str]) -> str:
    def med(row: str, system: str, key: str) -> float:
        vals = [x[key] for x in rows if x["row"] == row and x["system"] == system]
        return statistics.median(vals) if vals else float("nan")

    lines = [
        f"Coordinator writes on one partition, 3-broker clusters; started {meta['started']}, "
        f"load average {meta['loadavg'][0]:.1f}; medians of the repeats.",
        "",
        "    " + " ".join(["bench/cluster/coordinator_writes.py", *meta["argv"]]),
        "",
        "| row | system | ops/s | p50 ms | p99 ms | broker CPU-s / 1000 ops | errors |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    row_names = list(dict.fromkeys(x["row"] for x in rows))
    for row in row_names:
        for s in names:
            errs = sum(x["errors"] for x in rows if x["row"] == row and x["system"] == s)
            lines.append(
                f"| {row} | {s} | {med(row, s, 'ops_per_s'):,.0f} | {med(row, s, 'p50_ms'):.1f} | "
                f"{med(row, s, 'p99_ms'):.1f} | {med(row, s, 'cpu_s_per_k_ops'):.3f} | {errs} |"
            )
    if "odradek" in names:
        others = [s for s in names if s != "odradek"]
        lines += ["", "| row | " + " | ".join(f"ops/s odradek / {s}" for s in others) + " |"]
        lines.append("|---|" + "---:|" * len(others))
        for row in row_names:
            ratios = [med(row, "odradek", "ops_per_s") / med(row, s, "ops_per_s") for s in others]
            lines.append(f"| {row} | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
