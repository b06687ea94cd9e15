"""Many partitions on a 3-broker cluster at replication factor 3 (issue 28), beside Apache Kafka.

The systems of bench/cluster/run.py (an odradek cluster with its ZooKeeper, the same cluster on
another checkout's code, Kafka 3.9 in ZooKeeper mode), one after the other, each fresh:
* create the partitions (topics of ``--per-topic``, replication factor 3, min.insync.replicas=2,
  through librdkafka's admin client) and time it until Metadata shows every partition with a
  leader and a full ISR, and until every partition's leader answers ListOffsets (latest);
* Metadata for all topics (median round trip, raw socket), RSS and CPU of every broker;
* produce spread: ``--produce-records`` records of 100 B, acks=all, round-robin over every
  partition of every topic (librdkafka, linger 5 ms), records/s and the brokers' CPU-seconds;
* idle CPU: the brokers' CPU-seconds over ``--idle-s`` seconds with no client;
* kill -9 of one broker that is not the controller, restart it, and time until every partition
  has a full ISR again (the restarted broker loaded its logs and caught up).

    /work/wt/heavy .venv/bin/python bench/scale/cluster.py --partitions 10000 \\
        --systems odradek,baseline,kafka --baseline-src /path/to/previous/main/src [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench" / "cluster"))
sys.path.insert(0, str(ROOT / "bench" / "scale"))

import run as cluster_bench  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from partitions import metadata_all_ms  # noqa: E402
from support.raw import RawConnection, nested  # noqa: E402


def metadata(bootstrap: str):  # noqa: ANN201
    with RawConnection(bootstrap.split(",")[0], timeout=120) as c:
        return c.call(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def fully_replicated(bootstrap: str, want: int, rf: int) -> bool:
    md = metadata(bootstrap)
    good = sum(
        1
        for t in md.topics
        for p in t.partitions
        if int(p.error_code) == 0 and p.leader_id >= 0 and len(p.isr_nodes) == rf
    )
    return good >= want


def serving(bootstrap: str, want: int) -> bool:
    """Every partition's leader (as Metadata names it) answers ListOffsets for it without an error."""
    md = metadata(bootstrap)
    endpoints = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
    by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for t in md.topics:
        for p in t.partitions:
            if p.leader_id >= 0:
                by_leader[p.leader_id][t.name].append(p.partition_index)
    served = 0
    for leader, topics in by_leader.items():
        with RawConnection(endpoints[leader], timeout=120) as c:
            for name, parts in topics.items():
                ps = tuple(
                    nested(2, 7, "ListOffsetsPartition", partition_index=i, current_leader_epoch=-1, timestamp=-1)
                    for i in parts
                )
                r = c.call(
                    2,
                    7,
                    replica_id=-1,
                    isolation_level=0,
                    topics=(nested(2, 7, "ListOffsetsTopic", name=name, partitions=ps),),
                )
                served += sum(1 for rt in r.topics for p in rt.partitions if int(p.error_code) == 0)
    return served >= want


def wait(cond, timeout: float) -> float | None:  # noqa: ANN001
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if cond():
                return time.monotonic() - t0
        except (ConnectionError, TimeoutError):  # a broker restarting
            pass
        time.sleep(0.5)
    return None


def produce_spread(bootstrap: str, topics: list[tuple[str, int]], records: int, timeout: float) -> float:
    """Records/s of `records` acks=all records, one after another over every partition of `topics`."""
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1_000_000}
    )
    targets = [(t, i) for t, n in topics for i in range(n)]
    failed: list[str] = []

    def delivered(err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            failed.append(str(err))

    value = b"x" * 100
    t0 = time.monotonic()
    for k in range(records):
        topic, partition = targets[k % len(targets)]
        while True:
            try:
                p.produce(topic, value, partition=partition, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(timeout)
    elapsed = time.monotonic() - t0
    if left or failed:
        raise RuntimeError(f"produce spread: {left} undelivered, {len(failed)} failed ({failed[:1]})")
    return records / elapsed


def brokers_cpu(system: cluster_bench.System) -> float:
    return sum(cluster_bench.cpu(p) for p in system.pids().values())


def run_one(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    out: dict = {"system": name, "partitions": args.partitions}
    systems = cluster_bench.start_systems([name], tmp / name, args.baseline_src)
    system = systems[name]
    try:
        # librdkafka ends a request at socket.timeout.ms (60 s) whatever the admin call's
        # request_timeout: Kafka 3.9 may answer one CreateTopics of 10,000 partitions later than that.
        timeout_ms = min(int(args.timeout * 1000), 300_000)  # its most
        admin = AdminClient({"bootstrap.servers": system.bootstrap, "socket.timeout.ms": timeout_ms})
        n_topics = -(-args.partitions // args.per_topic)
        topics = [
            NewTopic(
                f"scale-{i}",
                min(args.per_topic, args.partitions - i * args.per_topic),
                3,
                config={"min.insync.replicas": "2"},
            )
            for i in range(n_topics)
        ]
        t0 = time.monotonic()
        cluster_bench.log(f"{name}: creating {args.partitions} partitions")
        for f in admin.create_topics(topics, operation_timeout=600, request_timeout=600).values():
            f.result()
        replicated = wait(lambda: fully_replicated(system.bootstrap, args.partitions, 3), args.timeout)
        out["create_replicated_s"] = None if replicated is None else round(time.monotonic() - t0, 2)
        up = wait(lambda: serving(system.bootstrap, args.partitions), args.timeout)
        out["create_serving_s"] = None if up is None else round(time.monotonic() - t0, 2)
        cluster_bench.log(f"{name}: {out}")
        out["metadata_all_ms"] = round(metadata_all_ms(system.bootstrap.split(",")[0], args.metadata_n), 2)
        out["rss_mb"] = {i: round(cluster_bench.rss_mb(p), 1) for i, p in system.pids().items()}
        out["cpu_s"] = round(brokers_cpu(system), 2)
        before = brokers_cpu(system)
        try:  # its failure is a result: the rows after it still run
            rate = produce_spread(
                system.bootstrap, [(t.topic, t.num_partitions) for t in topics], args.produce_records, args.timeout
            )
            out["produce_spread_rec_s"] = round(rate)
            out["produce_spread_cpu_s_per_m"] = round((brokers_cpu(system) - before) / args.produce_records * 1e6, 1)
        except Exception as e:  # noqa: BLE001
            out["produce_spread_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        before = brokers_cpu(system)
        time.sleep(args.idle_s)
        out["idle_cpu_per_s"] = round((brokers_cpu(system) - before) / args.idle_s, 3)
        cluster_bench.log(f"{name}: {out}")
        controller = metadata(system.bootstrap).controller_id
        victim = max(i for i in system.processes() if i != controller)
        proc = system.processes()[victim]
        proc.kill()
        t1 = time.monotonic()
        proc.start(timeout=args.timeout)
        back = wait(lambda: fully_replicated(system.bootstrap, args.partitions, 3), args.timeout)
        out["kill9_broker"] = victim
        out["kill9_full_isr_s"] = None if back is None else round(time.monotonic() - t1, 2)
    except Exception as e:  # a system that falls over is a result, not the end of the run
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        cluster_bench.stop_systems(systems)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--per-topic", type=int, default=1000)
    ap.add_argument("--systems", default="odradek,kafka")
    ap.add_argument("--baseline-src", default=None)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--produce-records", type=int, default=200_000)
    ap.add_argument("--idle-s", type=float, default=20)
    ap.add_argument("--metadata-n", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    results = []
    d = tempfile.mkdtemp(prefix="odradek-scale-cluster-")
    try:
        for name in args.systems.split(","):
            r = run_one(name, args, Path(d))
            print(json.dumps(r), flush=True)
            results.append(r)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        # Deleting 30,000 partitions' files takes this machine minutes (ext4 discards every freed
        # extent): done by a process of its own at the lowest priority, not in the locked run.
        subprocess.Popen(["nice", "-n", "19", "ionice", "-c3", "rm", "-rf", d], start_new_session=True)
        cluster_bench.log(f"deleting {d} in the background")


if __name__ == "__main__":
    main()
