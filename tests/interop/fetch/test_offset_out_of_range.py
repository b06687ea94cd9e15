"""Fetching from an offset outside the log, with and without a reset policy, with every client.

With no reset policy (Java ``auto.offset.reset=none``, librdkafka/confluent/kcat
``auto.offset.reset=error``, kafka-python and aiokafka ``auto_offset_reset='none'``),
a position past the log end, or below the log start after DeleteRecords, must reach
the caller as an OffsetOutOfRange error quickly (the broker answers Fetch with
OFFSET_OUT_OF_RANGE), not as a silent hang. kafkajs has no such policy: its consumer
group always resets to the default offset and only logs the error, so the "none" cases
are skipped for it and its real behaviour (reset to earliest) is tested instead.
"""

from __future__ import annotations

import time
import uuid

import pytest
from support.clients import ClientError, ConfluentClient, Rec, Unsupported

pytestmark = pytest.mark.interop

N = 10
DEADLINE = 25.0  # seconds: "within ~20 s", plus process start-up of the CLI clients


def _topic_with_records(broker) -> str:
    pytest.importorskip("confluent_kafka")
    topic = f"oor-{uuid.uuid4().hex[:8]}"
    setup = ConfluentClient(broker.bootstrap)
    setup.create_topic(topic, 1)
    res = setup.produce(topic, [Rec(f"k{i}".encode(), f"v{i}".encode()) for i in range(N)])
    assert [o for _, o in res] == list(range(N))
    return topic


def _delete_records_before(broker, topic: str, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futs = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=10, operation_timeout=10)
    for f in futs.values():
        deleted = f.result(timeout=15)
        assert deleted.low_watermark == offset


def _expect_out_of_range(c, topic: str, start_offset: int) -> float:
    t0 = time.monotonic()
    try:
        got = c.consume(topic, expected=1, timeout=20, partitions=[0], start_offset=start_offset, reset="none")
    except Unsupported as e:
        pytest.skip(str(e))
    except ClientError as e:
        elapsed = time.monotonic() - t0
        assert e.kind == "OffsetOutOfRange", f"{e.client}: wrong error {e.kind}: {e.message[:500]}"
        assert elapsed < DEADLINE, f"took {elapsed:.1f}s"
        return elapsed
    pytest.fail(f"{c.name}: no error after {time.monotonic() - t0:.1f}s; got {len(got)} records {got[:3]}")


def test_beyond_log_end_without_reset_policy_is_an_error(broker, client):
    topic = _topic_with_records(broker)
    _expect_out_of_range(client(broker.bootstrap), topic, 1000)


def test_below_log_start_after_delete_records_without_reset_policy_is_an_error(broker, client):
    topic = _topic_with_records(broker)
    _delete_records_before(broker, topic, 5)
    _expect_out_of_range(client(broker.bootstrap), topic, 2)


def test_beyond_log_end_with_reset_earliest_reads_from_the_start(broker, client):
    """The same position with a reset policy: every client, kafkajs included, starts over at 0."""
    topic = _topic_with_records(broker)
    c = client(broker.bootstrap)
    got = c.consume(topic, expected=N, timeout=30, partitions=[0], start_offset=1000, reset="earliest")
    assert [r.offset for r in got] == list(range(N))
    assert [r.value for r in got] == [f"v{i}".encode() for i in range(N)]


def test_below_log_start_with_reset_earliest_reads_from_log_start(broker, client):
    topic = _topic_with_records(broker)
    _delete_records_before(broker, topic, 5)
    c = client(broker.bootstrap)
    got = c.consume(topic, expected=N - 5, timeout=30, partitions=[0], start_offset=2, reset="earliest")
    assert [r.offset for r in got] == list(range(5, N))
