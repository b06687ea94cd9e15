"""Restart time after kill -9 of a single broker holding N GB written since its last start:
odradek beside Apache Kafka 4.4, on the same workload, in one run.

    /work/wt/heavy .venv/bin/python bench/storage/restart.py [--gb 3,30] [--brokers kafka4,odradek]
        [--partitions 4] [--record-kib 10] [--idle-before-kill 0] [--dir /work/tmp] [--json out.json]

For each size, and each broker in turn (the previous one's data deleted first, so the disk holds
one copy at a time):

1. a fresh broker (default settings; Kafka with the JVM flags of its own start script) and a
   topic of ``--partitions`` partitions;
2. Kafka's ProducerPerformance (the Java client, from Kafka 3.9's jars, for both brokers) writes
   N GB in ``--record-kib`` KiB records, acks=1, 512 KiB batches;
3. ``--idle-before-kill`` seconds later (default 0: right after the last acknowledgement) the
   broker gets SIGKILL; what its recovery-point checkpoint then says is recorded: how many
   segments and bytes lie at or after each partition's recovery point (what a recovery must
   re-read: Kafka's LogLoader and odradek's loader both start at the segment holding it);
4. it is started again; timed from the spawn to *serving*: every partition answers ListOffsets
   (latest) with the end offset it had before the kill (nothing acknowledged was lost: the page
   cache outlives a process). Also recorded: the time to the broker's own "started" line and the
   broker's CPU seconds until serving.

Printed: a table per size (seconds to serving, to started, CPU, segments/bytes to re-read, and
for odradek what its loader says it read) and the ratio odradek/Kafka of the time to serving.

Both brokers flush a segment when it rolls and checkpoint recovery points every
``log.flush.offset.checkpoint.interval.ms`` (60 s; Kafka's first one 30 s after start); odradek
also checkpoints a recovery point a roll's flush moved within a second. So after a kill right
after the writes Kafka re-reads what was written since its last checkpoint (up to a minute of
writes), odradek its active segments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench" / "broker"))

from brokers import KAFKA_JVM, proc_cpu  # noqa: E402
from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support.apache_kafka import ApacheKafka, tool_command, unavailable_reason  # noqa: E402
from support.apache_kafka import version as kafka_version  # noqa: E402
from support.broker import BrokerProcess  # noqa: E402

TOPIC = "restart"
_RECOVERED = re.compile(rf"/{TOPIC}-\d+: recovery from offset \d+ read (\d+) segments \((\d+) bytes\)")


# ----------------------------------------------------------------------------- brokers


class Broker:
    """One broker under test: start, kill, its process, its log directory and log file."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        if name == "odradek":
            self.handle = BrokerProcess(workdir, {"num.partitions": 1})
            self.data_dir = self.handle.log_dirs
            self.version = "this checkout"
        else:
            self.handle = ApacheKafka(workdir, line="4", heap="1g", jvm=KAFKA_JVM)
            self.data_dir = self.handle.nodes[0].data_dir
            self.version = kafka_version("4")

    @property
    def process(self):
        return self.handle if self.name == "odradek" else self.handle.nodes[0]

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    def start(self) -> None:
        self.handle.start(timeout=600)

    def spawn(self) -> None:
        """Start the process and return at once (the restart is timed from here)."""
        self.process.spawn()

    def wait_started(self) -> None:
        self.process.wait_ready(timeout=3600)

    def kill(self) -> None:
        self.handle.kill()

    def stop(self) -> None:
        self.handle.stop()


# ----------------------------------------------------------------------------- workload


def create_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        f.result(60)


def write(bootstrap: str, gb: float, record_kib: int) -> dict:
    size = record_kib * 1024
    n = int(gb * 1e9) // size
    cmd = tool_command(
        "3.9",
        "ProducerPerformance",
        "--topic",
        TOPIC,
        "--num-records",
        str(n),
        "--record-size",
        str(size),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=1",
        "linger.ms=20",
        "batch.size=524288",
        "buffer.memory=268435456",
        "compression.type=none",
        heap="1g",
    )
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    seconds = time.monotonic() - t0
    return {"records": n, "bytes": n * size, "seconds": seconds, "mb_s": n * size / seconds / 1e6, "tool": out[-300:]}


def end_offsets(bootstrap: str, partitions: int, timeout: float = 10) -> list[int] | None:
    """Every partition's end offset (ListOffsets latest), or None if one does not answer yet."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-probe", "socket.timeout.ms": 2000})
    try:
        return [c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=timeout)[1] for p in range(partitions)]
    except KafkaException:
        return None
    finally:
        c.close()


def to_reread(data_dir: Path, partitions: int) -> dict:
    """Segments and bytes at or after each partition's checkpointed recovery point (0 when the
    checkpoint does not list it): what a recovery after this kill must re-read."""
    points = {}
    path = data_dir / "recovery-point-offset-checkpoint"
    if path.exists():
        for line in path.read_text().splitlines()[2:]:
            topic, part, off = line.rsplit(" ", 2)
            points[(topic, int(part))] = int(off)
    segments = total_segments = 0
    nbytes = total_bytes = 0
    for p in range(partitions):
        d = data_dir / f"{TOPIC}-{p}"
        logs = sorted((int(n[:-4]), (d / n).stat().st_size) for n in os.listdir(d) if n.endswith(".log"))
        rp = points.get((TOPIC, p), 0)
        first = max((i for i, (base, _) in enumerate(logs) if base <= rp), default=0)
        segments += len(logs) - first
        nbytes += sum(size for _, size in logs[first:])
        total_segments += len(logs)
        total_bytes += sum(size for _, size in logs)
    return {"segments": segments, "bytes": nbytes, "total_segments": total_segments, "total_bytes": total_bytes}


def odradek_recovered(log_path: Path, since: int) -> dict:
    """What odradek's loader says it read, from its log written after byte ``since``."""
    with open(log_path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    found = _RECOVERED.findall(text)
    return {"segments": sum(int(s) for s, _ in found), "bytes": sum(int(b) for _, b in found)}


# ----------------------------------------------------------------------------- one measurement


def measure(name: str, workdir: Path, gb: float, args) -> dict:
    b = Broker(name, workdir)
    b.start()
    try:
        create_topic(b.bootstrap, args.partitions)
        written = write(b.bootstrap, gb, args.record_kib)
        before = end_offsets(b.bootstrap, args.partitions)
        assert before is not None and sum(before) == written["records"], (before, written)
        if args.idle_before_kill:
            time.sleep(args.idle_before_kill)
        b.kill()
        reread = to_reread(b.data_dir, args.partitions)
        log_size = b.process.log_path.stat().st_size
        t0 = time.monotonic()
        b.spawn()
        pid = b.process.proc.pid
        b.wait_started()
        started = time.monotonic() - t0
        while True:
            now = end_offsets(b.bootstrap, args.partitions, timeout=5)
            if now == before:
                break
            if now is not None and any(x > y for x, y in zip(now, before, strict=True)):
                raise AssertionError(f"{name}: end offsets {now} past {before}")
            time.sleep(0.05)
        serving = time.monotonic() - t0
        cpu = proc_cpu(pid)
        result = {
            "broker": name,
            "version": b.version,
            "gb": gb,
            "written": {k: v for k, v in written.items() if k != "tool"},
            "to_reread": reread,
            "started_s": started,
            "serving_s": serving,
            "cpu_s": cpu,
        }
        if name == "odradek":
            result["loader_read"] = odradek_recovered(b.process.log_path, log_size)
        return result
    finally:
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", default="3,30", help="sizes written before the kill, GB (1e9 bytes), comma-separated")
    ap.add_argument("--brokers", default="kafka4,odradek")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--record-kib", type=int, default=10)
    ap.add_argument("--idle-before-kill", type=float, default=0.0)
    ap.add_argument("--dir", default=None, help="where the brokers' data goes (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the results here too")
    args = ap.parse_args()
    names = args.brokers.split(",")
    for n in names:
        if n not in ("kafka4", "odradek"):
            raise SystemExit(f"unknown broker {n}")
        if n == "kafka4" and (reason := unavailable_reason("4")):
            raise SystemExit(f"Kafka 4: {reason}")
    results = []
    for gb in [float(x) for x in args.gb.split(",")]:
        for name in names:
            tmp = Path(tempfile.mkdtemp(prefix=f"restart-{name}-", dir=args.dir))
            try:
                r = measure(name, tmp, gb, args)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            results.append(r)
            print(json.dumps(r), flush=True)
    print()
    print(
        "| GB | broker | write MB/s | to re-read: segments, GB | loader read | "
        "started s | serving s | CPU s | serving ratio odradek/kafka |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    by = {(r["gb"], r["broker"]): r for r in results}
    for r in results:
        k = by.get((r["gb"], "kafka4"))
        ratio = f"{r['serving_s'] / k['serving_s']:.2f}" if r["broker"] == "odradek" and k else ""
        lr = r.get("loader_read")
        loader = f"{lr['segments']} segs, {lr['bytes'] / 1e9:.2f} GB" if lr else ""
        rr = r["to_reread"]
        print(
            f"| {r['gb']:g} | {r['broker']} | {r['written']['mb_s']:.0f} | "
            f"{rr['segments']}/{rr['total_segments']}, {rr['bytes'] / 1e9:.2f}/{rr['total_bytes'] / 1e9:.2f} | "
            f"{loader} | {r['started_s']:.1f} | {r['serving_s']:.1f} | {r['cpu_s']:.1f} | {ratio} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
