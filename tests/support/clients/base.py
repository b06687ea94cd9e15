"""What every client adapter shares: the record type, errors and their normalized kinds, the
Java partitioner, the helpers the adapters use, and the `Client` base class (the interface is
in support/clients/__init__.py)."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
DEPS = REPO_ROOT / ".deps"
JAVA_DIR = DEPS / "java"
NODE_DIR = REPO_ROOT / "tests" / "clients" / "node"

GROUP_SESSION_TIMEOUT_MS = 6000
GROUP_REBALANCE_TIMEOUT_MS = 6000
ADMIN_TIMEOUT = 10.0  # seconds, for everything but consume


@dataclass(frozen=True)
class TlsFiles:
    """What a client needs for SSL (``ca``: the CA certificate, PEM) and mutual TLS (its own key
    and certificate chain as PEM files, and both in one file: ``keystore``, for the Java client)."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None
    keystore: Path | None = None


@dataclass(frozen=True)
class SaslLogin:
    """SASL for a client: ``mechanism`` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_SSL with
    ``tls``, SASL_PLAINTEXT without)."""

    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass
class Rec:
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    partition: int | None = None
    offset: int | None = None
    timestamp: int | None = None

    def content(self) -> tuple:
        """What a round trip must preserve byte for byte (not partition/offset/timestamp)."""
        return (self.key, self.value, tuple((k, v) for k, v in self.headers))


class ClientError(Exception):
    def __init__(self, client: str, kind: str, message: str = ""):
        super().__init__(f"[{client}] {kind}: {message}")
        self.client = client
        self.kind = kind
        self.message = message


class Unsupported(ClientError):
    def __init__(self, client: str, message: str):
        super().__init__(client, "Unsupported", message)


# --------------------------------------------------------------------------- error names

_ALIASES = {
    "RecordTooLarge": "MessageTooLarge",
    "MessageSizeTooLarge": "MessageTooLarge",
    "MsgSizeTooLarge": "MessageTooLarge",
    "RecordListTooLarge": "MessageTooLarge",
    "KafkaTimeout": "Timeout",
    "TimedOut": "Timeout",
    "MsgTimedOut": "Timeout",
    "RequestTimedOut": "Timeout",
    "RequestTimeout": "Timeout",
    "WatchdogTimeout": "Timeout",
    "TimedOutQueue": "Timeout",
    "TopicException": "InvalidTopic",
    "InvalidTopicException": "InvalidTopic",
    "UnknownTopicOrPart": "UnknownTopicOrPartition",
    "UnknownTopic": "UnknownTopicOrPartition",
    "UnknownPartition": "UnknownTopicOrPartition",
    "TopicExists": "TopicAlreadyExists",
    "AutoOffsetReset": "OffsetOutOfRange",
    "NotLeaderForPartition": "NotLeaderOrFollower",
}

# librdkafka rd_kafka_err2str() texts (kcat stderr) -> normalized kind
_TEXT_KINDS = [
    (re.compile(r"message size too large|too large", re.I), "MessageTooLarge"),
    (re.compile(r"offset out of range", re.I), "OffsetOutOfRange"),
    (re.compile(r"unknown topic or partition|unknown topic|unknown partition", re.I), "UnknownTopicOrPartition"),
    (re.compile(r"invalid topic", re.I), "InvalidTopic"),
    (re.compile(r"timed out|timeout", re.I), "Timeout"),
]


def normalize_kind(raw: str) -> str:
    """Map a client's error name (class name or error code name) to one Kafka-style name.

    ``RecordTooLargeException``, ``MSG_SIZE_TOO_LARGE``, ``MessageSizeTooLargeError``
    and ``MESSAGE_TOO_LARGE`` all become ``MessageTooLarge``.
    """
    name = raw.strip()
    name = name.rsplit(".", 1)[-1]
    if name.startswith("KafkaJS") and name not in ("KafkaJSError",):
        name = name[len("KafkaJS") :]
    if re.fullmatch(r"_?[A-Z0-9_]+", name) and "_" in name.strip("_") or re.fullmatch(r"_?[A-Z0-9]+", name):
        name = "".join(p.capitalize() for p in name.strip("_").split("_") if p)
    if name in _ALIASES:
        return _ALIASES[name]
    for suffix in ("Exception", "Error"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return _ALIASES.get(name, name)


def _kind_from_text(text: str) -> str:
    for rx, kind in _TEXT_KINDS:
        if rx.search(text):
            return kind
    return "Other"


# --------------------------------------------------------------------------- helpers


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _unb64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def _json_rec(d: dict) -> Rec:
    return Rec(
        key=_unb64(d.get("key")),
        value=_unb64(d.get("value")),
        headers=[(h[0], _unb64(h[1])) for h in d.get("headers") or []],
        partition=d.get("partition"),
        offset=d.get("offset"),
        timestamp=d.get("timestamp"),
    )


def _rec_json(r: Rec) -> str:
    return json.dumps(
        {
            "key": _b64(r.key),
            "value": _b64(r.value),
            "headers": [[k, _b64(v)] for k, v in r.headers],
            "partition": r.partition,
            "timestamp": r.timestamp,
        }
    )


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int."""
    length = len(data)
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    h = (seed ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = data[length - rest :]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def keyed_records(n: int, keys: int = 50, *, seq_header: bool = True) -> list[Rec]:
    """n records over `keys` keys, each with two headers (one of them binary) and a 46-byte value
    that starts with the record's sequence number (``value-000042-``, see `record_seq`).
    ``seq_header=False`` leaves out the ``seq`` header, so every record has the same headers."""
    return [
        Rec(
            key=f"user-{i % keys}".encode(),
            value=f"value-{i:06d}-".encode() + bytes([i % 256]) * 40,
            headers=([("seq", str(i).encode())] if seq_header else []) + [("src", b"\x01\xfe")],
        )
        for i in range(n)
    ]


def record_seq(rec: Rec) -> int:
    """The sequence number `keyed_records` wrote at the start of the value."""
    assert rec.value is not None and rec.value.startswith(b"value-"), rec
    return int(rec.value[6:12])


def java_partition(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def _acks_str(acks: int) -> str:
    return "all" if acks == -1 else str(acks)


def _reset_policy(client: str, reset, from_beginning: bool, start_offset, group, partitions) -> str:
    """The normalized auto-offset-reset policy of a consume call (see module docstring)."""
    if start_offset is not None and group is not None and partitions is None:
        raise Unsupported(client, "start_offset needs assigned partitions, not a subscribing group")
    if reset is None:
        return "earliest" if from_beginning else "latest"
    if reset not in ("earliest", "latest", "none"):
        raise ValueError(f"reset must be earliest, latest or none, not {reset!r}")
    return reset


def _public(topics) -> set[str]:
    return {t for t in topics if not t.startswith("__")}


# --------------------------------------------------------------------------- base


class Client:
    name = "?"
    # True when the client sets headers once per process it runs (kcat -H), so records whose
    # headers differ each cost a process of their own
    headers_per_run = False

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout: float = ADMIN_TIMEOUT,
        isolation: str | None = None,
        tls: TlsFiles | None = None,
        sasl: SaslLogin | None = None,
    ):
        """``isolation``: the consumers' isolation level, "read_committed" | "read_uncommitted";
        None keeps each client's own default (read_uncommitted for Java, kafka-python and aiokafka;
        read_committed for librdkafka, so confluent-kafka and kcat, and for kafkajs).
        ``tls``: connect with SSL (mutual TLS when it has a certificate); ``sasl``: authenticate
        (SASL_SSL with ``tls``, else SASL_PLAINTEXT)."""
        if isolation not in (None, "read_committed", "read_uncommitted"):
            raise ValueError(f"isolation must be read_committed or read_uncommitted, not {isolation!r}")
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.isolation = isolation
        self.tls = tls
        self.sasl = sasl

    @property
    def security_protocol(self) -> str:
        if self.sasl is not None:
            return "SASL_SSL" if self.tls is not None else "SASL_PLAINTEXT"
        return "SSL" if self.tls is not None else "PLAINTEXT"

    def librdkafka_tls(self) -> dict[str, str]:
        """The TLS and SASL settings as librdkafka names them (confluent-kafka, kcat)."""
        conf = {"security.protocol": self.security_protocol} if self.tls or self.sasl else {}
        if self.sasl is not None:
            conf |= {"sasl.mechanisms": self.sasl.mechanism, "sasl.username": self.sasl.username}
            conf["sasl.password"] = self.sasl.password
        if self.tls is None:
            return conf
        conf["ssl.ca.location"] = str(self.tls.ca)
        if self.tls.cert is not None:
            conf.update({"ssl.certificate.location": str(self.tls.cert), "ssl.key.location": str(self.tls.key)})
        return conf

    def __repr__(self):
        return f"<{self.name} client {self.bootstrap}>"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when the client can run here, else why not (for pytest.skip)."""
        return None

    # The uniform interface (see module docstring).
    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        raise Unsupported(self.name, "create_topic")

    def delete_topic(self, name):
        raise Unsupported(self.name, "delete_topic")

    def list_topics(self) -> set[str]:
        raise Unsupported(self.name, "list_topics")

    def describe_topic(self, name) -> dict[int, int]:
        raise Unsupported(self.name, "describe_topic")

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        raise Unsupported(self.name, "produce")

    def consume(
        self,
        topic,
        *,
        expected,
        timeout=30,
        from_beginning=True,
        partitions=None,
        group=None,
        start_offset=None,
        reset=None,
    ):
        raise Unsupported(self.name, "consume")

    def offsets_for_times(self, topic, ts) -> dict[int, int | None]:
        raise Unsupported(self.name, "offsets_for_times")
