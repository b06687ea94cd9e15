"""The measuring side of `odradek perf`, whatever the client: pacing, latency samples,
percentiles, client CPU, and the result of each workload as a dict. A client plugs in as a
:class:`Driver` (odradek/cli/perf/drivers/); nothing here knows click or a client library.

Bad parameters raise :class:`PerfError` (the commands turn it into a usage error).
"""

from __future__ import annotations

import math
import random
import resource
import string
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

STAMP = struct.Struct(">q")  # e2e: the sender's perf_counter_ns at the head of each value


class PerfError(ValueError):
    """A parameter the chosen driver cannot honour."""


# ----------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class ProduceSpec:
    bootstrap: str
    topic: str
    num_records: int
    acks: str = "1"
    compression: str = "none"
    linger_ms: int = 5
    batch_size: int | None = None
    throughput: float = -1
    sample_every: int = 16
    partition: int | None = None
    idempotence: bool = False
    native_batch: int = 0  # confluent: records per produce_batch() call (0: one produce() each)
    client_config: dict[str, str] = field(default_factory=dict)  # confluent: more librdkafka settings
    settings: dict[str, Any] = field(default_factory=dict)  # odradek: --command-config's client settings


@dataclass(frozen=True)
class ConsumeSpec:
    bootstrap: str
    topic: str
    num_records: int
    group: str | None = None
    fetch_max_wait_ms: int = 100
    timeout_s: float = 30
    settings: dict[str, Any] = field(default_factory=dict)  # odradek: --command-config's client settings


@dataclass(frozen=True)
class E2ESpec:
    bootstrap: str
    topic: str
    partition: int = 0
    acks: str = "1"
    linger_ms: int = 0
    fetch_max_wait_ms: int = 500
    settings: dict[str, Any] = field(default_factory=dict)  # odradek: --command-config's client settings


@dataclass
class Consumed:
    """What a driver's consume loop counted; times from time.perf_counter()."""

    records: int = 0
    payload_bytes: int = 0  # keys + values
    start: float = 0.0
    end: float = 0.0
    first_record_s: float | None = None


@dataclass
class Acks:
    """Send->acknowledgement latencies of the sampled records, and delivery errors."""

    samples_ns: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def acked(self, sent_ns: int) -> None:
        self.samples_ns.append(time.perf_counter_ns() - sent_ns)

    def failed(self, error: str) -> None:
        self.errors.append(error)


class E2EClient(Protocol):
    """The two ends of an e2e run, made by a driver: `consume` runs in its own thread until
    `stop` is set, calls `ready.set()` once its position is resolved (or on error), and hands
    every record's value to `received(value, perf_counter_ns)`."""

    def consume(
        self, received: Callable[[bytes, int], None], ready: threading.Event, stop: threading.Event
    ) -> None: ...

    def send(self, value: bytes) -> None: ...

    def finish(self) -> None:
        """Flush and close the producer."""


class Driver(Protocol):
    name: str
    native_batch: bool  # whether ProduceSpec.native_batch / client_config mean anything to it
    takes_settings: bool  # whether the specs' settings (--command-config, Java client names) do

    def produce(self, spec: ProduceSpec, payload: bytes, acks: Acks, progress: Progress) -> float:
        """Send spec.num_records copies of `payload` (acknowledgement callbacks for every
        spec.sample_every-th record and the last), flush, and return the seconds from the first
        send to the end of the flush (connecting and metadata outside the timing)."""
        ...

    def consume(self, spec: ConsumeSpec, progress: Progress) -> Consumed:
        """Read up to spec.num_records from the earliest offsets (every partition assigned, or
        subscribed with spec.group), stopping after spec.timeout_s without a record."""
        ...

    def e2e(self, spec: E2ESpec) -> E2EClient: ...


# ----------------------------------------------------------------------------- helpers
def percentiles(samples_ns: list[int]) -> dict:
    """avg/p50/p95/p99/p99.9/max in milliseconds (None when there are no samples)."""
    if not samples_ns:
        return {"count": 0, "avg": None, "p50": None, "p95": None, "p99": None, "p999": None, "max": None}
    s = sorted(samples_ns)
    n = len(s)

    def q(p: float) -> float:
        return s[min(n - 1, max(0, math.ceil(p * n - 1e-9) - 1))] / 1e6  # nearest rank

    return {
        "count": n,
        "avg": sum(s) / n / 1e6,
        "p50": q(0.50),
        "p95": q(0.95),
        "p99": q(0.99),
        "p999": q(0.999),
        "max": s[-1] / 1e6,
    }


def make_payload(size: int, seed: int = 42) -> bytes:
    """Random upper-case letters, like kafka-producer-perf-test (one payload reused for every record)."""
    rnd = random.Random(seed)
    return "".join(rnd.choice(string.ascii_uppercase) for _ in range(size)).encode()


def cpu_seconds_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def acks_value(acks: str) -> int:
    return -1 if acks in ("all", "-1") else int(acks)


class Pacer:
    """Spreads sends evenly at `rate` records/s (rate <= 0: as fast as possible)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.perf_counter()

    def wait(self, i: int) -> None:
        if self.rate <= 0:
            return
        target = self.start + i / self.rate
        delay = target - time.perf_counter()
        if delay > 0.0002:
            time.sleep(delay)


class Progress:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.bar.add_task(label, total=total)
            self.bar.start()
        self.last = 0

    def update(self, done: int) -> None:
        if self.bar is not None and done - self.last >= 10000:
            self.bar.update(self.task, completed=done)
            self.last = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def check_settings(driver: Driver, settings: dict[str, Any]) -> None:
    """--command-config's settings are the Java client's names, which odradek's client takes;
    refused (not ignored) for a driver that does not."""
    if settings and not driver.takes_settings:
        raise PerfError(f"--command-config needs --driver odradek (the {driver.name} driver takes its own settings)")


def ensure_topic(
    bootstrap: str,
    topic: str,
    partitions: int | None,
    note: Callable[[str], None],
    settings: dict[str, Any] | None = None,
) -> None:
    """Create `topic` with `partitions` if it does not exist (best effort: brokers without
    CreateTopics auto-create on first use); what went wrong is passed to `note`. `settings`:
    client settings for a secured listener (--command-config)."""
    if not partitions:
        return
    import asyncio

    from odradek.client import NewTopic
    from odradek.client.aio import AIOAdmin

    async def go():
        async with AIOAdmin(settings, bootstrap_servers=bootstrap, default_api_timeout_ms=15000) as a:
            try:
                await a.create_topics([NewTopic(topic, partitions, -1)])
            except Exception as e:  # noqa: BLE001 - exists already, or not supported
                if "already" not in str(e).lower() and "exists" not in str(e).lower():
                    note(f"note: create topic {topic}: {type(e).__name__}: {e}")

    try:
        asyncio.run(go())
    except Exception as e:  # noqa: BLE001
        note(f"note: create topic {topic}: {type(e).__name__}: {e}")


# ----------------------------------------------------------------------------- the workloads
def run_produce(driver: Driver, spec: ProduceSpec, record_size: int, progress: bool = False) -> dict:
    if spec.native_batch > 0 and not driver.native_batch:
        raise PerfError("--native-batch needs --driver confluent")
    if spec.client_config and not driver.native_batch:
        raise PerfError("-X needs --driver confluent")
    check_settings(driver, spec.settings)
    payload = make_payload(record_size)
    acks = Acks()
    bar = Progress(spec.num_records, f"produce {spec.topic}", progress)
    cpu0 = cpu_seconds_self()
    elapsed = driver.produce(spec, payload, acks, bar)
    bar.close()
    nbytes = spec.num_records * record_size
    return {
        "workload": "produce",
        "driver": driver.name,
        "native_batch": spec.native_batch,
        "topic": spec.topic,
        "records": spec.num_records,
        "record_size": record_size,
        "acks": spec.acks,
        "compression": spec.compression,
        "linger_ms": spec.linger_ms,
        "seconds": elapsed,
        "records_per_s": spec.num_records / elapsed,
        "mb_per_s": nbytes / elapsed / 1e6,
        "latency_ms": percentiles(acks.samples_ns),
        "errors": len(acks.errors),
        "first_error": acks.errors[0] if acks.errors else None,
        "client_cpu_s": cpu_seconds_self() - cpu0,
    }


def run_consume(driver: Driver, spec: ConsumeSpec, progress: bool = False) -> dict:
    """Read `num_records` from the earliest offsets of every partition of the topic (or stop after
    `timeout_s` without a record)."""
    check_settings(driver, spec.settings)
    bar = Progress(spec.num_records, f"consume {spec.topic}", progress)
    cpu0 = cpu_seconds_self()
    got = driver.consume(spec, bar)
    bar.close()
    elapsed = max(got.end - got.start, 1e-9)
    return {
        "workload": "consume",
        "driver": driver.name,
        "topic": spec.topic,
        "records": got.records,
        "wanted": spec.num_records,
        "seconds": elapsed,
        "first_record_s": got.first_record_s,
        "records_per_s": got.records / elapsed,
        "mb_per_s": got.payload_bytes / elapsed / 1e6,
        "client_cpu_s": cpu_seconds_self() - cpu0,
    }


def run_e2e(
    driver: Driver, spec: E2ESpec, rate: float, duration_s: float, record_size: int = 100, warmup_s: float = 1.0
) -> dict:
    """Produce at `rate` records/s for `duration_s` while a consumer in this process reads them;
    latency = consumed - sent (same monotonic clock). Records sent during `warmup_s` are not counted."""
    check_settings(driver, spec.settings)
    n = int(rate * duration_s)
    pad = make_payload(max(0, record_size - STAMP.size))
    lat: list[int] = []
    received = 0
    ready = threading.Event()
    stop = threading.Event()
    err: list[BaseException] = []
    perf = time.perf_counter_ns
    warm_until: int | None = None

    def record(value: bytes, now: int) -> None:
        nonlocal received
        received += 1
        t0 = STAMP.unpack_from(value)[0]
        if warm_until is not None and t0 >= warm_until:
            lat.append(now - t0)

    client = driver.e2e(spec)

    def consume() -> None:
        try:
            client.consume(record, ready, stop)
        except BaseException as e:  # noqa: BLE001
            err.append(e)
            ready.set()

    th = threading.Thread(target=consume, name="e2e-consumer", daemon=True)
    th.start()
    ready.wait(30)
    if err:
        raise err[0]
    time.sleep(0.2)
    cpu0 = cpu_seconds_self()
    pacer = Pacer(rate)
    warm_until = perf() + int(warmup_s * 1e9)
    send = client.send
    start = time.perf_counter()
    for i in range(n):
        pacer.wait(i)
        send(STAMP.pack(perf()) + pad)
    sent_s = time.perf_counter() - start
    client.finish()
    deadline = time.monotonic() + 15
    while received < n and time.monotonic() < deadline and th.is_alive():
        time.sleep(0.05)
    stop.set()
    th.join(10)
    return {
        "workload": "e2e",
        "driver": driver.name,
        "topic": spec.topic,
        "rate": rate,
        "duration_s": duration_s,
        "sent": n,
        "received": received,
        "send_seconds": sent_s,
        "achieved_rate": n / sent_s,
        "acks": spec.acks,
        "linger_ms": spec.linger_ms,
        "warmup_s": warmup_s,
        "latency_ms": percentiles(lat),
        "client_cpu_s": cpu_seconds_self() - cpu0,
    }
