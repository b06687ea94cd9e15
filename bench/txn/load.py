"""One load of bench/txn/run.py, in its own process (so the runner measures the broker alone);
prints one JSON line: records, seconds, records_per_s, and what the load was.

    load.py produce BOOTSTRAP TOPIC --seconds 5 [--txn-rate R] [--abort-every K] [--partitions 3] [--size 100]
        librdkafka (confluent-kafka) producer, acks=all, idempotent, as fast as it can for --seconds;
        with --txn-rate R transactional, committing every 1/R s (one transaction spans every
        partition it wrote in that time); --abort-every K aborts every K-th transaction instead.
    load.py consume BOOTSTRAP TOPIC --isolation read_committed|read_uncommitted [--partitions 3]
        librdkafka consumer, every partition from the start until nothing new for 1 s; the rate
        counts from the first record to the last.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid


def produce(a) -> dict:
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": a.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "queue.buffering.max.messages": 200000,
    }
    if a.txn_rate:
        conf |= {"transactional.id": f"bench-txn-{uuid.uuid4().hex[:8]}", "transaction.timeout.ms": 60000}
    p = Producer(conf)
    value = b"x" * a.size
    every = 1.0 / a.txn_rate if a.txn_rate else None
    if every:
        p.init_transactions(30)
        p.begin_transaction()
    n = committed = aborted = 0
    t0 = begun = time.perf_counter()
    end = t0 + a.seconds
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if every and now - begun >= every:
            if a.abort_every and (committed + aborted + 1) % a.abort_every == 0:
                p.abort_transaction(30)
                aborted += 1
            else:
                p.commit_transaction(30)  # flushes what it holds first
                committed += 1
            p.begin_transaction()
            begun = time.perf_counter()
        try:
            p.produce(a.topic, value, partition=n % a.partitions)
            n += 1
        except BufferError:
            p.poll(0.01)
        if n % 1000 == 0:
            p.poll(0)
    if every:
        p.commit_transaction(30)
        committed += 1
    else:
        assert p.flush(60) == 0
    secs = time.perf_counter() - t0
    return {
        "records": n,
        "seconds": secs,
        "records_per_s": n / secs,
        "transactions": committed,
        "aborted": aborted,
        "txn_rate_achieved": committed / secs if every else None,
    }


def consume(a) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": a.bootstrap,
            "group.id": f"bench-txn-{uuid.uuid4().hex[:8]}",
            "isolation.level": a.isolation,
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
        }
    )
    c.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in range(a.partitions)])
    n = 0
    first = last = None
    idle_since = time.perf_counter()
    while time.perf_counter() - idle_since < 1.0:
        msgs = c.consume(10000, 0.2)
        got = sum(1 for m in msgs if m.error() is None)
        if got:
            now = time.perf_counter()
            first = first or now
            last = now
            idle_since = now
            n += got
    c.close()
    secs = (last - first) if first and last and last > first else float("nan")
    return {"records": n, "seconds": secs, "records_per_s": n / secs if secs == secs else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["produce", "consume"])
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--txn-rate", type=float, default=0.0)
    ap.add_argument("--abort-every", type=int, default=0)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--isolation", default="read_committed")
    a = ap.parse_args()
    print(json.dumps(produce(a) if a.mode == "produce" else consume(a)), flush=True)


if __name__ == "__main__":
    main()
