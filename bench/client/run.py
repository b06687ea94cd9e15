"""Client throughput: odradek.client vs kafka-python, aiokafka and confluent-kafka.

Every client produces N records of 100 B and of 1 KiB to its own fresh single-partition
topic on the same broker, then consumes them back from the beginning; records/s is
N / wall time (producer: first send to flush done; consumer: first poll to N-th record),
with the client process's CPU time per record over the same span (what tells clients
apart when the broker is the bottleneck).
``odradek`` is the blocking client (poll crosses to its I/O thread), ``odradek-asyncio`` the
asyncio one (``odradek.client.aio``), the like-for-like peer of aiokafka.
The broker defaults to Tansu (Rust, memory storage) so the broker is not the bottleneck;
``--broker odradek|mock`` or ``--bootstrap host:port`` picks another.

    .venv/bin/python bench/client/run.py [--n 100000] [--repeats 3] [--broker tansu] \
        [--clients odradek,kafka-python,...]

Each client and size runs --repeats times, the clients taking turns in a rotating order;
the table gives medians and the like-for-like pairs' ratio in every repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

ACKS = 1
LINGER_MS = 5
BATCH = 16384


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def elapsed(start: tuple[float, float]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, every thread: librdkafka's too) since `start`."""
    return time.perf_counter() - start[0], time.process_time() - start[1]


def make_topic(bootstrap: str) -> str:
    from odradek.client import Admin

    name = f"bench-{uuid.uuid4().hex[:10]}"
    try:
        with Admin(bootstrap_servers=bootstrap) as a:
            a.create_topic(name, 1, 1)
    except Exception:
        pass  # brokers without CreateTopics auto-create (with their default partition count)
    return name


def drop_topic(bootstrap: str, name: str) -> None:
    """Delete a run's topic, so runs do not slow each other down (Tansu's memory engine
    keeps everything; a broker's page cache fills)."""
    from odradek.client import Admin

    try:
        with Admin(bootstrap_servers=bootstrap) as a:
            a.delete_topics([name])
    except Exception:
        pass  # brokers without DeleteTopics (librdkafka's mock)


# --------------------------------------------------------------------------- odradek
def odradek_produce(bs, topic, payload, n):
    from odradek.client import Producer

    p = Producer(bootstrap_servers=bs, acks=ACKS, enable_idempotence=False, linger_ms=LINGER_MS, batch_size=BATCH)
    p.send(topic, payload, partition=0).result(30)  # connect + metadata outside the timing
    t = clock()
    send = p.send
    for _ in range(n):
        send(topic, payload, partition=0)
    p.flush()
    dt = elapsed(t)
    p.close()
    return dt


def odradek_consume(bs, topic, n):
    from odradek.client import Consumer, TopicPartition

    c = Consumer(bootstrap_servers=bs, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    c.assign([TopicPartition(topic, 0)])
    got = 0
    t = clock()
    while got < n + 1:
        got += len(c.poll(1.0))
    dt = elapsed(t)
    c.close()
    return dt


# --------------------------------------------------------------------------- kafka-python
def kafkapython_produce(bs, topic, payload, n):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bs, acks=ACKS, linger_ms=LINGER_MS, batch_size=BATCH)
    p.send(topic, payload, partition=0).get(30)
    t = clock()
    for _ in range(n):
        p.send(topic, payload, partition=0)
    p.flush()
    dt = elapsed(t)
    p.close()
    return dt


def kafkapython_consume(bs, topic, n):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100
    )
    c.assign([TopicPartition(topic, 0)])
    got = 0
    t = clock()
    while got < n + 1:
        for recs in c.poll(1000, max_records=500).values():
            got += len(recs)
    dt = elapsed(t)
    c.close()
    return dt


# --------------------------------------------------------------------------- aiokafka
def aiokafka_produce(bs, topic, payload, n):
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bs, acks=ACKS, linger_ms=LINGER_MS, max_batch_size=BATCH)
        await p.start()
        await p.send_and_wait(topic, payload, partition=0)
        t = clock()
        for _ in range(n):
            await p.send(topic, payload, partition=0)
        await p.flush()
        dt = elapsed(t)
        await p.stop()
        return dt

    return asyncio.run(run())


def aiokafka_consume(bs, topic, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(
            bootstrap_servers=bs, auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100
        )
        await c.start()
        c.assign([TopicPartition(topic, 0)])
        got = 0
        t = clock()
        while got < n + 1:
            for recs in (await c.getmany(timeout_ms=1000, max_records=500)).values():
                got += len(recs)
        dt = elapsed(t)
        await c.stop()
        return dt

    return asyncio.run(run())


# --------------------------------------------------------------------------- confluent-kafka
def confluent_produce(bs, topic, payload, n):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "acks": ACKS, "linger.ms": LINGER_MS, "enable.idempotence": False})
    p.produce(topic, payload, partition=0)
    p.flush(30)
    t = clock()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=0)
                break
            except BufferError:
                p.poll(0.001)
    p.flush(60)
    return elapsed(t)


def confluent_consume(bs, topic, n):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "bench-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    t = clock()
    while got < n + 1:
        got += sum(1 for m in c.consume(500, 1.0) if m.error() is None)
    dt = elapsed(t)
    c.close()
    return dt


def odradek_aio_produce(bs, topic, payload, n):
    from odradek.client.aio import AIOProducer

    async def run():
        p = AIOProducer(
            bootstrap_servers=bs, acks=ACKS, enable_idempotence=False, linger_ms=LINGER_MS, batch_size=BATCH
        )
        await p.start()
        await p.send_and_wait(topic, payload, partition=0)
        t = clock()
        for _ in range(n):
            await p.send(topic, payload, partition=0)
        await p.flush()
        dt = elapsed(t)
        await p.close()
        return dt

    return asyncio.run(run())


def odradek_aio_consume(bs, topic, n):
    from odradek.client.aio import AIOConsumer, TopicPartition

    async def run():
        c = AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await c.start()
        c.assign([TopicPartition(topic, 0)])
        got = 0
        t = clock()
        while got < n + 1:
            got += len(await c.poll(1.0))
        dt = elapsed(t)
        await c.close()
        return dt

    return asyncio.run(run())


CLIENTS = {
    "odradek": (odradek_produce, odradek_consume),
    "odradek-asyncio": (odradek_aio_produce, odradek_aio_consume),
    "kafka-python": (kafkapython_produce, kafkapython_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "confluent-kafka": (confluent_produce, confluent_consume),
}


def start_broker(kind: str):
    from support.broker import BrokerProcess, MockClusterBroker, TansuBroker

    d = tempfile.mkdtemp(prefix="bench-client-")
    if kind == "tansu":
        return TansuBroker(d).start()
    if kind == "mock":
        return MockClusterBroker(d).start()
    return BrokerProcess(d, {}).start(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000, help="records per run (1 KiB runs use n/2)")
    ap.add_argument("--broker", default="tansu", choices=["tansu", "mock", "odradek"])
    ap.add_argument("--bootstrap")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per client and size, the clients taking turns in a rotating order; medians reported",
    )
    ap.add_argument("--json", help="write results here too")
    args = ap.parse_args()
    broker = None
    bs = args.bootstrap
    if bs is None:
        broker = start_broker(args.broker)
        bs = broker.bootstrap
    samples: dict = {}  # (client, size) -> {repetition: (produce/s, consume/s, produce CPU-us/rec, consume CPU-us/rec)}
    names = args.clients.split(",")
    try:
        for rep in range(args.repeats):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for size in (100, 1024):
                n = args.n if size == 100 else args.n // 2
                payload = os.urandom(size)
                for name in order:
                    prod, cons = CLIENTS[name]
                    topic = make_topic(bs)
                    try:
                        pdt = prod(bs, topic, payload, n)
                        cdt = cons(bs, topic, n)
                    except Exception as e:  # report and go on
                        print(f"{name} {size}B failed: {e!r}", file=sys.stderr)
                        continue
                    finally:
                        drop_topic(bs, topic)
                    # records/s, then client CPU µs per record
                    sample = (n / pdt[0], n / cdt[0], 1e6 * pdt[1] / n, 1e6 * cdt[1] / n)
                    samples.setdefault((name, size), {})[rep] = sample
                    print(
                        f"[{rep}] {name:16s} {size:5d} B  produce {sample[0]:10,.0f} rec/s "
                        f"({sample[2]:.2f} CPU-us/rec)  consume {sample[1]:10,.0f} rec/s "
                        f"({sample[3]:.2f} CPU-us/rec)",
                        flush=True,
                    )
    finally:
        if broker is not None:
            broker.stop()
    from odradek.client import _records

    print(
        f"\nbroker: {args.bootstrap or args.broker}; acks={ACKS}, linger.ms={LINGER_MS}, batch.size={BATCH}; "
        f"odradek record codec: {_records.IMPLEMENTATION}"
    )
    results = {k: tuple(statistics.median(x[i] for x in v.values()) for i in range(4)) for k, v in samples.items()}
    print(f"medians of {args.repeats} runs per client and size")
    peers = (("kafka-python", "kpy"), ("aiokafka", "aio"), ("confluent-kafka", "ck"))
    print(
        f"{'client':16s} {'size':>5s} {'produce/s':>11s} {'consume/s':>11s}"
        + "".join(f" {'P vs ' + s:>9s}" for _, s in peers)
        + "".join(f" {'C vs ' + s:>9s}" for _, s in peers)
    )
    f = lambda a, b: f"{a / b:8.2f}x" if b else "      n/a"  # noqa: E731
    for (name, size), (p, c, _pc, _cc) in results.items():
        ref = [results.get((peer, size), (0, 0, 0, 0)) for peer, _ in peers]
        print(
            f"{name:16s} {size:5d} {p:11,.0f} {c:11,.0f}"
            + "".join(f" {f(p, r[0])}" for r in ref)
            + "".join(f" {f(c, r[1])}" for r in ref)
        )
    # When the broker is what limits records/s, CPU per record still tells the clients apart.
    print("client CPU per record (us, medians; all threads of the process):")
    print(f"{'client':16s} {'size':>5s} {'produce':>9s} {'consume':>9s}")
    for (name, size), (_p, _c, pc, cc) in results.items():
        print(f"{name:16s} {size:5d} {pc:9.2f} {cc:9.2f}")
    # each repetition's ratio for the like-for-like pairs (the two ran minutes apart at most)
    for mine, peer in (("odradek-asyncio", "aiokafka"), ("odradek", "kafka-python"), ("odradek", "aiokafka")):
        for size in (100, 1024):
            a, b = samples.get((mine, size), {}), samples.get((peer, size), {})
            reps = sorted(set(a) & set(b))
            if reps:
                print(
                    f"{mine} / {peer} {size} B, each run: produce "
                    + " ".join(f"{a[r][0] / b[r][0]:.2f}" for r in reps)
                    + "; consume "
                    + " ".join(f"{a[r][1] / b[r][1]:.2f}" for r in reps)
                    + "; CPU per record, peer / mine: produce "
                    + " ".join(f"{b[r][2] / a[r][2]:.2f}" for r in reps)
                    + ", consume "
                    + " ".join(f"{b[r][3] / a[r][3]:.2f}" for r in reps)
                )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "medians": {f"{k[0]}/{k[1]}": v for k, v in results.items()},
                    "runs": {f"{k[0]}/{k[1]}": v for k, v in samples.items()},
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
