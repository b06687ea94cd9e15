"""Clean answers while a whole cluster stops (issue 25).

Every broker of a cluster stopped at once (SIGTERM to all three in the same instant, as
`odradek cluster up` does on ^C or an orchestrator does to a whole deployment), with
ZooKeeper kept or stopped with them. Each broker asks the controller for a controlled
shutdown while the controller itself is stopping and leaders send AlterPartition as their
followers go: every request gets a Kafka error code (NOT_CONTROLLER, REQUEST_TIMED_OUT, ...)
and the brokers retry or give up as Kafka's do. No handler fails, no connection is ended
with an internal error, every broker exits cleanly.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.odradek_cluster import OdradekCluster

pytestmark = pytest.mark.cluster

FAILED = ("handler failed", "internal error handling", "Traceback")


def start(tmp_path) -> OdradekCluster:
    c = OdradekCluster(
        tmp_path,
        brokers=3,
        overrides={"replica.lag.time.max.ms": 1000, "controlled.shutdown.retry.backoff.ms": 200},
    )
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    return c


def load(c: OdradekCluster, stop: threading.Event) -> threading.Thread:
    """Topics led by every broker, and acks=all writes going on while the brokers stop."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topics = [NewTopic(f"stopping-{i}", 6, 3, config={"min.insync.replicas": "2"}) for i in range(3)]
    for f in admin.create_topics(topics, operation_timeout=20).values():
        f.result()
    c.wait(lambda s: all(len(p.isr) == 3 for t in topics for p in s.topics[t.topic].partitions), 20, "full ISRs")

    def write() -> None:
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 5000})
        i = 0
        while not stop.is_set():
            try:
                p.produce(f"stopping-{i % 3}", f"v{i}".encode())
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            i += 1
            time.sleep(0.001)
        p.flush(1)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    time.sleep(1.5)
    return t


def stop_all_at_once(c: OdradekCluster, *, with_zookeeper: bool) -> dict[int, int]:
    for b in c.brokers.values():
        b.proc.send_signal(signal.SIGTERM)
    if with_zookeeper:
        c.zookeeper.stop()
    codes = {}
    for i, b in c.brokers.items():
        try:
            b.proc.wait(60)
        except Exception:  # noqa: BLE001 - reported below with its log
            b.kill()
        codes[i] = b.stop()
    return codes


def assert_clean(c: OdradekCluster, codes: dict[int, int]) -> None:
    for i, b in c.brokers.items():
        text = b.log_path.read_text(errors="replace")
        bad = [line for line in text.splitlines() if any(f in line for f in FAILED)]
        assert not bad, f"broker {i}:\n" + "\n".join(bad[:20]) + "\n" + b.log_tail(80)
        assert "shut down cleanly" in text, f"broker {i}:\n{b.log_tail(80)}"
    assert codes == {1: 0, 2: 0, 3: 0}, codes


@pytest.mark.parametrize("with_zookeeper", [False, True], ids=["zookeeper-up", "zookeeper-stopped-too"])
def test_every_broker_stopped_at_once_gets_error_codes_not_internal_errors(tmp_path, with_zookeeper):
    c = start(tmp_path)
    stop = threading.Event()
    try:
        writer = load(c, stop)
        codes = stop_all_at_once(c, with_zookeeper=with_zookeeper)
        stop.set()
        writer.join(10)
        assert_clean(c, codes)
    finally:
        stop.set()
        c.stop()
