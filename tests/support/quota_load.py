"""A greedy confluent-kafka producer for the quota tests: produces 1000-byte values as fast as
the broker lets it until a deadline, counting the bytes acknowledged over time and the largest
throttle time librdkafka reported (its statistics, `brokers.*.throttle.max`)."""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Consumer, Producer

MB = 1024 * 1024
VALUE = b"x" * 1000


class Produced:
    def __init__(self) -> None:
        self.acked: list[tuple[float, int]] = []
        self.throttle_max = 0
        self.lock = threading.Lock()

    def delivered(self, err, msg) -> None:
        if err is None:
            with self.lock:
                self.acked.append((time.monotonic(), len(msg.value())))

    def stats(self, text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            self.throttle_max = max(self.throttle_max, broker.get("throttle", {}).get("max", 0))

    def rate(self, start: float, end: float) -> float:
        """Bytes/s acknowledged between the two monotonic times."""
        with self.lock:
            return sum(n for t, n in self.acked if start <= t < end) / (end - start)


def produce_until(bootstrap: str, client_id: str, topic: str, until: float, into: Produced) -> None:
    p = Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 65536,
        "statistics.interval.ms": 500, "stats_cb": into.stats, "acks": 1,
        "queue.buffering.max.kbytes": 4096,
    })  # fmt: skip
    while time.monotonic() < until:
        try:
            p.produce(topic, VALUE, on_delivery=into.delivered)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(30)


def fill(bootstrap: str, topic: str, count: int) -> None:
    """`count` 1000-byte values in `topic` (unthrottled: no client id with a quota), in batches of
    16 KB at most: a Fetch returns at least one whole batch whatever its byte limits (Kafka's rule
    too), so librdkafka's default 1 MB batches would make every consumer's fetch 1 MB."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 16384})
    for _ in range(count):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def consume_for(
    bootstrap: str, client_id: str, topic: str, seconds: float, warmup: float, fetch_bytes: int | None = None
) -> tuple[float, int]:
    """A greedy confluent-kafka consumer of `topic` from its start for `seconds`: the bytes/s it
    received after `warmup` (past the first burst the quota samples allow) and the largest
    throttle time librdkafka reported. `fetch_bytes`: fetch.max.bytes and max.partition.fetch.bytes
    (librdkafka's defaults without it)."""
    throttle = Produced()  # its stats callback reads brokers.*.throttle.max
    sizes = {} if fetch_bytes is None else {
        "fetch.max.bytes": fetch_bytes, "max.partition.fetch.bytes": fetch_bytes, "message.max.bytes": fetch_bytes,
    }  # fmt: skip
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{client_id}", "client.id": client_id,
        "auto.offset.reset": "earliest", "statistics.interval.ms": 500, "stats_cb": throttle.stats, **sizes,
    })  # fmt: skip
    c.subscribe([topic])
    start = time.monotonic()
    got: list[tuple[float, int]] = []
    while time.monotonic() < start + seconds:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append((time.monotonic(), len(m.value())))
    c.close()
    warm = start + warmup
    return sum(n for t, n in got if t >= warm) / (start + seconds - warm), throttle.throttle_max
