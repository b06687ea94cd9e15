"""A flipped bit in a segment, then a restart: Apache Kafka 4.4 and odradek keep and cut the same.

Each broker (a single node) gets a topic whose records fill several 1 MiB segments (one record
per batch), is stopped one of three ways, has one byte inside a record of its oldest segment
flipped (the batch's CRC no longer matches; its framing does), and is started again:

* stopped cleanly: nothing is validated at start, nothing is cut;
* killed (SIGKILL) once the recovery-point checkpoint says the rolled segments are flushed (a
  roll flushes them; ``log.flush.offset.checkpoint.interval.ms`` = 1 s, and Kafka writes its
  first checkpoint ``log.initial.task.delay.ms`` after it starts: 30 s by default, 1 s here, a
  setting Kafka's LogManager has for tests, which spares the test a minute of waiting on Kafka's
  two restarts): the corrupt segment is below the recovery point, is not read, and nothing is cut;
* killed before its recovery point was checkpointed (its line taken out of the checkpoint after
  the kill: Kafka's first checkpoint comes a delay after start, odradek's within a second of a
  roll's flush, so it cannot be caught the same way on both): every segment is unflushed, so the
  corrupt one is cut at the bad batch and every segment after it is deleted.

That is Kafka's LogLoader (recoverLog); tests/unit/storage/test_corrupt_segment_recovery.py
pins the same rules in odradek's loader. What is compared: the log end offset after the
restart, and which segments (base offsets) are left.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.reference

RECORDS = 40
VALUE = 100_000  # ~10 records (batches) per 1 MiB segment
TOPIC_CONFIG = {"segment.bytes": "1048576"}


def _create_and_fill(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "compression.type": "none"})
    for i in range(RECORDS):
        p.produce(topic, value=bytes([i % 251]) * VALUE)
        p.flush(30)  # one record per batch
    assert p.flush(30) == 0


def _end_offset(bootstrap: str, topic: str, timeout: float = 60) -> int:
    """The partition's log end offset, once its leader answers (after a restart Kafka's KRaft node
    answers NOT_LEADER_OR_FOLLOWER for a moment)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{topic}-{time.monotonic_ns()}"})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
            except KafkaException as e:
                if not e.args[0].retriable() and e.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION:
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def _segments(data_dir: Path, topic: str) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(data_dir / f"{topic}-0") if n.endswith(".log"))


def _flip_a_byte_in_the_second_batch(data_dir: Path, topic: str) -> int:
    """Flip one byte of a record value in the oldest segment's second batch; returns that batch's offset."""
    path = data_dir / f"{topic}-0" / f"{_segments(data_dir, topic)[0]:020d}.log"
    with open(path, "r+b") as f:
        head = f.read(12)
        first_size = int.from_bytes(head[8:12], "big") + 12
        f.seek(first_size)
        second_offset = int.from_bytes(f.read(8), "big")
        f.seek(first_size + 1000)
        b = f.read(1)
        f.seek(first_size + 1000)
        f.write(bytes([b[0] ^ 0x01]))
    return second_offset


class _Kafka:
    def __init__(self, kafka_factory, interval_ms: int):
        self.k = kafka_factory(
            line="4",
            overrides={
                "log.flush.offset.checkpoint.interval.ms": str(interval_ms),
                "log.initial.task.delay.ms": str(interval_ms),  # the first checkpoint: 30 s by default
            },
        )
        self.data_dir = self.k.nodes[0].data_dir

    @property
    def bootstrap(self) -> str:
        return self.k.bootstrap

    def kill(self) -> None:
        self.k.kill()

    def stop(self) -> None:
        self.k.stop()

    def start(self) -> None:
        self.k.start()


class _Odradek:
    def __init__(self, broker_factory, interval_ms: int):
        self.b = broker_factory(overrides={"log.flush.offset.checkpoint.interval.ms": str(interval_ms)})
        self.data_dir = self.b.log_dirs

    @property
    def bootstrap(self) -> str:
        return self.b.bootstrap

    def kill(self) -> None:
        self.b.kill()

    def stop(self) -> None:
        self.b.stop()

    def start(self) -> None:
        self.b.start()


def _wait_for_recovery_point(data_dir: Path, topic: str, offset: int, timeout: float = 90) -> None:
    """Until ``recovery-point-offset-checkpoint`` says ``topic``-0 is recovered up to ``offset``
    (Kafka writes its first checkpoint ``log.initial.task.delay.ms`` after start, then every interval)."""
    path = data_dir / "recovery-point-offset-checkpoint"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and f"{topic} 0 {offset}" in path.read_text().splitlines():
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {topic} 0 {offset}: {path.read_text() if path.exists() else None}")


def _state(broker, topic: str) -> tuple[int, list[int]]:
    return _end_offset(broker.bootstrap, topic), _segments(broker.data_dir, topic)


def _forget_recovery_point(data_dir: Path, topic: str) -> None:
    """Drop ``topic``-0 from the recovery-point checkpoint: as if killed before its first checkpoint."""
    path = data_dir / "recovery-point-offset-checkpoint"
    lines = path.read_text().splitlines()
    body = [ln for ln in lines[2:] if not ln.startswith(f"{topic} 0 ")]
    path.write_text("\n".join([lines[0], str(len(body)), *body]) + "\n")


def _scenarios(broker) -> dict[str, tuple]:
    """For each way of stopping: ((end offset, segments) before, the same after, the bad batch's offset)."""
    out = {}
    # killed once the recovery point was checkpointed past the rolled segments
    _create_and_fill(broker.bootstrap, "flushed")
    before = _state(broker, "flushed")
    _wait_for_recovery_point(broker.data_dir, "flushed", before[1][-1])
    broker.kill()
    bad = _flip_a_byte_in_the_second_batch(broker.data_dir, "flushed")
    broker.start()
    out["killed, flushed"] = (before, _state(broker, "flushed"), bad)
    # stopped cleanly
    _create_and_fill(broker.bootstrap, "clean")
    before = _state(broker, "clean")
    broker.stop()
    bad = _flip_a_byte_in_the_second_batch(broker.data_dir, "clean")
    broker.start()
    out["clean stop"] = (before, _state(broker, "clean"), bad)
    # killed before its recovery point was checkpointed
    _create_and_fill(broker.bootstrap, "unflushed")
    before = _state(broker, "unflushed")
    _wait_for_recovery_point(broker.data_dir, "unflushed", before[1][-1])
    broker.kill()
    _forget_recovery_point(broker.data_dir, "unflushed")
    bad = _flip_a_byte_in_the_second_batch(broker.data_dir, "unflushed")
    broker.start()
    out["killed, unflushed"] = (before, _state(broker, "unflushed"), bad)
    broker.stop()
    return out


def _expected(results) -> None:
    for how, ((leo, segs), (leo2, segs2), bad) in results.items():
        assert leo == RECORDS and len(segs) >= 3, how
        if how == "killed, unflushed":
            assert (leo2, segs2) == (bad, segs[:1]), how  # cut at the bad batch, every later segment gone
        else:
            assert (leo2, segs2) == (leo, segs), how  # nothing cut


def test_a_corrupt_old_segment_after_a_restart_kafka_and_odradek_alike(kafka_factory, broker_factory):
    kafka = _scenarios(_Kafka(kafka_factory, 1000))
    _expected(kafka)  # what Kafka 4.4 does, as recorded in the module docstring
    odradek = _scenarios(_Odradek(broker_factory, 1000))
    assert odradek == kafka
