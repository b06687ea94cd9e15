"""Self-tests of the client adapters (tests/support/clients.py) against third-party brokers.

They prove each harness works end to end before it is pointed at odradek:
create a topic, produce 100 keyed records with headers, consume them back byte-exact.
Run alone with:  .venv/bin/pytest tests/support -m harness -q
"""

from __future__ import annotations

import uuid

import pytest
from support.clients import ClientError, Rec, java_partition, normalize_kind

pytestmark = pytest.mark.harness

# (client, broker) pairs that genuinely cannot work, with the reason.
KNOWN_BROKEN = {
    # Debian's kcat 1.7.1 is built on librdkafka 2.0.2, which cannot parse Tansu 0.6.0's
    # ApiVersions v3 response: it misreads the trailing tagged fields ("Protocol read buffer
    # underflow for ApiVersion v3 at 274/279") and never gets past the handshake.
    ("kcat", "tansu"): "kcat (librdkafka 2.0.2) cannot parse Tansu's ApiVersions v3 tagged fields",
    # The librdkafka mock cluster is made for librdkafka: the Java 3.9 client never gets usable
    # Metadata from it ("Topic not present in metadata", "Timed out waiting for a node assignment").
    ("java", "mock"): "Java 3.9 client gets no usable Metadata from the librdkafka mock cluster",
    # kafka-python 3.0.12 cannot decode the mock's ApiVersions answer ("Unable to decode response").
    ("kafka_python", "mock"): "kafka-python 3.0.12 cannot decode the librdkafka mock's ApiVersions response",
    # kafkajs's admin Metadata does not auto-create, and the mock has no such topic until a
    # client auto-creates it; CreateTopics against the mock times out for every client.
    ("kafkajs", "mock"): "kafkajs needs CreateTopics, which the librdkafka mock does not complete",
}


def records(n: int = 100) -> list[Rec]:
    out = []
    for i in range(n):
        key = f"key-{i % 17}".encode()
        # binary, UTF-8, newline, JSON-ish and empty values
        value = bytes([i % 256, 0, 255, 10, 13]) + 'ünïcødé\n{"x":1}'.encode() + bytes(range(i % 7))
        if i == 5:
            value = b""
        headers = [("idx", str(i).encode()), ("bin", bytes([1, 2, 0x7F, 0x80, 0xFF]) + b"=,;"), ("empty", b"")]
        out.append(Rec(key=key, value=value, headers=headers))
    out.append(Rec(key=None, value=b"null-key"))
    out.append(Rec(key=b"null-value", value=None))
    return out


@pytest.fixture
def third_party(tansu):
    """The broker the full adapter checks run against (the mock cannot create topics)."""
    return tansu, "tansu"


def _skip_known(client_name, broker_name):
    reason = KNOWN_BROKEN.get((client_name, broker_name))
    if reason:
        pytest.skip(reason)


def test_roundtrip_100_keyed_records(client, third_party):
    broker, broker_name = third_party
    _skip_known(client.name, broker_name)
    c = client(broker.bootstrap)
    topic = f"harness-{client.name}-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 3)
    assert topic in c.list_topics()
    leaders = c.describe_topic(topic)
    assert sorted(leaders) == [0, 1, 2]

    sent = records()
    acks = c.produce(topic, sent)
    assert len(acks) == len(sent)
    # Every keyed record goes where the Java client would put it.
    for r, (p, off) in zip(sent, acks):
        if r.key is not None:
            assert p == java_partition(r.key, 3), (r.key, p)
        assert off is not None and off >= 0
    assert len(set(acks)) == len(acks)

    got = c.consume(topic, expected=len(sent), timeout=30)
    assert len(got) == len(sent)
    by_pos = {(r.partition, r.offset): r for r in got}
    for r, pos in zip(sent, acks):
        back = by_pos[pos]
        assert back.content() == r.content(), (pos, back, r)
        assert back.timestamp and back.timestamp > 0


def test_roundtrip_mock_cluster_autocreate(client, mock_cluster):
    """librdkafka's mock cluster: no CreateTopics (it times out), so use an auto-created topic."""
    _skip_known(client.name, "mock")
    c = client(mock_cluster.bootstrap)
    topic = f"harness-m-{client.name}-{uuid.uuid4().hex[:8]}"
    sent = records(30)
    acks = c.produce(topic, sent)
    got = c.consume(topic, expected=len(sent), timeout=30)
    by_pos = {(r.partition, r.offset): r for r in got}
    assert len(got) == len(sent)
    for r, pos in zip(sent, acks):
        assert by_pos[pos].content() == r.content()


def test_consume_with_group(client, third_party):
    broker, broker_name = third_party
    _skip_known(client.name, broker_name)
    c = client(broker.bootstrap)
    topic = f"harness-g-{client.name}-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 2)
    sent = [Rec(key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("h", b"x")]) for i in range(10)]
    c.produce(topic, sent)
    got = c.consume(topic, expected=10, timeout=40, group=f"g-{uuid.uuid4().hex[:8]}")
    assert sorted(r.content() for r in got) == sorted(r.content() for r in sent)


def test_explicit_partition_and_assign(client, third_party):
    broker, broker_name = third_party
    _skip_known(client.name, broker_name)
    c = client(broker.bootstrap)
    topic = f"harness-p-{client.name}-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 3)
    acks = c.produce(topic, [Rec(key=b"a", value=b"one", partition=2), Rec(key=b"b", value=b"two", partition=2)])
    assert [p for p, _ in acks] == [2, 2]
    assert acks[1][1] == acks[0][1] + 1
    got = c.consume(topic, expected=2, timeout=20, partitions=[2])
    assert [(r.partition, r.value) for r in got] == [(2, b"one"), (2, b"two")]


@pytest.mark.parametrize(
    "raw,kind",
    [
        ("RecordTooLargeException", "MessageTooLarge"),
        ("MSG_SIZE_TOO_LARGE", "MessageTooLarge"),
        ("MessageSizeTooLargeError", "MessageTooLarge"),
        ("MESSAGE_TOO_LARGE", "MessageTooLarge"),
        ("org.apache.kafka.common.errors.TimeoutException", "Timeout"),
        ("_MSG_TIMED_OUT", "Timeout"),
        ("KafkaTimeoutError", "Timeout"),
        ("KafkaJSTimeout", "Timeout"),
        ("TOPIC_EXCEPTION", "InvalidTopic"),
        ("INVALID_TOPIC_EXCEPTION", "InvalidTopic"),
        ("InvalidTopicError", "InvalidTopic"),
        ("UNKNOWN_TOPIC_OR_PART", "UnknownTopicOrPartition"),
        ("UnknownTopicOrPartitionException", "UnknownTopicOrPartition"),
        ("OFFSET_OUT_OF_RANGE", "OffsetOutOfRange"),
        ("OffsetOutOfRangeError", "OffsetOutOfRange"),
        ("TopicExistsException", "TopicAlreadyExists"),
        ("TOPIC_ALREADY_EXISTS", "TopicAlreadyExists"),
    ],
)
def test_normalize_kind(raw, kind):
    assert normalize_kind(raw) == kind


def test_client_error_surfaces(client, tansu):
    """A refused operation is a ClientError, not a hang: the topic already exists."""
    c = client(tansu.bootstrap)
    if client.name == "kcat":
        pytest.skip(KNOWN_BROKEN[("kcat", "tansu")])
    topic = f"harness-e-{client.name}-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 1)
    with pytest.raises(ClientError) as ei:
        c.create_topic(topic, 1)
    assert ei.value.kind == "TopicAlreadyExists", ei.value
