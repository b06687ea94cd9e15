"""The brokers of a benchmark run, and what the runner reads of their processes.

Peers (all started at once, on 127.0.0.1, free ports, data in the run's temp directory):
  * ``odradek``   this checkout's broker (``python -m odradek broker``, default settings);
  * ``baseline``  another checkout's broker (``--baseline-src``), for before/after from one run;
  * ``kafka39``   Apache Kafka 3.9.2, KRaft single node (broker+controller in one JVM);
  * ``kafka4``    Apache Kafka 4.x, KRaft single node;
  * ``tansu``     Tansu 0.6.0 (Rust), memory storage (``.deps/bin/tansu``);
  * ``mock``      librdkafka's mock cluster (C, in a confluent-kafka client process).

Kafka runs with the JVM flags of its own ``kafka-server-start.sh`` (1 GiB heap, G1) and with
Kafka's defaults otherwise (flush settings included), through tests/support/apache_kafka.py;
the two settings every broker here shares are ``log.segment.delete.delay.ms=0`` (a deleted run's
files go at once, so removing them does not land in a later run's CPU) and
``group.initial.rebalance.delay.ms=0`` (a subscribing consumer does not wait 3 s for more members).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.apache_kafka import ApacheKafka, unavailable_reason
from support.apache_kafka import version as kafka_version
from support.broker import BrokerProcess, MockClusterBroker, TansuBroker

CLK_TCK = os.sysconf("SC_CLK_TCK")

#: ``kafka-server-start.sh``'s KAFKA_HEAP_OPTS (-Xmx1G -Xms1G; -Xmx comes from the fixture's heap)
#: and ``kafka-run-class.sh``'s KAFKA_JVM_PERFORMANCE_OPTS, as a user starting Kafka gets them
KAFKA_JVM = (
    "-Xms1g",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
)
KAFKA_LINES = {"kafka39": "3.9", "kafka4": "4"}
SHARED_SETTINGS = {"log.segment.delete.delay.ms": 0, "group.initial.rebalance.delay.ms": 0}
KNOWN = ("odradek", "baseline", "kafka39", "kafka4", "tansu", "mock")


def proc_cpu(pid: int) -> float:
    """utime+stime of one process, seconds (all its threads: the JVM's GC and JIT threads too)."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_memory(pid: int) -> dict[str, float]:
    """Resident memory now (VmRSS) and at its peak so far (VmHWM), MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                out["hwm_mb"] = int(line.split()[1]) / 1024
    return out


def settle(pid: int, timeout: float = 20.0, idle_cpu_per_s: float = 0.04) -> float:
    """Wait until a broker is idle again (less than `idle_cpu_per_s` of a core over half a
    second): a broker's start-up warm-up, a topic's creation or deletion must not land in the
    next measured run. Returns the seconds waited."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    last = proc_cpu(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = proc_cpu(pid)
        if now - last < idle_cpu_per_s / 2:
            break
        last = now
    return time.monotonic() - t0


@dataclass
class Peer:
    """A started broker: its name in the results, the process to measure, how to stop it."""

    name: str
    handle: Any  # BrokerProcess | ApacheKafka | TansuBroker | MockClusterBroker
    version: str = ""

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    @property
    def pid(self) -> int:
        if isinstance(self.handle, ApacheKafka):
            return self.handle.nodes[0].proc.pid
        return self.handle.proc.pid

    @property
    def is_kafka(self) -> bool:
        return self.name in KAFKA_LINES

    def stop(self) -> None:
        self.handle.stop()


def available(name: str) -> str | None:
    """Why a peer cannot run here (None when it can)."""
    if name in KAFKA_LINES:
        return unavailable_reason(KAFKA_LINES[name])
    if name == "tansu" and not TansuBroker.available():
        return "not installed (.deps/bin/tansu)"
    return None


def start_peer(name: str, tmp: Path, overrides: dict[str, str], baseline_src: str | None) -> Peer:
    settings = {"num.partitions": 1, **SHARED_SETTINGS}
    if name == "odradek":
        b: Any = BrokerProcess(tmp / name, {**settings, **overrides})
        version = "this checkout"
    elif name == "baseline":
        b = BrokerProcess(tmp / name, settings, src=baseline_src)
        version = str(baseline_src)
    elif name in KAFKA_LINES:
        line = KAFKA_LINES[name]
        b = ApacheKafka(tmp / name, line=line, heap="1g", jvm=KAFKA_JVM, overrides=settings)
        version = kafka_version(line)
    elif name == "mock":
        b = MockClusterBroker(tmp / name)
        version = "librdkafka mock"
    elif name == "tansu":
        b = TansuBroker(tmp / name)
        version = "0.6.0"
    else:
        raise SystemExit(f"unknown peer {name}; known: {', '.join(KNOWN)}")
    b.start(timeout=120 if name in KAFKA_LINES else 60)
    return Peer(name, b, version)
