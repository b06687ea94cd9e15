"""A greedy confluent-kafka producer for the quota tests: produces 1000-byte values as fast as
the broker lets it until a deadline, counting the bytes acknowledged over time and the largest
throttle time librdkafka reported (its statistics, `brokers.*.throttle.max`)."""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Producer

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
