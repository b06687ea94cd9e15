"""Kafka's own load tools as drivers, from the installed Kafka 3.9 jars, for every broker alike
(the same Java client against odradek, Kafka 3.9 and Kafka 4): the commands and parsers of
their output.

* ``ProducerPerformance``: ``--num-records N --record-size 100 --throughput -1`` with
  ``acks``, ``linger.ms`` and ``compression.type`` as the librdkafka rows (its other settings
  are the Java producer's defaults: ``batch.size`` 16384, the built-in partitioner, which
  sticks to one partition per batch); reports records/s and send->ack latency.
* ``ConsumerPerformance``: ``--messages N`` from the earliest offset, subscribed with a fresh
  group; records/s is its ``fetch.nMsg.sec`` (the time spent joining the group left out).
* ``EndToEndLatency``: one record at a time, sent, acknowledged and consumed before the next
  (its consumer polls with ``fetch.max.wait.ms=0``); latency percentiles in whole ms.
"""

from __future__ import annotations

import re

from support.apache_kafka import tool_command

LINE = "3.9"  # the jars the tools come from, for every broker
HEAP = "512m"


def producer_performance(bootstrap: str, topic: str, n: int, acks: str, compression: str, linger_ms: int) -> list[str]:
    return tool_command(
        LINE,
        "ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        f"acks={acks}",
        f"linger.ms={linger_ms}",
        f"compression.type={compression}",
        heap=HEAP,
    )


def consumer_performance(bootstrap: str, topic: str, n: int, group: str) -> list[str]:
    return tool_command(
        LINE,
        "ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(n),
        "--group",
        group,
        "--timeout",
        "15000",
        heap=HEAP,
    )


def end_to_end_latency(bootstrap: str, topic: str, n: int) -> list[str]:
    return tool_command(LINE, "EndToEndLatency", bootstrap, topic, str(n), "1", "100", heap=HEAP)


_NUM = r"([0-9.]+)"
_PRODUCER = re.compile(
    rf"{_NUM} records sent, {_NUM} records/sec \({_NUM} MB/sec\), {_NUM} ms avg latency, {_NUM} ms max latency, "
    rf"{_NUM} ms 50th, {_NUM} ms 95th, {_NUM} ms 99th, {_NUM} ms 99.9th"
)


def parse_producer(stdout: str) -> dict:
    """The summary line ProducerPerformance prints last."""
    m = None
    for line in stdout.splitlines():
        m = _PRODUCER.search(line) or m
    if m is None:
        raise ValueError("no ProducerPerformance summary line")
    sent, rate, mb, avg, mx, p50, p95, p99, p999 = (float(x) for x in m.groups())
    return {
        "records": int(sent),
        "records_per_s": rate,
        "mb_per_s": mb,
        "latency_ms": {"count": int(sent), "avg": avg, "p50": p50, "p95": p95, "p99": p99, "p999": p999, "max": mx},
    }


def parse_consumer(stdout: str) -> dict:
    """ConsumerPerformance's header line and the values line after it."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith("start.time") and i + 1 < len(lines):
            names = [x.strip() for x in ln.split(",")]
            values = [x.strip() for x in lines[i + 1].split(",")]
            row = dict(zip(names, values))
            n = int(row["data.consumed.in.nMsg"])
            return {
                "records": n,
                "records_per_s": float(row["fetch.nMsg.sec"]),
                "mb_per_s": float(row["fetch.MB.sec"]),
                "rebalance_ms": float(row["rebalance.time.ms"]),
                "fetch_ms": float(row["fetch.time.ms"]),
            }
    raise ValueError("no ConsumerPerformance result line")


_E2E_AVG = re.compile(r"Avg latency: ([0-9.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")


def parse_end_to_end(stdout: str, n: int) -> dict:
    avg = _E2E_AVG.search(stdout)
    pct = _E2E_PCT.search(stdout)
    if avg is None or pct is None:
        raise ValueError("no EndToEndLatency result")
    p50, p99, p999 = (float(x) for x in pct.groups())
    return {
        "sent": n,
        "records": n,
        "latency_ms": {"count": n, "avg": float(avg.group(1)), "p50": p50, "p99": p99, "p999": p999},
    }
