"""Every broker setting, declared once, with Kafka's names and defaults.

A setting is a `Setting(name, type, default, doc, validate=..., topic_name=..., dynamic=...,
planned=...)`; the CLI's `--override key=value`, the properties file, `odradek config` and the
configuration reference (docs/configuration.md) all derive from SETTINGS.
Unknown or invalid settings stop startup with a message naming them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from odradek.storage.config import COMPRESSION_TYPES, GZIP_LEVELS, LZ4_LEVELS, ZSTD_LEVELS

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigError(ValueError):
    pass


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError(f"expected true or false, got {v!r}")


def _int(v: str) -> int:
    return int(v.strip())


def _float(v: str) -> float:
    return float(v.strip())


def _str(v: str) -> str:
    return v.strip()


def _list(v: str) -> list[str]:
    return [p.strip() for p in v.split(",") if p.strip()]


TYPES: dict[str, Callable[[str], Any]] = {
    "bool": _bool,
    "int": _int,
    "long": _int,
    "double": _float,
    "string": _str,
    "list": _list,
    "password": _str,
}


@dataclass(frozen=True)
class Setting:
    """Name, type, default and doc by position; everything else by keyword (a flag passed by
    position reads as a bare `True` nobody can place)."""

    name: str
    type: str
    default: Any
    doc: str
    _: KW_ONLY
    validate: Callable[[Any], str | None] | None = None
    topic_name: str | None = None  # the per-topic override name, if any
    dynamic: bool = False  # may change at runtime via AlterConfigs
    # Declared (so Describe shows Kafka's default) but not implemented: what it waits for.
    # Setting it explicitly is refused: startup stops, AlterConfigs/CreateTopics answer INVALID_CONFIG.
    planned: str = ""

    def parse(self, raw: str) -> Any:
        """The value of an explicitly given setting; a planned one is refused (ConfigError)."""
        if self.planned:
            raise ConfigError(f"setting {self.name} is not implemented yet (it waits for {self.planned})")
        try:
            value = TYPES[self.type](raw)
        except ValueError as e:
            raise ConfigError(f"invalid value {raw!r} for setting {self.name}: {e}") from None
        if self.validate is not None:
            problem = self.validate(value)
            if problem:
                raise ConfigError(f"invalid value {raw!r} for setting {self.name}: {problem}")
        return value


def at_least(n: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _listeners(v: list[str]) -> str | None:
    for item in v:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*://[^:/]*:\d+", item):
            return f"{item!r} is not of the form NAME://host:port"
    return None


def _cleanup(v: list[str]) -> str | None:
    bad = [p for p in v if p not in ("delete", "compact")]
    return f"unknown cleanup policy {bad}" if bad or not v else None


S = Setting
SETTINGS: tuple[Setting, ...] = (
    # --- server basics
    S("node.id", "int", 1, "The broker's id.", validate=at_least(0)),
    S("broker.id", "int", -1, "Alias of node.id kept for ZooKeeper-era configs; -1 means use node.id."),
    S(
        "listeners",
        "list",
        ["PLAINTEXT://127.0.0.1:9092"],
        "Addresses to listen on, NAME://host:port, comma separated.",
        validate=_listeners,
    ),
    S(
        "advertised.listeners",
        "list",
        [],
        "Addresses given to clients in Metadata; defaults to listeners.",
        validate=_listeners,
    ),
    S(
        "listener.security.protocol.map",
        "list",
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        "Security protocol of each listener name, NAME:PROTOCOL (only PLAINTEXT is served yet).",
    ),
    S(
        "inter.broker.listener.name",
        "string",
        "",
        "The listener brokers reach each other on (replication, the controller); empty: the first.",
    ),
    S(
        "log.dirs",
        "list",
        ["/tmp/odradek-logs"],
        "Directories holding partition logs (one or more).",
        validate=lambda v: None if v else "needs at least one directory",
    ),
    S("log.dir", "string", "", "Single log directory; used when log.dirs is not set."),
    S("cluster.id", "string", "", "Cluster id; generated and stored in meta.properties when empty."),
    S("broker.rack", "string", "", "Rack of this broker, reported in Metadata."),
    S("zookeeper.connect", "string", "", "ZooKeeper connection string; empty runs the embedded single-node mode."),
    S("num.partitions", "int", 1, "Default partition count for auto-created topics.", validate=at_least(1)),
    S(
        "default.replication.factor",
        "int",
        1,
        "Default replication factor for auto-created topics.",
        validate=at_least(1),
    ),
    S("auto.create.topics.enable", "bool", True, "Create a topic when a client asks Metadata about it."),
    S("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    S(
        "message.max.bytes",
        "int",
        1048588,
        "Largest record batch a topic accepts (topic override: max.message.bytes).",
        validate=at_least(0),
        topic_name="max.message.bytes",
        dynamic=True,
    ),
    S(
        "socket.request.max.bytes",
        "int",
        104857600,
        "Largest request frame; a larger one closes the connection.",
        validate=at_least(1),
    ),
    S("socket.send.buffer.bytes", "int", 102400, "SO_SNDBUF of client sockets (-1: OS default)."),
    S("socket.receive.buffer.bytes", "int", 102400, "SO_RCVBUF of client sockets (-1: OS default)."),
    S("connections.max.idle.ms", "long", 600000, "Idle connections are closed after this long.", validate=at_least(1)),
    S(
        "queued.max.requests",
        "int",
        500,
        "Requests buffered per connection before reading pauses.",
        validate=at_least(1),
    ),
    S("replica.lag.time.max.ms", "long", 30000, "Followers behind longer than this leave the ISR."),
    S("num.replica.fetchers", "int", 1, "Fetchers per leader broker that copy its partitions.", validate=at_least(1)),
    S("replica.fetch.max.bytes", "int", 1048576, "Bytes a follower asks for per partition.", validate=at_least(0)),
    S(
        "replica.fetch.response.max.bytes",
        "int",
        10485760,
        "Bytes a follower asks for per Fetch response.",
        validate=at_least(0),
    ),
    S(
        "replica.fetch.wait.max.ms",
        "int",
        500,
        "How long a leader holds a follower's Fetch for data.",
        validate=at_least(0),
    ),
    S("replica.fetch.min.bytes", "int", 1, "Bytes a follower's Fetch waits for.", validate=at_least(1)),
    S("replica.fetch.backoff.ms", "int", 1000, "Pause of a follower after a fetch error.", validate=at_least(0)),
    # --- connections to other brokers (broker/interbroker/channels.py)
    S(
        "request.timeout.ms",
        "int",
        30000,
        "How long this broker waits for another broker's answer before closing that connection "
        "(a replica fetcher's Fetch: this plus replica.fetch.wait.max.ms).",
        validate=at_least(1),
    ),
    S(
        "socket.connection.setup.timeout.ms",
        "long",
        10000,
        "How long this broker waits to connect to another broker (TCP and the ApiVersions exchange).",
        validate=at_least(1),
    ),
    S(
        "min.insync.replicas",
        "int",
        1,
        "Minimum in-sync replicas for acks=all (topic override: min.insync.replicas).",
        validate=at_least(1),
        topic_name="min.insync.replicas",
        dynamic=True,
    ),
    S(
        "unclean.leader.election.enable",
        "bool",
        False,
        "Allow out-of-sync replicas to become leader.",
        topic_name="unclean.leader.election.enable",
        dynamic=True,
    ),
    S(
        "compression.type",
        "string",
        "producer",
        "Codec of the batches a topic stores: 'producer' keeps each producer batch's codec as sent; "
        "'uncompressed', 'gzip', 'snappy', 'lz4' or 'zstd' rewrites a batch in another codec with that one "
        "before appending it (decompress, compress; offsets, timestamps and producer fields kept).",
        validate=one_of(*COMPRESSION_TYPES),
        topic_name="compression.type",
        dynamic=True,
    ),
    S(
        "compression.gzip.level",
        "int",
        -1,
        "Level of broker-side gzip compression (compression.type=gzip): 1-9, or -1 for zlib's default (6).",
        validate=lambda v: (
            None if v == -1 or GZIP_LEVELS[0] <= v <= GZIP_LEVELS[1] else "must be -1 or between 1 and 9"
        ),
        topic_name="compression.gzip.level",
        dynamic=True,
    ),
    S(
        "compression.lz4.level",
        "int",
        9,
        "Level of broker-side lz4 compression (compression.type=lz4): 1-17.",
        validate=between(*LZ4_LEVELS),
        topic_name="compression.lz4.level",
        dynamic=True,
    ),
    S(
        "compression.zstd.level",
        "int",
        3,
        "Level of broker-side zstd compression (compression.type=zstd): -131072-22.",
        validate=between(*ZSTD_LEVELS),
        topic_name="compression.zstd.level",
        dynamic=True,
    ),
    # --- logs
    S(
        "log.segment.bytes",
        "int",
        1073741824,
        "Segment size before rolling.",
        validate=at_least(14),
        topic_name="segment.bytes",
        dynamic=True,
    ),
    S(
        "log.roll.ms",
        "long",
        604800000,
        "Time before a segment rolls (log.roll.hours is the coarse alias).",
        validate=at_least(1),
        topic_name="segment.ms",
        dynamic=True,
    ),
    S("log.roll.hours", "int", 168, "Hours before a segment rolls, when log.roll.ms is not set.", validate=at_least(1)),
    S(
        "log.roll.jitter.ms",
        "long",
        0,
        "Random jitter subtracted from the roll time.",
        validate=at_least(0),
        topic_name="segment.jitter.ms",
        dynamic=True,
    ),
    S(
        "log.index.size.max.bytes",
        "int",
        10485760,
        "Maximum size of an offset index.",
        validate=at_least(4),
        topic_name="segment.index.bytes",
        dynamic=True,
    ),
    S(
        "log.index.interval.bytes",
        "int",
        4096,
        "Bytes between offset index entries.",
        validate=at_least(0),
        topic_name="index.interval.bytes",
        dynamic=True,
    ),
    S(
        "log.retention.ms",
        "long",
        -1,
        "Time retention; -1 (default) falls back to log.retention.minutes/hours.",
        topic_name="retention.ms",
        dynamic=True,
    ),
    S("log.retention.minutes", "int", -1, "Time retention in minutes, when log.retention.ms is not set."),
    S("log.retention.hours", "int", 168, "Time retention in hours, when neither log.retention.ms nor .minutes is set."),
    S(
        "log.retention.bytes",
        "long",
        -1,
        "Size retention per partition; -1 means unlimited.",
        topic_name="retention.bytes",
        dynamic=True,
    ),
    S("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", validate=at_least(1)),
    S(
        "log.cleanup.policy",
        "list",
        ["delete"],
        "delete, compact, or both.",
        validate=_cleanup,
        topic_name="cleanup.policy",
        dynamic=True,
    ),
    S("log.cleaner.enable", "bool", True, "Run the log cleaner for compacted topics."),
    S(
        "log.cleaner.backoff.ms",
        "long",
        15000,
        "Sleep of the cleaner when nothing is cleanable.",
        validate=at_least(0),
        dynamic=True,
    ),
    S(
        "log.cleaner.dedupe.buffer.size",
        "long",
        134217728,
        "Memory budget of the cleaner's key map (24 bytes per key, as Kafka counts); "
        "dirty segments beyond it are cleaned in later passes.",
        validate=at_least(1),
        dynamic=True,
    ),
    S(
        "log.cleaner.io.buffer.load.factor",
        "double",
        0.9,
        "Fill factor of the cleaner's key map.",
        validate=between(0.01, 1),
        dynamic=True,
    ),
    S(
        "log.cleaner.delete.retention.ms",
        "long",
        86400000,
        "How long tombstones are kept.",
        validate=at_least(0),
        topic_name="delete.retention.ms",
        dynamic=True,
    ),
    S(
        "log.cleaner.min.cleanable.ratio",
        "double",
        0.5,
        "Dirty ratio needed to clean a log.",
        validate=between(0, 1),
        topic_name="min.cleanable.dirty.ratio",
        dynamic=True,
    ),
    S(
        "log.cleaner.min.compaction.lag.ms",
        "long",
        0,
        "Minimum age of a record before compaction.",
        validate=at_least(0),
        topic_name="min.compaction.lag.ms",
        dynamic=True,
    ),
    S(
        "log.cleaner.max.compaction.lag.ms",
        "long",
        LONG_MAX,
        "Maximum age before a record must be compactable.",
        validate=at_least(1),
        topic_name="max.compaction.lag.ms",
        dynamic=True,
    ),
    S(
        "log.flush.interval.messages",
        "long",
        LONG_MAX,
        "fsync after this many messages (topic: flush.messages).",
        validate=at_least(1),
        topic_name="flush.messages",
        dynamic=True,
    ),
    S(
        "log.flush.interval.ms",
        "long",
        -1,
        "fsync after this long (topic: flush.ms); -1 uses log.flush.scheduler.interval.ms.",
        topic_name="flush.ms",
        dynamic=True,
    ),
    S("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the flusher checks logs."),
    S(
        "log.flush.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often recovery points are checkpointed.",
        validate=at_least(0),
    ),
    S(
        "log.flush.start.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often log start offsets are checkpointed.",
        validate=at_least(0),
        planned="its own schedule; log start offsets are checkpointed as soon as they change",
    ),
    S(
        "log.segment.delete.delay.ms",
        "long",
        60000,
        "Delay before a deleted segment's files are removed.",
        validate=at_least(0),
        topic_name="file.delete.delay.ms",
        dynamic=True,
    ),
    S(
        "log.message.timestamp.type",
        "string",
        "CreateTime",
        "CreateTime or LogAppendTime.",
        validate=one_of("CreateTime", "LogAppendTime"),
        topic_name="message.timestamp.type",
        dynamic=True,
    ),
    S(
        "log.message.timestamp.before.max.ms",
        "long",
        LONG_MAX,
        "Reject records older than this relative to the broker clock.",
        validate=at_least(0),
        topic_name="message.timestamp.before.max.ms",
        dynamic=True,
    ),
    S(
        "log.message.timestamp.after.max.ms",
        "long",
        3600000,
        "Reject records further in the future than this.",
        validate=at_least(0),
        topic_name="message.timestamp.after.max.ms",
        dynamic=True,
    ),
    S(
        "log.preallocate",
        "bool",
        False,
        "Preallocate segment files.",
        topic_name="preallocate",
        dynamic=True,
        planned="segment file preallocation",
    ),
    S("num.recovery.threads.per.data.dir", "int", 1, "Threads recovering logs at startup.", validate=at_least(1)),
    # --- groups and offsets
    S("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", validate=at_least(1)),
    S(
        "offsets.topic.replication.factor",
        "int",
        3,
        "Replication factor of __consumer_offsets (capped at the live broker count).",
        validate=at_least(1),
    ),
    S("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", validate=at_least(1)),
    S(
        "offsets.retention.minutes",
        "int",
        10080,
        "Offsets of empty groups expire after this long.",
        validate=at_least(1),
    ),
    S(
        "offsets.retention.check.interval.ms",
        "long",
        600000,
        "How often expired offsets are removed.",
        validate=at_least(1),
    ),
    S(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        "Maximum wait for an offset commit to be durable.",
        validate=at_least(1),
    ),
    S("offset.metadata.max.bytes", "int", 4096, "Largest metadata string of a committed offset.", validate=at_least(0)),
    S(
        "group.initial.rebalance.delay.ms",
        "int",
        3000,
        "Wait for more members before the first rebalance of an empty group.",
        validate=at_least(0),
    ),
    S(
        "group.min.session.timeout.ms",
        "int",
        6000,
        "Smallest session timeout a member may ask for.",
        validate=at_least(0),
    ),
    S(
        "group.max.session.timeout.ms",
        "int",
        1800000,
        "Largest session timeout a member may ask for.",
        validate=at_least(0),
    ),
    S("group.max.size", "int", INT_MAX, "Largest number of members in a group.", validate=at_least(1)),
    # --- transactions and idempotence
    S(
        "transactional.id.expiration.ms",
        "int",
        604800000,
        "Transactional ids with no transaction for this long are removed from __transaction_state.",
        validate=at_least(1),
    ),
    S(
        "transaction.max.timeout.ms",
        "int",
        900000,
        "Largest transaction timeout a producer may ask for (larger: INVALID_TRANSACTION_TIMEOUT).",
        validate=at_least(1),
    ),
    S(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        10000,
        "How often the transaction coordinator aborts transactions older than their timeout.",
        validate=at_least(1),
    ),
    S(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        3600000,
        "How often the transaction coordinator removes expired transactional ids.",
        validate=at_least(1),
    ),
    S(
        "transaction.partition.verification.enable",
        "bool",
        True,
        "KIP-890: a partition leader verifies with the transaction coordinator that a partition was added to "
        "the producer's transaction before taking its first transactional batch there.",
    ),
    S("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", validate=at_least(1)),
    S(
        "transaction.state.log.replication.factor",
        "int",
        3,
        "Replication factor of __transaction_state (capped at the live broker count).",
        validate=at_least(1),
    ),
    S(
        "transaction.state.log.min.isr",
        "int",
        2,
        "min.insync.replicas of __transaction_state (capped at its replication factor).",
        validate=at_least(1),
    ),
    S(
        "transaction.state.log.segment.bytes",
        "int",
        104857600,
        "Segment size of __transaction_state.",
        validate=at_least(1),
    ),
    S(
        "producer.id.expiration.ms",
        "int",
        86400000,
        "Idle producer ids' state expires after this long.",
        validate=at_least(1),
    ),
    # --- fetch
    S("fetch.max.bytes", "int", 57671680, "Cap on the bytes a Fetch response carries.", validate=at_least(0)),
    S("max.incremental.fetch.session.cache.slots", "int", 1000, "Fetch sessions kept (KIP-227).", validate=at_least(0)),
    # --- operations
    S("metrics.listener", "string", "", "host:port for Prometheus metrics over HTTP; empty disables them."),
    S("controlled.shutdown.enable", "bool", True, "Move leadership away before shutting down (cluster mode)."),
    S(
        "controlled.shutdown.max.retries",
        "int",
        3,
        "Attempts of a controlled shutdown before giving up.",
        validate=at_least(0),
    ),
    S(
        "controlled.shutdown.retry.backoff.ms",
        "long",
        1000,
        "Pause between controlled-shutdown attempts (Kafka: 5000).",
        validate=at_least(0),
    ),
    S("zookeeper.session.timeout.ms", "int", 18000, "ZooKeeper session timeout.", validate=at_least(1)),
    S(
        "zookeeper.connection.timeout.ms",
        "int",
        18000,
        "How long a broker waits to connect to ZooKeeper at start.",
        validate=at_least(1),
    ),
    S(
        "auto.leader.rebalance.enable",
        "bool",
        True,
        "The controller moves leadership back to preferred replicas (cluster mode).",
    ),
    S(
        "leader.imbalance.check.interval.seconds",
        "long",
        300,
        "How often the controller checks for leaders away from their preferred replica.",
        validate=at_least(1),
    ),
    S(
        "leader.imbalance.per.broker.percentage",
        "int",
        10,
        "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.",
        validate=between(0, 100),
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_TOPIC_NAME: dict[str, Setting] = {s.topic_name: s for s in SETTINGS if s.topic_name}


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments, line continuations."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            out[line] = ""
            continue
        out[m.group(1)] = m.group(2)
    return out


class BrokerConfig:
    """The effective configuration: defaults, then the file, then overrides."""

    def __init__(self, raw: dict[str, str] | None = None, *, sources: dict[str, str] | None = None) -> None:
        raw = dict(raw or {})
        unknown = sorted(k for k in raw if k not in BY_NAME)
        if unknown:
            raise ConfigError(f"unknown setting{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
        self._values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
        self.sources: dict[str, str] = {s.name: "default" for s in SETTINGS}
        for k, v in raw.items():
            self._values[k] = BY_NAME[k].parse(v)
            self.sources[k] = (sources or {}).get(k, "override")
        self._derive(raw)
        # What the file and overrides made, under the dynamic layers (kept in the metadata:
        # every broker's, then this broker's own; `apply_dynamic` lays them over this).
        self._static: dict[str, Any] = dict(self._values)
        self._static_sources: dict[str, str] = dict(self.sources)
        self.dynamic_default: dict[str, Any] = {}
        self.dynamic_own: dict[str, Any] = {}

    def _derive(self, raw: dict[str, str]) -> None:
        v = self._values
        if "log.dirs" not in raw and v["log.dir"]:
            v["log.dirs"] = [v["log.dir"]]
            self.sources["log.dirs"] = self.sources["log.dir"]
        if v["broker.id"] >= 0 and "node.id" not in raw:
            v["node.id"] = v["broker.id"]
        if "log.roll.ms" not in raw and "log.roll.hours" in raw:
            v["log.roll.ms"] = v["log.roll.hours"] * 3600000
        if v["log.retention.ms"] == -1 and "log.retention.ms" not in raw:
            if v["log.retention.minutes"] != -1:
                v["log.retention.ms"] = v["log.retention.minutes"] * 60000
            else:
                v["log.retention.ms"] = v["log.retention.hours"] * 3600000
        if not v["advertised.listeners"]:
            v["advertised.listeners"] = list(v["listeners"])
        if v["log.flush.interval.ms"] == -1:
            v["log.flush.interval.ms"] = v["log.flush.scheduler.interval.ms"]

    @classmethod
    def load(cls, path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> BrokerConfig:
        raw: dict[str, str] = {}
        sources: dict[str, str] = {}
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    props = parse_properties(f.read())
            except OSError as e:
                raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
            raw.update(props)
            sources.update({k: f"file {path}" for k in props})
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} is not of the form key=value")
            k, _, v = item.partition("=")
            raw[k.strip()] = v
            sources[k.strip()] = "--override"
        return cls(raw, sources=sources)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def items(self):
        return self._values.items()

    def apply_dynamic(self, default: Mapping[str, str], own: Mapping[str, str]) -> list[str]:
        """Lay the dynamic settings kept in the metadata over the static ones: this broker's own
        (source "dynamic"), else every broker's (source "dynamic-default"), else the static
        value again. Names that are not dynamic settings or values that do not parse are
        skipped (another broker's version may know them). Returns the names that changed."""

        def parsed(layer: Mapping[str, str]) -> dict[str, Any]:
            out = {}
            for name, raw in layer.items():
                setting = BY_NAME.get(name)
                if setting is None or not setting.dynamic:
                    continue
                try:
                    out[name] = setting.parse(raw)
                except ConfigError:
                    continue
            return out

        new_default, new_own = parsed(default), parsed(own)
        changed = []
        for name in set(self.dynamic_default) | set(self.dynamic_own) | set(new_default) | set(new_own):
            if name in new_own:
                value, source = new_own[name], "dynamic"
            elif name in new_default:
                value, source = new_default[name], "dynamic-default"
            else:
                value, source = self._static[name], self._static_sources[name]
            if self._values[name] != value or self.sources[name] != source:
                changed.append(name)
            self._values[name], self.sources[name] = value, source
        self.dynamic_default, self.dynamic_own = new_default, new_own
        return sorted(changed)

    def layers(self, name: str) -> list[tuple[Any, str]]:
        """The values a setting has in each layer that holds one, most specific first: this
        broker's dynamic, every broker's dynamic, static (file or override), default."""
        out: list[tuple[Any, str]] = []
        if name in self.dynamic_own:
            out.append((self.dynamic_own[name], "dynamic"))
        if name in self.dynamic_default:
            out.append((self.dynamic_default[name], "dynamic-default"))
        if self._static_sources[name] != "default":
            out.append((self._static[name], self._static_sources[name]))
        out.append((BY_NAME[name].default, "default"))
        return out

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level values of every topic-level setting, as topic config strings."""
        out = {}
        for s in SETTINGS:
            if s.topic_name:
                v = self._values[s.name]
                out[s.topic_name] = (
                    ",".join(v) if isinstance(v, list) else (str(v).lower() if isinstance(v, bool) else str(v))
                )
        return out

    def security_protocol(self, listener: str) -> str:
        """A listener's security protocol (listener.security.protocol.map)."""
        for item in self._values["listener.security.protocol.map"]:
            name, _, protocol = item.partition(":")
            if name.strip() == listener:
                return protocol.strip()
        raise ConfigError(f"listener {listener} has no entry in listener.security.protocol.map")

    @property
    def inter_broker_listener(self) -> str:
        return self._values["inter.broker.listener.name"] or self.listeners[0][0]

    @property
    def listeners(self) -> list[tuple[str, str, int]]:
        return [_split_listener(x) for x in self._values["listeners"]]

    @property
    def advertised(self) -> list[tuple[str, str, int]]:
        return [_split_listener(x) for x in self._values["advertised.listeners"]]


def _split_listener(item: str) -> tuple[str, str, int]:
    name, _, rest = item.partition("://")
    host, _, port = rest.rpartition(":")
    return name, host, int(port)


def reference_markdown() -> str:
    """docs/configuration.md, generated from SETTINGS (see scripts/gen-docs.py)."""
    lines = [
        "# Broker configuration reference",
        "",
        "Generated from `src/odradek/broker/config.py` by `python scripts/gen-docs.py`; do not edit by hand.",
        "",
        "Settings use Apache Kafka's names and defaults. Give them in a `server.properties` file",
        "(`odradek broker --config FILE`) or one by one (`--override key=value`, repeatable; overrides win).",
        "An unknown or invalid setting stops startup with a message naming it. Settings marked *dynamic* can",
        "be changed at runtime with IncrementalAlterConfigs on the broker resource; a *topic override* is the",
        "per-topic name for CreateTopics / AlterConfigs.",
        "",
        "A setting whose status is *planned* is declared with Kafka's name and default (DescribeConfigs",
        "shows it) but not implemented yet: setting it explicitly (file, `--override`, AlterConfigs, a topic",
        "config) is refused with a message naming the setting and what it waits for.",
        "",
        "| setting | type | default | topic override | dynamic | status | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        default = (
            ",".join(s.default)
            if isinstance(s.default, list)
            else str(s.default).lower()
            if isinstance(s.default, bool)
            else str(s.default)
        )
        lines.append(
            f"| `{s.name}` | {s.type} | `{default}` | {('`' + s.topic_name + '`') if s.topic_name else ''} "
            f"| {'yes' if s.dynamic else ''} | {('planned: ' + s.planned) if s.planned else ''} | {s.doc} |"
        )
    return "\n".join(lines) + "\n"
