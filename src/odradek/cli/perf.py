"""`odradek perf produce|consume|e2e`: load generators in the manner of Kafka's
kafka-producer-perf-test.sh, kafka-consumer-perf-test.sh and EndToEndLatency, usable against
any Kafka-compatible broker.

Two drivers:
* ``odradek``   (default) odradek's own Python client (`odradek.client`);
* ``confluent`` confluent-kafka, i.e. librdkafka (C) with its native batching, so that the
  client is not what is being measured.

Every command prints a summary (or one JSON object with ``--json``): records/s, MB/s
(MB = 10^6 bytes of record payload: key + value), and latency percentiles in ms.

Latency: ``produce`` measures send()->acknowledgement for every ``--sample-every``-th record
(default 16: enough for stable percentiles without a Python callback per record); ``e2e``
stamps each record with the sender's monotonic clock and measures send()->consumed.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
import string
import struct
import sys
import threading
import time
import uuid

import click

from odradek.cli.topics import bootstrap_option

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
DRIVERS = ["odradek", "confluent"]
_STAMP = struct.Struct(">q")
_QUEUED_MAX = 1_000_000  # confluent driver: queue.buffering.max.messages


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


class _Progress:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
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


def ensure_topic(bootstrap: str, topic: str, partitions: int | None) -> None:
    """Create `topic` with `partitions` if it does not exist (best effort: brokers without
    CreateTopics auto-create on first use)."""
    if not partitions:
        return
    import asyncio

    from odradek.client import NewTopic
    from odradek.client.aio import AIOAdmin

    async def go():
        async with AIOAdmin(bootstrap_servers=bootstrap, default_api_timeout_ms=15000) as a:
            try:
                await a.create_topics([NewTopic(topic, partitions, -1)])
            except Exception as e:  # noqa: BLE001 - exists already, or not supported
                if "already" not in str(e).lower() and "exists" not in str(e).lower():
                    click.echo(f"note: create topic {topic}: {type(e).__name__}: {e}", err=True)

    try:
        asyncio.run(go())
    except Exception as e:  # noqa: BLE001
        click.echo(f"note: create topic {topic}: {type(e).__name__}: {e}", err=True)


def _acks_value(acks: str) -> int:
    return -1 if acks in ("all", "-1") else int(acks)


# ----------------------------------------------------------------------------- produce
def run_produce(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float = -1,
    acks: str = "1",
    compression: str = "none",
    linger_ms: int = 5,
    batch_size: int | None = None,
    driver: str = "odradek",
    sample_every: int = 16,
    partition: int | None = None,
    idempotence: bool = False,
    progress: bool = False,
    native_batch: int = 0,
    client_config: dict[str, str] | None = None,
) -> dict:
    """`native_batch` > 0 (confluent driver only): hand librdkafka lists of that many records
    with `produce_batch` instead of one `produce()` call per record, so the Python loop (about
    0.6-0.8 M calls/s on this machine) stops being what limits the run. `client_config`
    (confluent driver only): more librdkafka settings, over the ones set here."""
    if native_batch > 0 and driver != "confluent":
        raise click.BadParameter("--native-batch needs --driver confluent")
    if client_config and driver != "confluent":
        raise click.BadParameter("-X needs --driver confluent")
    payload = make_payload(record_size)
    samples: list[int] = []
    errors: list[str] = []
    perf = time.perf_counter_ns
    bar = _Progress(num_records, f"produce {topic}", progress)
    cpu0 = cpu_seconds_self()
    if driver == "odradek":
        from odradek.client import Producer

        p = Producer(
            bootstrap_servers=bootstrap,
            acks=_acks_value(acks),
            compression_type=compression,
            linger_ms=linger_ms,
            batch_size=batch_size or 16384,
            enable_idempotence=idempotence,
            buffer_memory=64 * 1024 * 1024,
        )
        # connect and fetch metadata outside the timing
        p.partitions_for(topic)
        send = p.send

        def cb_for(t0):
            def cb(_meta, exc):
                if exc is None:
                    samples.append(perf() - t0)
                else:
                    errors.append(repr(exc))

            return cb

        pacer = Pacer(throughput)
        start = time.perf_counter()
        for i in range(num_records):
            if throughput > 0:
                pacer.wait(i)
            if i % sample_every == 0 or i == num_records - 1:
                send(topic, payload, partition=partition, callback=cb_for(perf()))
                bar.update(i)
            else:
                send(topic, payload, partition=partition)
        p.flush()
        elapsed = time.perf_counter() - start
        p.close(10)
    elif driver == "confluent":
        from confluent_kafka import Producer as CProducer

        conf = {
            "bootstrap.servers": bootstrap,
            "acks": acks if acks != "-1" else "all",
            "compression.type": compression,
            "linger.ms": linger_ms,
            "enable.idempotence": idempotence,
            "queue.buffering.max.kbytes": 1048576,
            "queue.buffering.max.messages": _QUEUED_MAX,
        }
        if batch_size:
            conf["batch.size"] = batch_size
        conf.update(client_config or {})
        p = CProducer(conf)
        p.list_topics(topic, timeout=15)

        def cb_for(t0):
            def cb(err, _msg):
                if err is None:
                    samples.append(perf() - t0)
                else:
                    errors.append(str(err))

            return cb

        start = time.perf_counter()
        if native_batch > 0:
            _produce_batches(
                p, topic, payload, num_records, native_batch, throughput, sample_every, partition, cb_for, bar
            )
        else:
            _produce_loop(p, topic, payload, num_records, throughput, sample_every, partition, cb_for, bar)
        remaining = p.flush(120)
        elapsed = time.perf_counter() - start
        if remaining:
            errors.append(f"{remaining} records not delivered after flush")
    else:
        raise click.BadParameter(f"unknown driver {driver}")
    bar.close()
    nbytes = num_records * record_size
    return {
        "workload": "produce",
        "driver": driver,
        "native_batch": native_batch,
        "topic": topic,
        "records": num_records,
        "record_size": record_size,
        "acks": acks,
        "compression": compression,
        "linger_ms": linger_ms,
        "seconds": elapsed,
        "records_per_s": num_records / elapsed,
        "mb_per_s": nbytes / elapsed / 1e6,
        "latency_ms": percentiles(samples),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "client_cpu_s": cpu_seconds_self() - cpu0,
    }


def _produce_loop(
    p,
    topic: str,
    payload: bytes,
    num_records: int,
    throughput: float,
    sample_every: int,
    partition: int | None,
    cb_for,
    bar,
) -> None:
    """One `produce()` call per record (what most applications do)."""
    produce, poll = p.produce, p.poll
    kw = {} if partition is None else {"partition": partition}
    perf = time.perf_counter_ns
    pacer = Pacer(throughput)
    for i in range(num_records):
        if throughput > 0:
            pacer.wait(i)
        while True:
            try:
                if i % sample_every == 0 or i == num_records - 1:
                    produce(topic, payload, on_delivery=cb_for(perf()), **kw)
                    bar.update(i)
                else:
                    produce(topic, payload, **kw)
                break
            except BufferError:
                poll(0.005)
        if i % 128 == 0:
            poll(0)


def _produce_batches(
    p,
    topic: str,
    payload: bytes,
    num_records: int,
    size: int,
    throughput: float,
    sample_every: int,
    partition: int | None,
    cb_for,
    bar,
) -> None:
    """confluent-kafka's `produce_batch`: one C call enqueues a whole list. The list repeats one
    dict (the same value) except every `sample_every`-th record, which carries its own latency
    callback. A list is offered only when librdkafka's queue has room for all of it (the driver
    allows 1,000,000 queued records), so none is refused for a full queue; any other refusal is
    an error of the run."""
    plain = {"value": payload} if partition is None else {"value": payload, "partition": partition}
    pacer = Pacer(throughput)
    size = min(size, _QUEUED_MAX // 2)
    room = _QUEUED_MAX - size
    done = 0
    while done < num_records:
        if throughput > 0:
            pacer.wait(done)
        while len(p) > room:
            p.poll(0.002)
        n = min(size, num_records - done)
        t0 = time.perf_counter_ns()
        msgs = [plain] * n
        for j in range(-done % sample_every, n, sample_every):
            msgs[j] = {**plain, "callback": cb_for(t0)}
        queued = p.produce_batch(topic, msgs)
        if queued != n:
            err = next((m["_error"] for m in msgs if "_error" in m), "unknown")
            raise RuntimeError(f"produce_batch queued {queued} of {n} records: {err}")
        p.poll(0)
        done += n
        bar.update(done)


# ----------------------------------------------------------------------------- consume
def run_consume(
    bootstrap: str,
    topic: str,
    num_records: int,
    driver: str = "odradek",
    group: str | None = None,
    fetch_max_wait_ms: int = 100,
    timeout_s: float = 30,
    progress: bool = False,
) -> dict:
    """Read `num_records` from the earliest offsets of every partition of `topic` (or stop after
    `timeout_s` without a record)."""
    got = 0
    nbytes = 0
    bar = _Progress(num_records, f"consume {topic}", progress)
    cpu0 = cpu_seconds_self()
    first = None
    if driver == "odradek":
        from odradek.client import Consumer, TopicPartition

        cfg = dict(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=fetch_max_wait_ms,
            max_poll_records=5000,
            enable_auto_commit=False,
        )
        if group:
            cfg["group_id"] = group
        c = Consumer(**cfg)
        if group:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))])
        start = time.perf_counter()
        last = start
        try:
            while got < num_records:
                recs = c.poll(1.0)
                now = time.perf_counter()
                if not recs:
                    if now - last > timeout_s:
                        break
                    continue
                if first is None:
                    first = now - start
                last = now
                got += len(recs)
                for r in recs:
                    nbytes += len(r.value) if r.value is not None else 0
                    if r.key is not None:
                        nbytes += len(r.key)
                bar.update(got)
        finally:
            end = last
            c.close(autocommit=False)
    elif driver == "confluent":
        from confluent_kafka import OFFSET_BEGINNING
        from confluent_kafka import Consumer as CConsumer
        from confluent_kafka import TopicPartition as CTP

        c = CConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group or f"perf-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": fetch_max_wait_ms,
                "enable.partition.eof": False,
                # librdkafka pauses a partition's fetching for fetch.queue.backoff.ms (1 s)
                # whenever its local queue passes queued.min.messages: that, not the broker,
                # capped this driver near 200k records/s (2.2M without it, same broker)
                "fetch.queue.backoff.ms": 0,
            }
        )
        md = c.list_topics(topic, timeout=15)
        parts = sorted(md.topics[topic].partitions) if topic in md.topics else [0]
        if group:
            c.subscribe([topic])
        else:
            c.assign([CTP(topic, p, OFFSET_BEGINNING) for p in parts])
        start = time.perf_counter()
        last = start
        try:
            while got < num_records:
                msgs = c.consume(num_messages=min(10000, num_records - got), timeout=1.0)
                now = time.perf_counter()
                if not msgs:
                    if now - last > timeout_s:
                        break
                    continue
                if first is None:
                    first = now - start
                last = now
                for m in msgs:
                    if m.error() is not None:
                        continue
                    got += 1
                    v = m.value()
                    nbytes += len(v) if v is not None else 0
                    k = m.key()
                    if k is not None:
                        nbytes += len(k)
                bar.update(got)
        finally:
            end = last
            c.close()
    else:
        raise click.BadParameter(f"unknown driver {driver}")
    bar.close()
    elapsed = max(end - start, 1e-9)
    return {
        "workload": "consume",
        "driver": driver,
        "topic": topic,
        "records": got,
        "wanted": num_records,
        "seconds": elapsed,
        "first_record_s": first,
        "records_per_s": got / elapsed,
        "mb_per_s": nbytes / elapsed / 1e6,
        "client_cpu_s": cpu_seconds_self() - cpu0,
    }


# ----------------------------------------------------------------------------- e2e
def run_e2e(
    bootstrap: str,
    topic: str,
    rate: float,
    duration_s: float,
    record_size: int = 100,
    driver: str = "odradek",
    acks: str = "1",
    linger_ms: int = 0,
    fetch_max_wait_ms: int = 500,
    warmup_s: float = 1.0,
    partition: int = 0,
) -> dict:
    """Produce at `rate` records/s for `duration_s` while a consumer in this process reads them;
    latency = consumed - sent (same monotonic clock). Records sent during `warmup_s` are not counted."""
    n = int(rate * duration_s)
    pad = make_payload(max(0, record_size - _STAMP.size))
    lat: list[int] = []
    received = 0
    ready = threading.Event()
    stop = threading.Event()
    err: list[BaseException] = []
    perf = time.perf_counter_ns
    state = {"warm_until": None}

    def record(value: bytes, now: int) -> None:
        nonlocal received
        received += 1
        t0 = _STAMP.unpack_from(value)[0]
        if state["warm_until"] is not None and t0 >= state["warm_until"]:
            lat.append(now - t0)

    if driver == "odradek":
        from odradek.client import Consumer, Producer, TopicPartition

        def consume():
            try:
                c = Consumer(
                    bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=fetch_max_wait_ms
                )
                tp = TopicPartition(topic, partition)
                c.assign([tp])
                c.seek_to_end(tp)
                c.position(tp)
                ready.set()
                while not stop.is_set():
                    for r in c.poll(0.2):
                        record(r.value, perf())
                c.close(autocommit=False)
            except BaseException as e:  # noqa: BLE001
                err.append(e)
                ready.set()

        p = Producer(bootstrap_servers=bootstrap, acks=_acks_value(acks), linger_ms=linger_ms, enable_idempotence=False)
        p.partitions_for(topic)

        def send(v):
            p.send(topic, v, partition=partition)

        def finish():
            p.flush()
            p.close(10)
    elif driver == "confluent":
        from confluent_kafka import OFFSET_END
        from confluent_kafka import Consumer as CConsumer
        from confluent_kafka import Producer as CProducer
        from confluent_kafka import TopicPartition as CTP

        def consume():
            try:
                c = CConsumer(
                    {
                        "bootstrap.servers": bootstrap,
                        "group.id": f"e2e-{uuid.uuid4().hex[:8]}",
                        "enable.auto.commit": False,
                        "fetch.wait.max.ms": fetch_max_wait_ms,
                        "fetch.error.backoff.ms": 0,
                    }
                )
                c.assign([CTP(topic, partition, OFFSET_END)])
                # wait until the consumer has resolved its position (it reports nothing until it did)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    c.consume(1, 0.05)
                    pos = c.position([CTP(topic, partition)])
                    if pos and pos[0].offset >= 0:
                        break
                ready.set()
                while not stop.is_set():
                    m = c.poll(0.1)  # consume(n, t) would wait for n records or t: poll returns each at once
                    if m is not None and m.error() is None:
                        record(m.value(), perf())
                c.close()
            except BaseException as e:  # noqa: BLE001
                err.append(e)
                ready.set()

        p = CProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all" if acks in ("all", "-1") else acks,
                "linger.ms": linger_ms,
                "enable.idempotence": False,
            }
        )
        p.list_topics(topic, timeout=15)
        cp, cpoll = p.produce, p.poll

        def send(v):
            cp(topic, v, partition=partition)
            cpoll(0)

        def finish():
            p.flush(30)
    else:
        raise click.BadParameter(f"unknown driver {driver}")

    th = threading.Thread(target=consume, name="e2e-consumer", daemon=True)
    th.start()
    ready.wait(30)
    if err:
        raise err[0]
    time.sleep(0.2)
    cpu0 = cpu_seconds_self()
    pacer = Pacer(rate)
    state["warm_until"] = perf() + int(warmup_s * 1e9)
    start = time.perf_counter()
    for i in range(n):
        pacer.wait(i)
        send(_STAMP.pack(perf()) + pad)
    sent_s = time.perf_counter() - start
    finish()
    deadline = time.monotonic() + 15
    while received < n and time.monotonic() < deadline and th.is_alive():
        time.sleep(0.05)
    stop.set()
    th.join(10)
    return {
        "workload": "e2e",
        "driver": driver,
        "topic": topic,
        "rate": rate,
        "duration_s": duration_s,
        "sent": n,
        "received": received,
        "send_seconds": sent_s,
        "achieved_rate": n / sent_s,
        "acks": acks,
        "linger_ms": linger_ms,
        "warmup_s": warmup_s,
        "latency_ms": percentiles(lat),
        "client_cpu_s": cpu_seconds_self() - cpu0,
    }


# ----------------------------------------------------------------------------- output
def _print_result(res: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(res))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(
        "metric",
        "value",
        title=f"perf {res['workload']} ({res['driver']} driver, topic {res['topic']})",
        title_justify="left",
    )
    for k, v in res.items():
        if k in ("workload", "driver", "topic", "latency_ms"):
            continue
        t.add_row(k, f"{v:,.2f}" if isinstance(v, float) else str(v))
    lat = res.get("latency_ms")
    if lat and lat["count"]:
        for k in ("avg", "p50", "p95", "p99", "p999", "max"):
            t.add_row(f"latency {k} (ms)", f"{lat[k]:.2f}")
        t.add_row("latency samples", str(lat["count"]))
    Console().print(t)


def _fail(e: BaseException):
    raise click.ClickException(f"{type(e).__name__}: {e}") from None


driver_option = click.option(
    "--driver",
    type=click.Choice(DRIVERS),
    default="odradek",
    show_default=True,
    help="odradek: odradek's Python client; confluent: librdkafka via confluent-kafka.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


@click.group()
def perf() -> None:
    """Load generators: producer and consumer throughput, end-to-end latency."""


@perf.command("produce")
@bootstrap_option
@click.option("--topic", "-t", required=True)
@click.option("--num-records", "-n", type=int, default=1_000_000, show_default=True)
@click.option("--record-size", "-s", type=int, default=100, show_default=True, help="Value bytes (no key).")
@click.option("--throughput", type=float, default=-1, show_default=True, help="Max records/s (-1: unlimited).")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True)
@click.option("--compression", "-z", type=click.Choice(COMPRESSIONS), default="none", show_default=True)
@click.option("--linger-ms", type=int, default=5, show_default=True)
@click.option("--batch-size", type=int, default=None, help="Default: 16384 (odradek), librdkafka's (confluent).")
@click.option("--partitions", type=int, default=None, help="Create the topic with this many partitions first.")
@click.option("--partition", type=int, default=None, help="Send every record to this partition.")
@click.option("--idempotence/--no-idempotence", default=False, show_default=True)
@click.option("--sample-every", type=int, default=16, show_default=True, help="Measure latency of every N-th record.")
@click.option(
    "--native-batch",
    type=int,
    default=0,
    show_default=True,
    help="confluent driver: enqueue N records per produce_batch() call (0: one produce() per record).",
)
@click.option(
    "-X",
    "client_config",
    multiple=True,
    metavar="KEY=VALUE",
    help="confluent driver: a librdkafka setting (repeatable), e.g. -X sticky.partitioning.linger.ms=0.",
)
@driver_option
@json_option
def perf_produce(
    bootstrap,
    topic,
    num_records,
    record_size,
    throughput,
    acks,
    compression,
    linger_ms,
    batch_size,
    partitions,
    partition,
    idempotence,
    sample_every,
    native_batch,
    client_config,
    driver,
    as_json,
):
    """Producer throughput and send->ack latency."""
    bad = [c for c in client_config if "=" not in c]
    if bad:
        raise click.BadParameter(f"-X wants KEY=VALUE, got {bad[0]!r}")
    ensure_topic(bootstrap, topic, partitions)
    try:
        res = run_produce(
            bootstrap,
            topic,
            num_records,
            record_size,
            throughput,
            acks,
            compression,
            linger_ms,
            batch_size,
            driver,
            max(1, sample_every),
            partition,
            idempotence,
            progress=not as_json,
            native_batch=native_batch,
            client_config=dict(c.split("=", 1) for c in client_config),
        )
    except Exception as e:  # noqa: BLE001
        _fail(e)
    _print_result(res, as_json)
    if res["errors"]:
        raise click.ClickException(f"{res['errors']} delivery error(s), first: {res['first_error']}")


@perf.command("consume")
@bootstrap_option
@click.option("--topic", "-t", required=True)
@click.option("--num-records", "-n", type=int, default=1_000_000, show_default=True, help="Stop after this many.")
@click.option("--group", "-g", default=None, help="Subscribe with this group (default: assign every partition).")
@click.option("--fetch-max-wait-ms", type=int, default=100, show_default=True)
@click.option(
    "--timeout", "timeout_s", type=float, default=30, show_default=True, help="Stop after this long without a record."
)
@driver_option
@json_option
def perf_consume(bootstrap, topic, num_records, group, fetch_max_wait_ms, timeout_s, driver, as_json):
    """Consumer throughput from the earliest offsets."""
    try:
        res = run_consume(
            bootstrap, topic, num_records, driver, group, fetch_max_wait_ms, timeout_s, progress=not as_json
        )
    except Exception as e:  # noqa: BLE001
        _fail(e)
    _print_result(res, as_json)
    if res["records"] < num_records:
        click.echo(f"warning: only {res['records']} of {num_records} records consumed", err=True)


@perf.command("e2e")
@bootstrap_option
@click.option("--topic", "-t", required=True)
@click.option("--rate", type=float, default=5000, show_default=True, help="Records/s.")
@click.option("--duration", "duration_s", type=float, default=20, show_default=True, help="Seconds of sending.")
@click.option("--record-size", "-s", type=int, default=100, show_default=True)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True)
@click.option("--linger-ms", type=int, default=0, show_default=True)
@click.option("--fetch-max-wait-ms", type=int, default=500, show_default=True)
@click.option(
    "--warmup", "warmup_s", type=float, default=1.0, show_default=True, help="Seconds not counted at the start."
)
@click.option(
    "--partitions", type=int, default=1, show_default=True, help="Create the topic with this many partitions first."
)
@driver_option
@json_option
def perf_e2e(
    bootstrap,
    topic,
    rate,
    duration_s,
    record_size,
    acks,
    linger_ms,
    fetch_max_wait_ms,
    warmup_s,
    partitions,
    driver,
    as_json,
):
    """End-to-end latency (send -> consumed) at a fixed rate."""
    ensure_topic(bootstrap, topic, partitions)
    try:
        res = run_e2e(
            bootstrap, topic, rate, duration_s, record_size, driver, acks, linger_ms, fetch_max_wait_ms, warmup_s
        )
    except Exception as e:  # noqa: BLE001
        _fail(e)
    _print_result(res, as_json)
    if res["received"] < res["sent"]:
        click.echo(f"warning: {res['sent'] - res['received']} record(s) not received", err=True)


if os.environ.get("ODRADEK_PERF_DEBUG"):  # pragma: no cover
    import faulthandler

    faulthandler.enable()
