"""The transaction coordinator with real clients on an odradek broker process: the Java
producer (kafka-clients 3.9.1, tests/clients/java/TxnProducerCli.java) and confluent-kafka
commit / abort / commit across 3 partitions, a zombie is fenced by a second producer with
the same transactional.id, a transaction older than its timeout is aborted by the
coordinator (its producer fenced), and a broker restarted in the middle of a transaction
replays `__transaction_state` and lets the producer commit it.

A read_committed reader (confluent-kafka) sees committed records once their transaction's
marker is written, nothing at or after the first record of an open transaction (the last
stable offset stops reads), and never a record of an aborted transaction: those come before
later committed ones in their partition, so reading the expected count would return them.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.clients import JAVA_DIR, JavaClient

TOPIC = "txn"
FAST = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.state.log.num.partitions": "5",
}

java_missing = JavaClient.unavailable_reason() or (
    None if (JAVA_DIR / "classes" / "TxnProducerCli.class").is_file() else "TxnProducerCli not built"
)


class JavaTxnProducer:
    """A TxnProducerCli process: one command in, one JSON answer out."""

    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int = 60000) -> None:
        cmd = [
            "java",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{JAVA_DIR}/*:{JAVA_DIR}/classes",
            "TxnProducerCli",
            "--bootstrap",
            bootstrap,
            "--transactional-id",
            txn_id,
            "--transaction-timeout-ms",
            str(timeout_ms),
        ]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.p.stdout, selectors.EVENT_READ)
        self._buf = b""

    def __call__(self, line: str, timeout: float = 40) -> dict:
        assert self.p.stdin is not None
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                raise AssertionError(f"no answer to {line!r} in {timeout} s")
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"TxnProducerCli exited ({self.p.poll()}) on {line!r}")
            self._buf += chunk
        out, self._buf = self._buf.split(b"\n", 1)
        return json.loads(out)

    def ok(self, line: str) -> dict:
        r = self(line)
        assert r["ok"], r
        return r

    def close(self) -> None:
        if self.p.poll() is None:
            try:
                self("close", timeout=15)
            except AssertionError:
                pass
            self.p.kill()
        self.p.wait()


@pytest.fixture
def java_producers():
    made: list[JavaTxnProducer] = []

    def make(bootstrap: str, txn_id: str, timeout_ms: int = 60000) -> JavaTxnProducer:
        made.append(JavaTxnProducer(bootstrap, txn_id, timeout_ms))
        return made[-1]

    yield make
    for p in made:
        p.close()


def create_topic(bootstrap: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(20)


def read_committed(bootstrap: str, partitions=range(3), *, expect: int, timeout: float = 15) -> list[tuple[int, bytes]]:
    """(partition, value) of every record a read_committed consumer gets from the start, once
    it has `expect` of them (or the timeout passed: then what it has, for the assertion to show)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(got) < expect:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append((m.partition(), m.value()))
        if len(got) == expect:  # a little longer: nothing more may come
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    got.append((m.partition(), m.value()))
    finally:
        c.close()
    return got


def values(got: list[tuple[int, bytes]]) -> set[bytes]:
    return {v for _p, v in got}


@pytest.mark.skipif(java_missing is not None, reason=java_missing or "")
def test_java_commit_abort_commit_across_three_partitions(broker_factory, java_producers):
    b = broker_factory(FAST)
    create_topic(b.bootstrap)
    jp = java_producers(b.bootstrap, "java-tx")
    jp.ok("init")
    jp.ok("begin")
    for p in range(3):
        jp.ok(f"send {TOPIC} {p} c1-{p}")
    # the transaction is open: a read_committed reader sees nothing of it
    assert read_committed(b.bootstrap, expect=1, timeout=3) == []
    jp.ok("commit")
    assert values(read_committed(b.bootstrap, expect=3)) == {b"c1-0", b"c1-1", b"c1-2"}
    jp.ok("begin")
    for p in range(3):
        jp.ok(f"send {TOPIC} {p} a-{p}")
    jp.ok("abort")
    jp.ok("begin")
    for p in range(3):
        jp.ok(f"send {TOPIC} {p} c2-{p}")
    jp.ok("commit")
    got = values(read_committed(b.bootstrap, expect=6))
    assert got == {b"c1-0", b"c1-1", b"c1-2", b"c2-0", b"c2-1", b"c2-2"}  # no a-* record


def test_confluent_commit_abort_commit_and_an_open_transaction_holds_readers(broker_factory):
    b = broker_factory(FAST)
    create_topic(b.bootstrap)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "ck-tx", "linger.ms": 0})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=b"c1-%d" % i, partition=i)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=b"a-%d" % i, partition=i)
    p.flush(10)
    p.abort_transaction(20)
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=b"c2-%d" % i, partition=i)
    p.flush(10)
    # c2 is written but not committed: the readers stop at it
    before = values(read_committed(b.bootstrap, expect=9, timeout=3))
    assert {b"c1-0", b"c1-1", b"c1-2"} <= before and not {b"c2-0", b"c2-1", b"c2-2"} & before
    p.commit_transaction(20)
    got = values(read_committed(b.bootstrap, expect=6))
    assert got == {b"c1-0", b"c1-1", b"c1-2", b"c2-0", b"c2-1", b"c2-2"}  # no a-* record


@pytest.mark.skipif(java_missing is not None, reason=java_missing or "")
def test_zombie_is_fenced_by_a_new_producer_with_the_same_id(broker_factory, java_producers):
    b = broker_factory(FAST)
    create_topic(b.bootstrap)
    zombie = java_producers(b.bootstrap, "shared-id")
    zombie.ok("init")
    zombie.ok("begin")
    zombie.ok(f"send {TOPIC} 0 zombie-0")
    fresh = java_producers(b.bootstrap, "shared-id")
    fresh.ok("init")  # aborts the zombie's open transaction (it retries through CONCURRENT_TRANSACTIONS)
    r = zombie("commit")
    assert not r["ok"] and r["error"] in ("ProducerFencedException", "InvalidProducerEpochException"), r
    fresh.ok("begin")
    fresh.ok(f"send {TOPIC} 0 fresh-0")
    fresh.ok("commit")
    assert values(read_committed(b.bootstrap, [0], expect=1)) == {b"fresh-0"}  # zombie-0 was aborted


def test_coordinator_aborts_a_transaction_past_its_timeout(broker_factory):
    b = broker_factory(FAST)
    create_topic(b.bootstrap)
    slow = Producer(
        {"bootstrap.servers": b.bootstrap, "transactional.id": "slow", "transaction.timeout.ms": 4000, "linger.ms": 0}
    )
    slow.init_transactions(20)
    slow.begin_transaction()
    slow.produce(TOPIC, value=b"late", partition=1)
    slow.flush(10)
    # a read_committed reader is held at the open transaction ...
    other = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "other", "linger.ms": 0})
    other.init_transactions(20)
    other.begin_transaction()
    other.produce(TOPIC, value=b"after", partition=1)
    other.commit_transaction(20)
    assert b"after" not in values(read_committed(b.bootstrap, [1], expect=2, timeout=0.5))
    # ... until the coordinator aborts it (timeout 4 s, long enough for the steps above on a loaded
    # machine; checked every 200 ms)
    assert b"after" in values(read_committed(b.bootstrap, [1], expect=2, timeout=15))
    with pytest.raises(KafkaException) as e:
        slow.commit_transaction(10)
    assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort(), e.value


@pytest.mark.skipif(java_missing is not None, reason=java_missing or "")
def test_broker_restart_in_the_middle_of_a_transaction(broker_factory, java_producers):
    b = broker_factory(FAST)
    create_topic(b.bootstrap)
    jp = java_producers(b.bootstrap, "survivor")
    jp.ok("init")
    jp.ok("begin")
    jp.ok(f"send {TOPIC} 0 before-restart")
    b.stop()
    b.start()
    jp.ok(f"send {TOPIC} 1 after-restart")  # the coordinator replayed the transaction (Ongoing, partition 0)
    jp.ok("commit")
    assert values(read_committed(b.bootstrap, expect=2)) == {b"before-restart", b"after-restart"}
    jp.ok("begin")
    jp.ok(f"send {TOPIC} 2 next")
    jp.ok("commit")
    assert b"next" in values(read_committed(b.bootstrap, expect=3))
