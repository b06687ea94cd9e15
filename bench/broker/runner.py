"""One broker's side of a benchmark run: load commands run against it with its CPU and memory
read before and after, topics created and dropped around them.

Every load is a subprocess (``odradek perf ...`` or one of Kafka's tools in a JVM); a row of the
results holds what its parser read from the output, the broker's CPU-seconds over the run
(utime+stime from /proc/<pid>/stat: every thread of the process, the JVM's GC and JIT included),
the broker's resident memory after it (VmRSS, and VmHWM, the peak since the broker started), the
load process's own CPU (RUSAGE_CHILDREN) and the exact command.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from brokers import Peer, proc_cpu, proc_memory, settle

ROOT = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def perf_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "odradek", "perf", *args, "--json"]


def parse_perf_json(stdout: str) -> dict:
    """The last line of ``odradek perf ... --json``."""
    return json.loads(stdout.strip().splitlines()[-1])


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def shown(cmd: list[str]) -> str:
    """A command as one shell-like line (the interpreter or java path left out)."""
    return " ".join(c if c and " " not in c and "*" not in c else repr(c) for c in cmd[1:])


class Runner:
    def __init__(self, peer: Peer, args) -> None:
        self.peer = peer
        self.name = peer.name
        self.args = args
        self.results: list[dict] = []

    @property
    def pid(self) -> int:
        return self.peer.pid

    @property
    def bootstrap(self) -> str:
        return self.peer.bootstrap

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def run(
        self,
        cmd: list[str],
        meta: dict,
        parse: Callable[[str], dict] = parse_perf_json,
        records_key: str = "records",
        profile: str | None = None,
        timeout: float = 1800,
    ) -> dict | None:
        """Run one load command; append and return its row (None when it failed: the row then
        holds the error)."""
        line = shown(cmd)
        log(f"[{self.name}] {line}")
        spy = self._profiler(profile) if profile else None
        cpu0, t0, c0 = proc_cpu(self.pid), time.perf_counter(), children_cpu()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=self.env(), timeout=timeout)
        except subprocess.TimeoutExpired as e:
            p = subprocess.CompletedProcess(cmd, -9, e.stdout or "", f"timed out after {timeout} s")
        cpu1, t1, c1 = proc_cpu(self.pid), time.perf_counter(), children_cpu()
        mem = proc_memory(self.pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
        res = None
        err = None
        if p.returncode == 0:
            try:
                res = parse(p.stdout)
            except Exception as e:  # noqa: BLE001 - an output we could not read is a failed run
                err = f"unreadable output ({e}): {p.stdout.strip()[-300:]}"
        else:
            err = (p.stderr or p.stdout or "").strip()[-300:]
        if res is None:
            log(f"[{self.name}] FAILED ({p.returncode}): {err}")
            row = {"broker": self.name, **meta, "error": err, "command": line}
            self.results.append(row)
            return None
        n = res.get(records_key) or 0
        cpu = cpu1 - cpu0
        row = {
            "broker": self.name,
            **res,
            **meta,
            "broker_cpu_s": cpu,
            "wall_s": t1 - t0,
            "broker_cpu_s_per_m": cpu / n * 1e6 if n else None,
            "driver_cpu_s": c1 - c0,
            **mem,
            "command": line,
        }
        self.results.append(row)
        lat = res.get("latency_ms") or {}
        rate = res.get("records_per_s", res.get("achieved_rate")) or 0
        log(
            f"[{self.name}]   -> {rate:,.0f} rec/s, broker {cpu:.2f} CPU-s ({row['broker_cpu_s_per_m'] or 0:.3f}/M), "
            f"RSS {mem.get('rss_mb', 0):.0f} MiB"
            + (
                f", p50 {lat['p50']:.2f} p99 {lat['p99']:.2f} ms"
                if lat.get("count") and lat.get("p50") is not None and row.get("workload") == "e2e"
                else ""
            )
        )
        return row

    def _profiler(self, path: str) -> subprocess.Popen:
        spy = subprocess.Popen(
            [str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(self.pid), "-r", "200"]
            + ["--nonblocking", "-f", "raw", "-o", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        return spy

    # ------------------------------------------------------------------ topics
    def create_topic(self, topic: str, partitions: int) -> None:
        """Create, then wait for every partition to have a leader and the broker to be idle
        again (creating 1,000 partitions keeps a broker busy for a while after it answered)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        if self.name == "mock":  # its CreateTopics never answers (20 s each); topics auto-create, 4 partitions
            return
        a = AdminClient({"bootstrap.servers": self.bootstrap})
        fs = a.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
        for f in fs.values():
            try:
                f.result(60)
            except Exception as e:  # noqa: BLE001
                log(f"[{self.name}] create {topic}: {e}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            md = a.list_topics(topic, timeout=10)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                if all(p.leader >= 0 for p in t.partitions.values()):
                    break
            time.sleep(0.2)
        waited = settle(self.pid, timeout=30)
        if waited >= 30:
            log(f"[{self.name}] still busy 30 s after creating {topic} ({partitions} partitions): measuring anyway")

    def delete_topic(self, topic: str) -> None:
        """Drop a finished run's topic (memory-backed peers would keep every run's records),
        then wait until the broker is idle again."""
        from confluent_kafka.admin import AdminClient

        if self.name == "mock":  # keeps ~5 MiB per partition anyway, and DeleteTopics never answers
            return
        a = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in a.delete_topics([topic], operation_timeout=30).values():
            try:
                f.result(60)
            except Exception as e:  # noqa: BLE001
                log(f"[{self.name}] delete {topic}: {e}")
        time.sleep(0.3)
        settle(self.pid, timeout=30)

    def watermarks(self, topic: str, partitions: int) -> tuple[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "wm"})
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


def rotation(runners: list[Runner], rep: int) -> list[Runner]:
    """Brokers in a different order each repetition, so none always runs first after a change of
    workload (or always last, when the machine's background load has crept up)."""
    k = rep % len(runners)
    return runners[k:] + runners[:k]
