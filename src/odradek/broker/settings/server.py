"""The broker's own settings: identity, listeners and ZooKeeper, its connections to other
brokers (broker/interbroker/channels.py), and operations (metrics, controlled shutdown,
leader rebalance); Kafka's ServerConfigs, ZkConfigs, ReplicationConfigs (connections)."""

from __future__ import annotations

import re

from odradek.broker.settings.setting import Setting, at_least, between, one_of
from odradek.storage.config import COMPRESSION_TYPES, GZIP_LEVELS, LZ4_LEVELS, ZSTD_LEVELS

S = Setting


def _listeners(v: list[str]) -> str | None:
    for item in v:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*://[^:/]*:\d+", item):
            return f"{item!r} is not of the form NAME://host:port"
    return None


# server basics
BASICS: tuple[Setting, ...] = (
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
        "Security protocol of each listener name, NAME:PROTOCOL (PLAINTEXT and SSL are served; docs/security.md).",
    ),
    S(
        "inter.broker.listener.name",
        "string",
        "",
        "The listener brokers reach each other on (replication, the controller); empty: the listener named "
        "by security.inter.broker.protocol (PLAINTEXT unless set), as in Kafka; when that is not set and no "
        "listener is named PLAINTEXT, the first listener (Kafka refuses to start).",
    ),
    S(
        "security.inter.broker.protocol",
        "string",
        "PLAINTEXT",
        "Kafka's older way to name the inter-broker listener: the listener of that name (PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL). Only one of it and inter.broker.listener.name may be set.",
        validate=one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
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
    S(
        "replica.high.watermark.checkpoint.interval.ms",
        "long",
        5000,
        "How often the high watermarks are written to each log directory's replication-offset-checkpoint.",
        validate=at_least(1),
    ),
)

# connections to other brokers
INTERBROKER: tuple[Setting, ...] = (
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
)

# operations
OPERATIONS: tuple[Setting, ...] = (
    S(
        "password.encoder.secret",
        "password",
        "",
        "The secret that encrypts dynamic password settings kept in the metadata (a listener's keystore "
        "password set with AlterConfigs), as Kafka's PasswordEncoder; without it such an update is refused.",
    ),
    S(
        "password.encoder.old.secret",
        "password",
        "",
        "The secret dynamic passwords were encrypted with before password.encoder.secret: they are decoded "
        "with it and encrypted again with the new secret when the broker starts.",
    ),
    S(
        "password.encoder.keyfactory.algorithm",
        "string",
        "",
        "The key derivation of password encoding (empty: PBKDF2WithHmacSHA512); PBKDF2WithHmacSHA1/224/256/384/512.",
    ),
    S(
        "password.encoder.cipher.algorithm",
        "string",
        "AES/CBC/PKCS5Padding",
        "The cipher of password encoding: AES/CBC/PKCS5Padding or AES/GCM/NoPadding.",
        validate=one_of("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"),
    ),
    S(
        "password.encoder.key.length",
        "int",
        128,
        "The key length, in bits, of password encoding (an AES key: 128, 192 or 256).",
        validate=at_least(8),
    ),
    S(
        "password.encoder.iterations",
        "int",
        4096,
        "The PBKDF2 iteration count of password encoding.",
        validate=at_least(1024),
    ),
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
        "zookeeper.max.in.flight.requests",
        "int",
        10,
        "ZooKeeper reads a broker's metadata cache keeps on their way at once (its start, a new topic).",
        validate=at_least(1),
    ),
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
