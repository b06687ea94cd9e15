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
level (None: each client's default).

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

import asyncio
import base64
import importlib.util
import json
import os
import random
import re
import selectors
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPS = REPO_ROOT / ".deps"
JAVA_DIR = DEPS / "java"
NODE_DIR = REPO_ROOT / "tests" / "clients" / "node"

GROUP_SESSION_TIMEOUT_MS = 6000
GROUP_REBALANCE_TIMEOUT_MS = 6000
ADMIN_TIMEOUT = 10.0  # seconds, for everything but consume


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


def keyed_records(n: int, keys: int = 50) -> list[Rec]:
    """n records over `keys` keys, each with two headers (one of them binary) and a 46-byte value."""
    return [
        Rec(
            key=f"user-{i % keys}".encode(),
            value=f"value-{i:06d}-".encode() + bytes([i % 256]) * 40,
            headers=[("seq", str(i).encode()), ("src", b"\x01\xfe")],
        )
        for i in range(n)
    ]


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

    def __init__(self, bootstrap: str, *, timeout: float = ADMIN_TIMEOUT, isolation: str | None = None):
        """``isolation``: the consumers' isolation level, "read_committed" | "read_uncommitted";
        None keeps each client's own default (read_uncommitted for Java, kafka-python and aiokafka;
        read_committed for librdkafka, so confluent-kafka and kcat, and for kafkajs)."""
        if isolation not in (None, "read_committed", "read_uncommitted"):
            raise ValueError(f"isolation must be read_committed or read_uncommitted, not {isolation!r}")
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.isolation = isolation

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


# --------------------------------------------------------------------------- CLI-driven clients


class _JsonCliClient(Client):
    """Clients driven through a subprocess speaking the KafkaCli JSON-lines contract."""

    def base_cmd(self) -> list[str]:
        raise NotImplementedError

    def _run(self, args: list[str], *, stdin: str | None = None, timeout_s: float | None = None) -> list[dict]:
        t = timeout_s if timeout_s is not None else self.timeout
        cmd = self.base_cmd() + ["--bootstrap", self.bootstrap, "--timeout-ms", str(int(t * 1000))] + args
        try:
            p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=t * 3 + 30)
        except subprocess.TimeoutExpired as e:
            msg = f"{' '.join(cmd[-len(args) :])} hung; stderr: {e.stderr!r:.2000}"
            raise ClientError(self.name, "Timeout", msg) from None
        lines = []
        for line in p.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                lines.append(json.loads(line))
        if lines and "error" in lines[-1]:
            err = lines[-1]
            raise ClientError(self.name, normalize_kind(err["error"]), err.get("message", ""))
        if p.returncode != 0:
            raise ClientError(self.name, "Other", f"exit {p.returncode}; stderr tail:\n{p.stderr[-3000:]}")
        return lines

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        args = ["create-topic", name, str(partitions), "--replication-factor", str(replication_factor)]
        args += [f"{k}={v}" for k, v in (configs or {}).items()]
        self._run(args)

    def delete_topic(self, name):
        self._run(["delete-topic", name])

    def list_topics(self):
        return _public(self._run(["list-topics"])[0]["topics"])

    def describe_topic(self, name):
        out = self._run(["describe-topic", name])[0]
        return {p["partition"]: p["leader"] for p in out["partitions"]}

    def produce_args(self, acks, compression, idempotent) -> list[str]:
        raise NotImplementedError

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        args = ["produce", topic] + self.produce_args(acks, compression, idempotent)
        out = self._run(args, stdin="".join(_rec_json(r) + "\n" for r in records))
        return [(d["partition"], d["offset"]) for d in out]

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
        policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)
        args = ["consume", topic, "--max", str(expected)]
        if self.isolation is not None:
            args += ["--isolation", self.isolation]
        if from_beginning:
            args.append("--from-beginning")
        if reset is not None:
            args += self.reset_args(policy)
        if start_offset is not None:
            args += ["--offset", str(start_offset)]
        if partitions is not None:
            args += ["--assign", ",".join(str(p) for p in partitions)]
        if group is not None:
            args += ["--group", group]
        return [_json_rec(d) for d in self._run(args, timeout_s=timeout)]

    def reset_args(self, policy: str) -> list[str]:
        return ["--reset", policy]

    def offsets_for_times(self, topic, ts):
        return {d["partition"]: d["offset"] for d in self._run(["offsets-for-times", topic, str(ts)])}


class JavaClient(_JsonCliClient):
    """Apache Kafka Java client 3.9.1 through tests/clients/java/KafkaCli.java."""

    name = "java"

    @classmethod
    def unavailable_reason(cls):
        if shutil.which("java") is None:
            return "no java on PATH"
        if not (JAVA_DIR / "kafka-clients.jar").is_file() or not (JAVA_DIR / "classes" / "KafkaCli.class").is_file():
            return "Java client not built: run scripts/install-test-deps.sh"
        return None

    def base_cmd(self):
        return [
            "java",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            "-cp",
            f"{JAVA_DIR}/*:{JAVA_DIR}/classes",
            "KafkaCli",
        ]

    def produce_args(self, acks, compression, idempotent):
        args = ["--acks", _acks_str(acks), "--compression-type", compression or "none"]
        if idempotent is not None:
            args += ["--enable-idempotence", "true" if idempotent else "false"]
        elif acks != -1:
            args += ["--enable-idempotence", "false"]
        return args

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
        args_extra = []
        if group is not None:
            args_extra = [
                "--prop",
                f"session.timeout.ms={GROUP_SESSION_TIMEOUT_MS}",
                "--prop",
                f"max.poll.interval.ms={GROUP_REBALANCE_TIMEOUT_MS}",
            ]
        self._extra = args_extra
        try:
            return super().consume(
                topic,
                expected=expected,
                timeout=timeout,
                from_beginning=from_beginning,
                partitions=partitions,
                group=group,
                start_offset=start_offset,
                reset=reset,
            )
        finally:
            self._extra = []

    _extra: list[str] = []

    def _run(self, args, **kw):
        return super()._run(args + self._extra, **kw)


class KafkajsClient(_JsonCliClient):
    """kafkajs 2.2.4 through tests/clients/node/kafkajs_cli.js (gzip is its only codec)."""

    name = "kafkajs"

    @classmethod
    def unavailable_reason(cls):
        if shutil.which("node") is None:
            return "no node on PATH"
        if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
            return "kafkajs not installed: run scripts/install-test-deps.sh"
        return None

    def base_cmd(self):
        return ["node", str(NODE_DIR / "kafkajs_cli.js")]

    def reset_args(self, policy: str) -> list[str]:
        return []  # checked in consume(): kafkajs_cli.js has no --reset

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
        # kafkajs has no auto.offset.reset: on OFFSET_OUT_OF_RANGE its consumer group always
        # seeks to the default offset (earliest with fromBeginning, else latest) and logs it
        # (consumerGroup.js recoverFromOffsetOutOfRange); the error never reaches the caller.
        if reset == "none":
            raise Unsupported(
                self.name,
                "kafkajs always resets an out-of-range offset (to earliest with "
                "fromBeginning, else latest): it has no 'none' policy",
            )
        if reset is not None and (reset == "earliest") != from_beginning:
            raise Unsupported(self.name, "kafkajs resets to earliest exactly when fromBeginning is set")
        return super().consume(
            topic,
            expected=expected,
            timeout=timeout,
            from_beginning=from_beginning,
            partitions=partitions,
            group=group,
            start_offset=start_offset,
            reset=reset,
        )

    def produce_args(self, acks, compression, idempotent):
        if compression not in (None, "none", "gzip"):
            raise Unsupported(self.name, f"kafkajs supports only gzip compression, not {compression}")
        args = ["--acks", str(acks), "--compression-type", compression or "none"]
        if idempotent:
            args += ["--enable-idempotence", "true"]
        return args


# --------------------------------------------------------------------------- confluent-kafka


class ConfluentClient(Client):
    """confluent-kafka (librdkafka 2.16), in process."""

    name = "confluent"

    @classmethod
    def unavailable_reason(cls):
        return None if importlib.util.find_spec("confluent_kafka") else "confluent-kafka not installed"

    def _conf(self, **extra):
        conf = {"bootstrap.servers": self.bootstrap, "client.id": "odradek-test-confluent"}
        conf.update(extra)
        return conf

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._conf())

    def _raise(self, e: Exception):
        from confluent_kafka import KafkaError, KafkaException

        err = e.args[0] if isinstance(e, KafkaException) and e.args else e
        if isinstance(err, KafkaError):
            raise ClientError(self.name, normalize_kind(err.name()), err.str()) from e
        raise ClientError(self.name, normalize_kind(type(e).__name__), str(e)) from e

    def _wait(self, futures: dict):
        for f in futures.values():
            try:
                f.result(timeout=self.timeout)
            except Exception as e:  # noqa: BLE001
                if type(e).__name__ == "TimeoutError":
                    raise ClientError(self.name, "Timeout", "admin request timed out") from e
                self._raise(e)

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        from confluent_kafka.admin import NewTopic

        t = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config={k: str(v) for k, v in (configs or {}).items()},
        )
        admin = self._admin()  # must outlive its futures
        self._wait(admin.create_topics([t], request_timeout=self.timeout, operation_timeout=self.timeout))

    def delete_topic(self, name):
        admin = self._admin()
        self._wait(admin.delete_topics([name], request_timeout=self.timeout, operation_timeout=self.timeout))

    def _metadata(self, topic=None):
        try:
            return self._admin().list_topics(topic=topic, timeout=self.timeout)
        except Exception as e:  # noqa: BLE001
            self._raise(e)

    def list_topics(self):
        return _public(self._metadata().topics)

    def describe_topic(self, name):
        t = self._metadata(name).topics.get(name)
        if t is None:
            raise ClientError(self.name, "UnknownTopicOrPartition", name)
        if t.error is not None:
            raise ClientError(self.name, normalize_kind(t.error.name()), t.error.str())
        return {p.id: p.leader for p in t.partitions.values()}

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        from confluent_kafka import Producer

        extra = {
            "acks": _acks_str(acks),
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            "message.timeout.ms": int(self.timeout * 1000),
        }
        if compression:
            extra["compression.type"] = compression
        if idempotent is not None:
            extra["enable.idempotence"] = bool(idempotent)
        p = Producer(self._conf(**extra))
        results: list = [None] * len(records)

        def cb(i):
            def done(err, msg):
                results[i] = err if err is not None else (msg.partition(), msg.offset())

            return done

        try:
            for i, r in enumerate(records):
                kw = {"key": r.key, "value": r.value, "on_delivery": cb(i)}
                if r.headers:
                    kw["headers"] = list(r.headers)
                if r.partition is not None:
                    kw["partition"] = r.partition
                if r.timestamp is not None:
                    kw["timestamp"] = r.timestamp
                while True:
                    try:
                        p.produce(topic, **kw)
                        break
                    except BufferError:
                        p.poll(0.1)
            left = p.flush(self.timeout + 5)
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        if left:
            raise ClientError(self.name, "Timeout", f"{left} messages undelivered")
        for res in results:
            if not isinstance(res, tuple):
                raise ClientError(self.name, normalize_kind(res.name()), res.str())
        return results

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
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

        policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)
        conf = self._conf(
            **{
                "group.id": group or f"odradek-assign-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error" if policy == "none" else policy,
                "session.timeout.ms": GROUP_SESSION_TIMEOUT_MS,
                "max.poll.interval.ms": GROUP_REBALANCE_TIMEOUT_MS,
                **({"isolation.level": self.isolation} if self.isolation else {}),
            }
        )
        c = Consumer(conf)
        out: list[Rec] = []
        try:
            if group is not None and partitions is None:
                c.subscribe([topic])
            else:
                if partitions is None:
                    md = c.list_topics(topic, timeout=self.timeout).topics[topic]
                    if md.error is not None:
                        raise ClientError(self.name, normalize_kind(md.error.name()), md.error.str())
                    partitions = sorted(md.partitions)
                start = OFFSET_BEGINNING if from_beginning else OFFSET_END
                if start_offset is not None:
                    start = start_offset
                c.assign([TopicPartition(topic, p, start) for p in partitions])
            deadline = time.monotonic() + timeout
            while len(out) < expected and time.monotonic() < deadline:
                for m in c.consume(
                    num_messages=expected - len(out), timeout=min(0.5, max(0.01, deadline - time.monotonic()))
                ):
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            continue
                        raise ClientError(self.name, normalize_kind(m.error().name()), m.error().str())
                    ts_type, ts = m.timestamp()
                    out.append(
                        Rec(m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])], m.partition(), m.offset(), ts)
                    )
            if group is not None and out:
                c.commit(asynchronous=False)
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()
        return out

    def offsets_for_times(self, topic, ts):
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(self._conf(**{"group.id": "odradek-oft", "enable.auto.commit": False}))
        try:
            parts = sorted(c.list_topics(topic, timeout=self.timeout).topics[topic].partitions)
            res = c.offsets_for_times([TopicPartition(topic, p, ts) for p in parts], timeout=self.timeout)
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()
        out = {}
        for tp in res:
            if tp.error is not None:
                raise ClientError(self.name, normalize_kind(tp.error.name()), tp.error.str())
            out[tp.partition] = tp.offset if tp.offset >= 0 else None
        return out


# --------------------------------------------------------------------------- kcat

_DELIVERED = re.compile(r"Message delivered to partition (-?\d+) \(offset (-?\d+)\)")


class KcatClient(Client):
    """Debian's kcat 1.7.1 (built on librdkafka 2.0.2), via subprocess.

    kcat has no admin commands: create_topic/delete_topic go through
    librdkafka's AdminClient (confluent-kafka); list/describe use ``kcat -L -J``.
    Produce computes the Java (murmur2) partition of each key itself and sends
    one kcat run per (partition, headers, null-ness) run of records, using
    unusual delimiters; offsets come from ``-vvv`` delivery reports. kcat cannot
    set per-message timestamps (Unsupported). Consume uses ``-J``, read as bytes
    with surrogateescape, which round-trips arbitrary bytes.
    """

    name = "kcat"
    KDELIM = "\x1f\x1dK\x1d\x1f"
    MDELIM = "\x1e\x1dM\x1d\x1e"

    @classmethod
    def unavailable_reason(cls):
        return None if shutil.which("kcat") else "kcat not installed: run scripts/install-test-deps.sh"

    def _cmd(self, *args, extra=()):
        cmd = ["kcat", "-b", self.bootstrap, "-m", str(int(self.timeout)), "-X", "partitioner=murmur2_random"]
        for x in extra:
            cmd += ["-X", x]
        return cmd + list(args)

    def _check(self, p: subprocess.CompletedProcess, what: str):
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode("utf-8", "replace")
        errors = [ln for ln in err.splitlines() if "ERROR" in ln or "Delivery failed" in ln]
        if p.returncode != 0 or errors:
            text = "\n".join(errors) or err[-2000:]
            raise ClientError(self.name, _kind_from_text(text), f"{what}: exit {p.returncode}: {text}")

    def _run(self, cmd, input=None, timeout=None):
        try:
            return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout or self.timeout * 3 + 10)
        except subprocess.TimeoutExpired as e:
            raise ClientError(self.name, "Timeout", f"{cmd[3:]} hung") from e

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        ConfluentClient(self.bootstrap, timeout=self.timeout).create_topic(
            name, partitions, configs, replication_factor=replication_factor
        )

    def delete_topic(self, name):
        ConfluentClient(self.bootstrap, timeout=self.timeout).delete_topic(name)

    def _metadata(self, topic=None):
        args = ["-L", "-J"] + (["-t", topic] if topic else [])
        p = self._run(self._cmd(*args))
        self._check(p, "metadata")
        return json.loads(p.stdout)

    def list_topics(self):
        return _public(t["topic"] for t in self._metadata()["topics"])

    def describe_topic(self, name):
        for t in self._metadata(name)["topics"]:
            if t["topic"] == name:
                if t.get("error"):
                    raise ClientError(self.name, _kind_from_text(t["error"]), t["error"])
                return {p["partition"]: p["leader"] for p in t["partitions"]}
        raise ClientError(self.name, "UnknownTopicOrPartition", name)

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        nparts = None
        plan = []
        for i, r in enumerate(records):
            if r.timestamp is not None:
                raise Unsupported(self.name, "kcat cannot set per-message timestamps")
            for k, v in r.headers:
                if v is None or b"=" in k.encode():
                    raise Unsupported(self.name, "kcat -H cannot send null header values or '=' in names")
            part = r.partition
            if part is None:
                if nparts is None:
                    nparts = len(self.describe_topic(topic))
                part = java_partition(r.key, nparts) if r.key is not None else random.randrange(nparts)
            for b in (r.key, r.value):
                if b is not None and (self.KDELIM.encode() in b or self.MDELIM.encode() in b):
                    raise Unsupported(self.name, "record contains the kcat delimiter")
            null_mode = r.key is None or r.value is None
            if null_mode and (r.key == b"" or r.value == b""):
                raise Unsupported(self.name, "kcat -Z cannot mix an empty and a null key/value in one record")
            plan.append((i, part, tuple(r.headers), null_mode))
        # Stable sort by partition; then runs of identical (headers, null_mode).
        plan.sort(key=lambda x: x[1])
        runs: list[list] = []
        for item in plan:
            if runs and runs[-1][0][1:] == item[1:]:
                runs[-1].append(item)
            else:
                runs.append([item])
        extra = [f"acks={_acks_str(acks)}", f"message.timeout.ms={int(self.timeout * 1000)}"]
        if idempotent is not None:
            extra.append(f"enable.idempotence={'true' if idempotent else 'false'}")
        if compression:
            extra.append(f"compression.codec={compression}")
        results: list = [None] * len(records)
        for run in runs:
            _, part, headers, null_mode = run[0]
            args = [
                "-P",
                "-t",
                topic,
                "-p",
                str(part),
                "-K",
                self._esc(self.KDELIM),
                "-D",
                self._esc(self.MDELIM),
                "-vvv",
            ]
            if null_mode:
                args.append("-Z")
            for k, v in headers:
                args += ["-H", f"{k}={v.decode('utf-8', 'surrogateescape')}"]
            data = b"".join(
                (records[i].key or b"") + self.KDELIM.encode() + (records[i].value or b"") + self.MDELIM.encode()
                for i, *_ in run
            )
            p = self._run(self._cmd(*args, extra=extra), input=data)
            self._check(p, "produce")
            delivered = [(int(a), int(b)) for a, b in _DELIVERED.findall(p.stderr.decode("utf-8", "replace"))]
            if len(delivered) != len(run):
                raise ClientError(
                    self.name,
                    "Other",
                    f"{len(delivered)} delivery reports for {len(run)} records: "
                    f"{p.stderr.decode('utf-8', 'replace')[-2000:]}",
                )
            for (i, *_), d in zip(run, delivered):
                results[i] = d
        return results

    @staticmethod
    def _esc(delim: str) -> str:
        return "".join(c if c.isalnum() else f"\\x{ord(c):02x}" for c in delim)

    @staticmethod
    def _from_json(line: bytes) -> Rec:
        d = json.loads(line.decode("utf-8", "surrogateescape"))
        enc = lambda s: None if s is None else s.encode("utf-8", "surrogateescape")  # noqa: E731
        hs = d.get("headers") or []
        return Rec(
            enc(d.get("key")),
            enc(d.get("payload")),
            [(hs[i], enc(hs[i + 1])) for i in range(0, len(hs), 2)],
            d["partition"],
            d["offset"],
            d.get("ts"),
        )

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
        policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)
        offset = str(start_offset) if start_offset is not None else ("beginning" if from_beginning else "end")
        extra = [f"auto.offset.reset={'error' if policy == 'none' else policy}"]
        if self.isolation is not None:
            extra.append(f"isolation.level={self.isolation}")
        if group is not None:
            extra += [
                f"session.timeout.ms={GROUP_SESSION_TIMEOUT_MS}",
                f"max.poll.interval.ms={GROUP_REBALANCE_TIMEOUT_MS}",
            ]
            cmds = [self._cmd("-G", group, "-J", "-u", "-q", "-c", str(expected), topic, extra=extra)]
        elif partitions is None:
            cmds = [self._cmd("-C", "-t", topic, "-o", offset, "-J", "-u", "-q", "-c", str(expected), extra=extra)]
        else:
            cmds = [
                self._cmd(
                    "-C", "-t", topic, "-p", str(p), "-o", offset, "-J", "-u", "-q", "-c", str(expected), extra=extra
                )
                for p in partitions
            ]
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in cmds]
        out: list[Rec] = []
        sel = selectors.DefaultSelector()
        bufs = {}
        for p in procs:
            os.set_blocking(p.stdout.fileno(), False)
            sel.register(p.stdout, selectors.EVENT_READ, p)
            bufs[p] = b""
        deadline = time.monotonic() + timeout
        try:
            while len(out) < expected and time.monotonic() < deadline and sel.get_map():
                for key, _ in sel.select(timeout=0.2):
                    chunk = key.fileobj.read()
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    bufs[key.data] += chunk
                    *lines, bufs[key.data] = bufs[key.data].split(b"\n")
                    out.extend(self._from_json(ln) for ln in lines if ln.strip())
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()  # kcat -G commits and leaves the group on SIGTERM
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        errs = b"".join(p.stderr.read() for p in procs).decode("utf-8", "replace")
        errors = [ln for ln in errs.splitlines() if "ERROR" in ln]
        if errors and len(out) < expected:
            raise ClientError(self.name, _kind_from_text("\n".join(errors)), "\n".join(errors)[-2000:])
        return out[:expected] if len(out) > expected else out

    def offsets_for_times(self, topic, ts):
        parts = sorted(self.describe_topic(topic))
        args = ["-Q", "-J"]
        for p in parts:
            args += ["-t", f"{topic}:{p}:{ts}"]
        p = self._run(self._cmd(*args))
        self._check(p, "query")
        d = json.loads(p.stdout)[topic]
        return {int(k): (v["offset"] if v["offset"] >= 0 else None) for k, v in d.items() if k != "topic"}


# --------------------------------------------------------------------------- kafka-python


class KafkaPythonClient(Client):
    """kafka-python 3.0.12, in process."""

    name = "kafka_python"

    @classmethod
    def unavailable_reason(cls):
        return None if importlib.util.find_spec("kafka") else "kafka-python not installed"

    def _raise(self, e: Exception):
        raise ClientError(self.name, normalize_kind(type(e).__name__), str(e)) from e

    def _admin(self):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(
            bootstrap_servers=self.bootstrap,
            request_timeout_ms=int(self.timeout * 1000),
            client_id="odradek-test-kafka-python",
        )

    def _with_admin(self, fn):
        try:
            a = self._admin()
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        try:
            return fn(a)
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            a.close()

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        from kafka.admin import NewTopic

        t = NewTopic(
            name, partitions, replication_factor, topic_configs={k: str(v) for k, v in (configs or {}).items()}
        )
        self._with_admin(lambda a: a.create_topics([t], timeout_ms=int(self.timeout * 1000)))

    def delete_topic(self, name):
        self._with_admin(lambda a: a.delete_topics([name], timeout_ms=int(self.timeout * 1000)))

    def list_topics(self):
        return _public(self._with_admin(lambda a: a.list_topics()))

    def describe_topic(self, name):
        from kafka.errors import for_code

        ts = self._with_admin(lambda a: a.describe_topics([name]))
        for t in ts:
            if t.get("topic", t.get("name")) == name:
                code = t.get("error_code", 0)
                if code:
                    self._raise(for_code(code)())
                return {
                    p["partition_index"] if "partition_index" in p else p["partition"]: p["leader_id"]
                    if "leader_id" in p
                    else p["leader"]
                    for p in t["partitions"]
                }
        raise ClientError(self.name, "UnknownTopicOrPartition", name)

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        from kafka import KafkaProducer

        kw = dict(
            bootstrap_servers=self.bootstrap,
            acks="all" if acks == -1 else acks,
            linger_ms=5,
            request_timeout_ms=int(self.timeout * 1000),
            max_block_ms=int(self.timeout * 1000),
            client_id="odradek-test-kafka-python",
        )
        if compression:
            kw["compression_type"] = compression
        if idempotent is not None:
            kw["enable_idempotence"] = bool(idempotent)
        try:
            p = KafkaProducer(**kw)
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        try:
            futs = [
                p.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                )
                for r in records
            ]
            p.flush(timeout=self.timeout + 5)
            out = []
            for f in futs:
                md = f.get(timeout=self.timeout)
                out.append((md.partition, md.offset))
            return out
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            p.close(timeout=5)

    def _consumer(self, **kw):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            request_timeout_ms=int(max(self.timeout, 31) * 1000),
            client_id="odradek-test-kafka-python",
            **({"isolation_level": self.isolation} if self.isolation else {}),
            **kw,
        )

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
        from kafka import TopicPartition

        try:
            policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)
            c = self._consumer(
                group_id=group,
                auto_offset_reset=policy,
                session_timeout_ms=GROUP_SESSION_TIMEOUT_MS,
                max_poll_interval_ms=GROUP_REBALANCE_TIMEOUT_MS,
                heartbeat_interval_ms=2000,
            )
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        out: list[Rec] = []
        try:
            if group is not None and partitions is None:
                c.subscribe([topic])
            else:
                if partitions is None:
                    ps = c.partitions_for_topic(topic)
                    if not ps:
                        raise ClientError(self.name, "UnknownTopicOrPartition", topic)
                    partitions = sorted(ps)
                tps = [TopicPartition(topic, p) for p in partitions]
                c.assign(tps)
                if start_offset is not None:
                    for tp in tps:
                        c.seek(tp, start_offset)
                elif from_beginning:
                    c.seek_to_beginning(*tps)
                else:
                    c.seek_to_end(*tps)
            deadline = time.monotonic() + timeout
            while len(out) < expected and time.monotonic() < deadline:
                left = deadline - time.monotonic()
                batch = c.poll(timeout_ms=int(max(10, min(500, left * 1000))), max_records=expected - len(out))
                for tp in sorted(batch, key=lambda t: t.partition):
                    for m in batch[tp]:
                        out.append(
                            Rec(
                                m.key,
                                m.value,
                                [(k, v) for k, v in (m.headers or [])],
                                m.partition,
                                m.offset,
                                m.timestamp,
                            )
                        )
            if group is not None and out:
                c.commit()
        except ClientError:
            raise
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()
        return out

    def offsets_for_times(self, topic, ts):
        from kafka import TopicPartition

        c = self._consumer()
        try:
            ps = c.partitions_for_topic(topic) or set()
            res = c.offsets_for_times({TopicPartition(topic, p): ts for p in ps})
            return {tp.partition: (v.offset if v is not None else None) for tp, v in res.items()}
        except Exception as e:  # noqa: BLE001
            self._raise(e)
        finally:
            c.close()


# --------------------------------------------------------------------------- aiokafka


class AiokafkaClient(Client):
    """aiokafka 0.14.0, each call in its own ``asyncio.run``."""

    name = "aiokafka"

    @classmethod
    def unavailable_reason(cls):
        return None if importlib.util.find_spec("aiokafka") else "aiokafka not installed"

    def _call(self, coro):
        try:
            return asyncio.run(asyncio.wait_for(coro, self.timeout * 3 + 30))
        except ClientError:
            raise
        except TimeoutError as e:
            raise ClientError(self.name, "Timeout", f"{type(e).__name__}: {e}") from e
        except Exception as e:  # noqa: BLE001
            raise ClientError(self.name, normalize_kind(type(e).__name__), str(e)) from e

    async def _admin(self, fn):
        from aiokafka.admin import AIOKafkaAdminClient

        a = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap,
            request_timeout_ms=int(self.timeout * 1000),
            client_id="odradek-test-aiokafka",
        )
        await a.start()
        try:
            return await fn(a)
        finally:
            await a.close()

    @staticmethod
    def _check_response(resp):
        from aiokafka.errors import for_code

        for t in getattr(resp, "topic_errors", None) or getattr(resp, "topic_error_codes", None) or []:
            code = t[1]
            if code:
                msg = t[2] if len(t) > 2 and isinstance(t[2], str) else ""
                raise for_code(code)(msg)

    def create_topic(self, name, partitions, configs=None, *, replication_factor=1):
        from aiokafka.admin import NewTopic

        t = NewTopic(
            name, partitions, replication_factor, topic_configs={k: str(v) for k, v in (configs or {}).items()}
        )

        async def go(a):
            self._check_response(await a.create_topics([t], timeout_ms=int(self.timeout * 1000)))

        self._call(self._admin(go))

    def delete_topic(self, name):
        async def go(a):
            self._check_response(await a.delete_topics([name], timeout_ms=int(self.timeout * 1000)))

        self._call(self._admin(go))

    def list_topics(self):
        async def go(a):
            return await a.list_topics()

        return _public(self._call(self._admin(go)))

    def describe_topic(self, name):
        async def go(a):
            return await a.describe_topics([name])

        from aiokafka.errors import for_code

        for t in self._call(self._admin(go)):
            if t["topic"] == name:
                if t["error_code"]:
                    e = for_code(t["error_code"])
                    raise ClientError(self.name, normalize_kind(e.__name__), name)
                return {p["partition"]: p["leader"] for p in t["partitions"]}
        raise ClientError(self.name, "UnknownTopicOrPartition", name)

    def produce(self, topic, records, *, acks=-1, compression=None, idempotent=None):
        from aiokafka import AIOKafkaProducer

        kw = dict(
            bootstrap_servers=self.bootstrap,
            acks="all" if acks == -1 else acks,
            linger_ms=5,
            request_timeout_ms=int(self.timeout * 1000),
            client_id="odradek-test-aiokafka",
        )
        if compression:
            kw["compression_type"] = compression
        if idempotent is not None:
            kw["enable_idempotence"] = bool(idempotent)

        async def go():
            p = AIOKafkaProducer(**kw)
            await p.start()
            try:
                futs = [
                    await p.send(
                        topic,
                        key=r.key,
                        value=r.value,
                        partition=r.partition,
                        timestamp_ms=r.timestamp,
                        headers=list(r.headers) or None,
                    )
                    for r in records
                ]
                mds = [await f for f in futs]
                return [(md.partition, md.offset) for md in mds]
            finally:
                await p.stop()

        return self._call(go())

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
        from aiokafka import AIOKafkaConsumer, TopicPartition

        out: list[Rec] = []
        policy = _reset_policy(self.name, reset, from_beginning, start_offset, group, partitions)

        async def go():
            c = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset=policy,
                session_timeout_ms=GROUP_SESSION_TIMEOUT_MS,
                rebalance_timeout_ms=GROUP_REBALANCE_TIMEOUT_MS,
                max_poll_interval_ms=max(GROUP_REBALANCE_TIMEOUT_MS, 10000),
                heartbeat_interval_ms=2000,
                request_timeout_ms=int(max(self.timeout, 31) * 1000),
                client_id="odradek-test-aiokafka",
                **({"isolation_level": self.isolation} if self.isolation else {}),
            )
            await c.start()
            try:
                parts = partitions
                if group is not None and parts is None:
                    c.subscribe([topic])
                else:
                    if parts is None:
                        ps = (
                            await c.partitions_for_topic(topic)
                            if asyncio.iscoroutinefunction(c.partitions_for_topic)
                            else c.partitions_for_topic(topic)
                        )
                        if not ps:
                            await c._client.force_metadata_update()
                            ps = c.partitions_for_topic(topic)
                        if not ps:
                            raise ClientError(self.name, "UnknownTopicOrPartition", topic)
                        parts = sorted(ps)
                    tps = [TopicPartition(topic, p) for p in parts]
                    c.assign(tps)
                    if start_offset is not None:
                        for tp in tps:
                            c.seek(tp, start_offset)
                    elif from_beginning:
                        await c.seek_to_beginning(*tps)
                    else:
                        await c.seek_to_end(*tps)
                deadline = time.monotonic() + timeout
                while len(out) < expected and time.monotonic() < deadline:
                    left = deadline - time.monotonic()
                    batch = await c.getmany(
                        timeout_ms=int(max(10, min(500, left * 1000))), max_records=expected - len(out)
                    )
                    for tp in sorted(batch, key=lambda t: t.partition):
                        for m in batch[tp]:
                            out.append(
                                Rec(
                                    m.key,
                                    m.value,
                                    [(k, v) for k, v in (m.headers or [])],
                                    m.partition,
                                    m.offset,
                                    m.timestamp,
                                )
                            )
                if group is not None and out:
                    await c.commit()
            finally:
                await c.stop()

        self.timeout, saved = max(self.timeout, timeout), self.timeout
        try:
            self._call(go())
        finally:
            self.timeout = saved
        return out

    def offsets_for_times(self, topic, ts):
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go():
            c = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                enable_auto_commit=False,
                request_timeout_ms=int(max(self.timeout, 31) * 1000),
            )
            await c.start()
            try:
                await c._client.force_metadata_update()
                ps = c.partitions_for_topic(topic) or set()
                res = await c.offsets_for_times({TopicPartition(topic, p): ts for p in ps})
                return {tp.partition: (v.offset if v is not None else None) for tp, v in res.items()}
            finally:
                await c.stop()

        return self._call(go())


# --------------------------------------------------------------------------- registry

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
