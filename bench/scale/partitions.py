"""Many partitions on one broker (issue 28), side by side with Apache Kafka in one run.

For each partition count and each peer, one after the other on a fresh broker: create the
partitions (topics of ``--per-topic`` partitions, one CreateTopics each) and time it until a
Metadata for all topics shows every partition with a leader, and until every partition's leader
answers ListOffsets (Kafka names leaders in Metadata before their logs exist); then Metadata for all topics
(median round trip of ``--metadata-n``, raw socket, nothing decoded), the broker's RSS, its
open descriptors (and how many are segment ``.log`` files), its CPU seconds so far; then
kill -9 and time the restart until Metadata again shows every partition with a leader.

    /work/wt/heavy .venv/bin/python bench/scale/partitions.py --partitions 1000,10000 \\
        --peers odradek,kafka4 [--baseline-src /work/main/src] [--json out.json]

A peer that fails to create them all is reported with how many it created and its error.
The machine's open-file limit (``ulimit -n``) is what every peer gets.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
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
from metadata_probe import metadata_request, recv_frame  # noqa: E402
from support.raw import RawConnection, nested  # noqa: E402


def create_topic(c: RawConnection, name: str, partitions: int) -> tuple[int, str | None]:
    t = nested(
        19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()
    )
    r = c.call(19, 7, topics=(t,), timeout=300000, validate_only=False).topics[0]
    return int(r.error_code), r.error_message


def led_partitions(bootstrap: str) -> int:
    """Partitions a Metadata for all topics shows with a leader (0 if the broker does not answer)."""
    try:
        with RawConnection(bootstrap, timeout=120) as c:
            md = c.call(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    except OSError:
        return 0
    return sum(1 for t in md.topics for p in t.partitions if int(p.error_code) == 0 and p.leader_id >= 0)


def wait_led(bootstrap: str, want: int, timeout: float) -> float | None:
    """Seconds until ``want`` partitions have a leader (None: not within ``timeout``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if led_partitions(bootstrap) >= want:
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def serving_partitions(bootstrap: str, topics: dict[str, int]) -> int:
    """Partitions whose leader answers ListOffsets (latest) without an error: the log exists and
    is led. Kafka's Metadata names a leader as soon as the controller chose it, before the broker
    has created the log, so a leader in Metadata alone does not say the partition can be used."""
    served = 0
    try:
        with RawConnection(bootstrap, timeout=120) as c:
            for name, count in topics.items():
                parts = tuple(
                    nested(2, 7, "ListOffsetsPartition", partition_index=i, current_leader_epoch=-1, timestamp=-1)
                    for i in range(count)
                )
                t = nested(2, 7, "ListOffsetsTopic", name=name, partitions=parts)
                r = c.call(2, 7, replica_id=-1, isolation_level=0, topics=(t,))
                served += sum(1 for rt in r.topics for p in rt.partitions if int(p.error_code) == 0)
    except OSError:
        return 0
    return served


def wait_serving(bootstrap: str, topics: dict[str, int], timeout: float) -> float | None:
    """Seconds until every partition of ``topics`` answers ListOffsets (None: not within ``timeout``)."""
    want = sum(topics.values())
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if serving_partitions(bootstrap, topics) >= want:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def metadata_all_ms(bootstrap: str, n: int) -> float:
    host, port = bootstrap.rsplit(":", 1)
    req = metadata_request(None)
    times = []
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            t0 = time.perf_counter()
            s.sendall(req)
            recv_frame(s)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def descriptors(pid: int) -> tuple[int, int]:
    total = logs = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        total += 1
        logs += target.endswith(".log")
    return total, logs


def kill_and_restart(peer: brokers_mod.Peer, want: int, timeout: float) -> float | None:
    node = peer.handle.nodes[0] if peer.is_kafka else peer.handle
    node.kill()
    t0 = time.monotonic()
    node.start(timeout=timeout)
    led = wait_led(peer.bootstrap, want, max(1.0, timeout - (time.monotonic() - t0)))
    return None if led is None else time.monotonic() - t0


def run_one(name: str, partitions: int, per_topic: int, args, tmp: Path) -> dict:
    out: dict = {"peer": name, "partitions": partitions}
    peer = brokers_mod.start_peer(name, tmp / f"{name}-{partitions}", {}, args.baseline_src)
    out["version"] = peer.version
    try:
        created = 0
        topics: dict[str, int] = {}
        t0 = time.monotonic()
        with RawConnection(peer.bootstrap, timeout=300) as c:
            for i in range(-(-partitions // per_topic)):
                n = min(per_topic, partitions - created)
                code, msg = create_topic(c, f"scale-{i}", n)
                if code:
                    out["error"] = f"topic {i}: error {code}: {msg}"
                    break
                created += n
                topics[f"scale-{i}"] = n
        led = wait_led(peer.bootstrap, created, args.timeout)
        out["created"] = created
        out["create_s"] = round(time.monotonic() - t0, 2) if led is not None else None
        serving = wait_serving(peer.bootstrap, topics, args.timeout) if led is not None else None
        out["create_serving_s"] = round(time.monotonic() - t0, 2) if serving is not None else None
        pid = peer.pid
        out["metadata_all_ms"] = round(metadata_all_ms(peer.bootstrap, args.metadata_n), 2)
        out["rss_mb"] = round(brokers_mod.proc_memory(pid).get("rss_mb", 0.0), 1)
        out["fds"], out["log_fds"] = descriptors(pid)
        out["cpu_s"] = round(brokers_mod.proc_cpu(pid), 2)
        if created and not args.no_restart:
            r = kill_and_restart(peer, created, args.timeout)
            out["kill9_restart_s"] = None if r is None else round(r, 2)
            if r is not None:
                out["fds_after_restart"] = descriptors(peer.pid)[0]
    except Exception as e:  # a peer that falls over is a result, not the end of the run
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        peer.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="1000,10000", help="comma-separated counts")
    ap.add_argument("--per-topic", type=int, default=1000)
    ap.add_argument("--peers", default="odradek,kafka4")
    ap.add_argument("--baseline-src", default=None)
    ap.add_argument("--metadata-n", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--no-restart", action="store_true")
    ap.add_argument("--json", default=None, help="write the results here too")
    args = ap.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        reason = brokers_mod.available(p)
        if reason:
            raise SystemExit(f"{p}: {reason}")
    results = []
    with tempfile.TemporaryDirectory(prefix="odradek-scale-") as d:
        for n in (int(x) for x in args.partitions.split(",")):
            for p in peers:
                r = run_one(p, n, args.per_topic, args, Path(d))
                print(json.dumps(r), flush=True)
                results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
