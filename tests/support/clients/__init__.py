"""One uniform adapter per real Kafka client, for interop tests.

Every adapter is built as ``make_client(name, bootstrap)`` (or the class
directly) and exposes exactly::

    create_topic(name, partitions, configs=None, *, replication_factor=1) -> None
    delete_topic(name) -> None
    list_topics() -> set[str]                      # internal "__*" topics left out
    describe_topic(name) -> {partition: leader_id}
    produce(topic, records: list[Rec], *, acks=-1, compression=None, idempotent=None)
        -> list[(partition, offset)]               # in the order of ``records``
    consume(topic, *, expected, timeout=30, from_beginning=True, partitions=None, group=None,
            start_offset=None, reset=None)
        -> list[Rec]                               # stops at ``expected`` records or ``timeout`` s
        ``start_offset``: start every assigned partition at this offset (not with a
        subscribing group); ``reset``: what to do when the position is out of range,
        "earliest" | "latest" | "none" (raise ClientError kind "OffsetOutOfRange"),
        mapped to each client's own setting; None = "earliest" if from_beginning else "latest".
    offsets_for_times(topic, ts) -> {partition: offset | None}

``make_client(name, bootstrap, isolation="read_committed")`` sets the consumers' isolation
level (None: each client's default); ``tls=TlsFiles(ca, cert, key, keystore)`` connects with
SSL (with a certificate: mutual TLS); ``sasl=SaslLogin(mechanism, username, password)``
authenticates (SASL_SSL with ``tls``, SASL_PLAINTEXT without).

``Rec`` carries bytes (key, value, header values; None = null). A client's
error becomes ``ClientError(client, kind, message)`` with ``kind`` a
normalized Kafka error name (see :func:`normalize_kind`): "InvalidTopic",
"OffsetOutOfRange", "MessageTooLarge", "UnknownTopicOrPartition",
"TopicAlreadyExists", "Timeout", ... or the client's own name otherwise.
``Unsupported`` (kind "Unsupported") is raised for what a client cannot do.

Clients: java (tests/clients/java/KafkaCli.java via subprocess), confluent
(confluent-kafka), kcat (Debian kcat), kafka_python, aiokafka, kafkajs
(tests/clients/node/kafkajs_cli.js via node). Keyed records go to the same
partition with every client (all use the Java murmur2 partitioner).

Group consumers use a 6 s session and rebalance timeout so a join completes
quickly (Tansu, for one, holds JoinGroup for the whole rebalance timeout).
"""

from __future__ import annotations

from support.clients.aiokafka import AiokafkaClient
from support.clients.base import (
    ADMIN_TIMEOUT,
    DEPS,
    JAVA_DIR,
    NODE_DIR,
    REPO_ROOT,
    Client,
    ClientError,
    Rec,
    SaslLogin,
    TlsFiles,
    Unsupported,
    java_partition,
    keyed_records,
    murmur2,
    normalize_kind,
    record_seq,
)
from support.clients.confluent import ConfluentClient
from support.clients.java import JavaClient
from support.clients.kafka_python import KafkaPythonClient
from support.clients.kafkajs import KafkajsClient
from support.clients.kcat import KcatClient

__all__ = [
    "ADMIN_TIMEOUT",
    "CLIENTS",
    "DEPS",
    "JAVA_DIR",
    "NODE_DIR",
    "REPO_ROOT",
    "AiokafkaClient",
    "Client",
    "ClientError",
    "ConfluentClient",
    "JavaClient",
    "KafkaPythonClient",
    "KafkajsClient",
    "KcatClient",
    "Rec",
    "SaslLogin",
    "TlsFiles",
    "Unsupported",
    "every_client_produces_and_consumes",
    "java_partition",
    "keyed_records",
    "make_client",
    "murmur2",
    "normalize_kind",
    "record_seq",
    "unavailable_reason",
]

CLIENTS: dict[str, type[Client]] = {
    "java": JavaClient,
    "confluent": ConfluentClient,
    "kcat": KcatClient,
    "kafka_python": KafkaPythonClient,
    "aiokafka": AiokafkaClient,
    "kafkajs": KafkajsClient,
}


def make_client(name: str, bootstrap: str, **kw) -> Client:
    return CLIENTS[name](bootstrap, **kw)


def unavailable_reason(name: str) -> str | None:
    return CLIENTS[name].unavailable_reason()


def every_client_produces_and_consumes(
    bootstrap: str, topic: str, *, tls: TlsFiles | None = None, sasl: SaslLogin | None = None, records: int = 6
) -> None:
    """Each of the six clients in turn produces `records` records of its own to `topic` (which
    exists) and reads everything produced so far back as a member of a new consumer group (its
    FindCoordinator, JoinGroup and SyncGroup over the same connection settings). Every client is
    tried; the failures are asserted together, then that all six could run here."""
    import uuid

    names = [n for n in CLIENTS if unavailable_reason(n) is None]
    produced: list[bytes] = []
    failures: dict[str, str] = {}
    for name in names:
        client = make_client(name, bootstrap, tls=tls, sasl=sasl)
        values = [f"{name}-{i}".encode() for i in range(records)]
        try:
            client.produce(topic, [Rec(key=v, value=v) for v in values])
            produced += values
            got = client.consume(topic, expected=len(produced), timeout=60, group=f"g-{name}-{uuid.uuid4().hex[:6]}")
            assert sorted(r.value for r in got) == sorted(produced), name
        except Exception as e:  # noqa: BLE001 - every client is tried; the failures are listed together
            failures[name] = f"{type(e).__name__}: {e}"[:500]
    assert not failures, failures
    assert len(names) == 6, f"clients that cannot run here: {set(CLIENTS) - set(names)}"
