"""The client against a broker that stalls or goes away: back-pressure, reconnects, error classes.

These use an odradek broker of their own (`broker_factory`), which they pause with SIGSTOP or
restart on the same port; nothing acknowledged may be lost and nothing may be written twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from odradek.client import Admin, Consumer, Producer, TopicPartition, errors
from odradek.client.aio import AIOProducer

RECORD = 1024


def _topic(broker, partitions: int, name: str) -> str:
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topic(name, partitions, 1)
    return name


def _read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30):
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
        got.extend(c.poll(0.3))  # anything beyond `expected` (a duplicate) shows up here
    return got


class Paused:
    """The broker process stopped with SIGSTOP: connections stay open, nothing is answered."""

    def __init__(self, broker):
        self.pid = broker.proc.pid

    def __enter__(self):
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def resume(self):
        os.kill(self.pid, signal.SIGCONT)

    def __exit__(self, *exc):
        self.resume()


@pytest.mark.serial  # timed: alone in its tier (tests/README.md)
def test_full_buffer_blocks_send_for_max_block_ms_then_loses_nothing(broker_factory):
    broker = broker_factory()
    topic = _topic(broker, 1, "bp")
    value = b"x" * RECORD
    with Producer(
        bootstrap_servers=broker.bootstrap, buffer_memory=64 * 1024, batch_size=16384, max_block_ms=3000, linger_ms=0
    ) as p:
        futs = [p.send(topic, value, key=b"0")]
        p.flush()
        with Paused(broker) as paused:
            timed_out_after = None
            for i in range(1, 400):
                t = time.monotonic()
                try:
                    futs.append(p.send(topic, value, key=b"%d" % i))
                except errors.KafkaTimeoutError:
                    timed_out_after = time.monotonic() - t
                    break
            # the buffer took about buffer.memory of records, then send waited max.block.ms
            assert timed_out_after is not None, "send never blocked"
            assert 2.7 <= timed_out_after < 15, timed_out_after
            accepted = len(futs)
            assert 56 <= accepted <= 64, accepted  # 64 KiB of 1 KiB records
            # a send waiting for memory goes through once the broker drains the buffer
            threading.Timer(0.5, paused.resume).start()
            t = time.monotonic()
            futs.append(p.send(topic, value, key=b"late"))
            assert 0.3 <= time.monotonic() - t < 2.7  # it waited for the broker, not for max.block.ms
        p.flush()
        metas = [f.result(30) for f in futs]
    assert [m.offset for m in metas] == list(range(len(futs)))
    got = _read_all(broker.bootstrap, topic, 1, len(futs))
    assert [r.key for r in got] == [b"%d" % i for i in range(accepted)] + [b"late"]


@pytest.mark.serial  # timed: alone in its tier (tests/README.md)
def test_aio_send_waits_for_memory_then_times_out(broker_factory):
    broker = broker_factory()
    topic = _topic(broker, 1, "bp-aio")

    async def run():
        async with AIOProducer(
            bootstrap_servers=broker.bootstrap, buffer_memory=32 * 1024, max_block_ms=800, linger_ms=0
        ) as p:
            await (await p.send(topic, b"first"))
            futs = []
            with Paused(broker):
                with pytest.raises(errors.KafkaTimeoutError):
                    for i in range(400):
                        futs.append(await p.send(topic, b"y" * RECORD, key=b"%d" % i))
            assert 28 <= len(futs) <= 32, len(futs)  # 32 KiB of 1 KiB records
            await p.flush()
            return [(await f).offset for f in futs]

    offsets = asyncio.run(run())
    assert offsets == list(range(1, len(offsets) + 1))
    got = _read_all(broker.bootstrap, topic, 1, len(offsets) + 1)
    assert [r.key for r in got[1:]] == [b"%d" % i for i in range(len(offsets))]


def test_producer_and_consumer_ride_through_broker_restarts(broker_factory):
    """Connection loss: both clients reconnect, refresh metadata and go on; the idempotent
    producer's sequences continue on the restarted broker (no duplicate, no gap)."""
    broker = broker_factory()
    parts = 3
    topic = _topic(broker, parts, "restart")
    keys = [b"k%d" % i for i in range(600)]
    got = []
    with (
        Producer(bootstrap_servers=broker.bootstrap, linger_ms=2, retry_backoff_ms=50, delivery_timeout_ms=60000) as p,
        Consumer(
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            reconnect_backoff_ms=50,
        ) as c,
    ):
        c.assign([TopicPartition(topic, i) for i in range(parts)])
        futs = [p.send(topic, b"v", key=k) for k in keys[:200]]
        p.flush()
        while len(got) < 200:
            got += c.poll(1)
        broker.restart()  # the clients' connections are cut
        futs += [p.send(topic, b"v", key=k) for k in keys[200:400]]
        p.flush()
        broker.stop()  # sends while the broker is down: retried until it is back
        futs += [p.send(topic, b"v", key=k) for k in keys[400:]]
        time.sleep(0.5)
        broker.start()
        p.flush()
        metas = [f.result(30) for f in futs]
        deadline = time.monotonic() + 30
        while len(got) < len(keys) and time.monotonic() < deadline:
            got += c.poll(0.5)
        got += c.poll(0.3)
    assert sorted(r.key for r in got) == sorted(keys)
    assert {(r.partition, r.offset) for r in got} == {(m.partition, m.offset) for m in metas}
    for i in range(parts):
        offs = sorted(m.offset for m in metas if m.partition == i)
        assert offs == list(range(len(offs)))


@pytest.mark.parametrize(
    "code,name,retriable",
    [
        (1, "OffsetOutOfRangeError", False),
        (2, "CorruptMessageError", True),
        (3, "UnknownTopicOrPartitionError", True),
        (6, "NotLeaderOrFollowerError", True),
        (7, "RequestTimedOutError", True),
        (10, "MessageTooLargeError", False),
        (15, "CoordinatorNotAvailableError", True),
        (17, "InvalidTopicExceptionError", False),
        (19, "NotEnoughReplicasError", True),
        (22, "IllegalGenerationError", False),
        (36, "TopicAlreadyExistsError", False),
        (45, "OutOfOrderSequenceNumberError", False),
    ],
)
def test_one_class_per_error_code_with_kafkas_retriable_flag(code, name, retriable):
    cls = errors.error_class(code)
    assert cls is getattr(errors, name)
    assert issubclass(cls, errors.KafkaError)
    assert (cls.code, cls.retriable) == (code, retriable)
    assert errors.error_class(31999) is errors.KafkaError


def test_broker_errors_surface_as_their_classes(broker_factory):
    broker = broker_factory()
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topic("dup", 1, 1)
        with pytest.raises(errors.TopicAlreadyExistsError) as e:
            a.create_topic("dup", 1, 1)
        assert not e.value.retriable
        with pytest.raises(errors.InvalidTopicExceptionError):
            a.create_topic("bad/name", 1, 1)
    with Producer(bootstrap_servers=broker.bootstrap, max_request_size=10_000_000) as p:
        with pytest.raises(errors.MessageTooLargeError):
            p.send("dup", b"z" * 2_000_000).result(30)


def test_partitions_added_later_are_waited_for_not_failed(broker_factory):
    """A record for a partition the metadata does not show yet waits (up to max.block.ms) for
    metadata that shows it, as the Java producer does; a consumer assigned such a partition
    reads its other partitions meanwhile and starts on the new one once it exists."""
    broker = broker_factory()
    topic = _topic(broker, 2, "grow")
    with (
        Producer(bootstrap_servers=broker.bootstrap, max_block_ms=15000) as p,
        Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c,
    ):
        p.send(topic, b"old", partition=1).result(10)
        c.assign([TopicPartition(topic, 1), TopicPartition(topic, 3)])
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = c.poll(0.5)
        assert [(r.partition, r.value) for r in got] == [(1, b"old")]  # not held up by partition 3

        def grow():
            time.sleep(1)
            with Admin(bootstrap_servers=broker.bootstrap) as a:
                a.create_partitions({topic: 4})

        t = threading.Thread(target=grow)
        t.start()
        m = p.send(topic, b"new", partition=3).result(20)  # blocks until the metadata shows it
        t.join()
        assert (m.partition, m.offset) == (3, 0)
        got = []
        deadline = time.monotonic() + 10  # well under metadata.max.age.ms (5 minutes)
        while not got and time.monotonic() < deadline:
            got = c.poll(0.5)
        assert [(r.partition, r.offset, r.value) for r in got] == [(3, 0, b"new")]
