"""Configuration with the Java client's names (``bootstrap.servers``, ``linger.ms`` ...).

Every client takes a dict of those names and/or keyword arguments with dots written as
underscores (``linger_ms=5``). Unknown names are an error, so typos do not pass silently.
"""

from __future__ import annotations

from typing import Any

COMMON: dict[str, Any] = {
    "bootstrap.servers": "localhost:9092",
    "client.id": "odradek-python",
    "request.timeout.ms": 30000,
    "socket.connection.setup.timeout.ms": 10000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 50,
    "metadata.max.age.ms": 300000,
    "allow.auto.create.topics": True,
    "default.api.timeout.ms": 60000,
    # PLAINTEXT, SSL, SASL_PLAINTEXT (or SASL_SSL); the ssl.* settings as the Java client's (client/tls.py)
    "security.protocol": "PLAINTEXT",
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.key.password": None,
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.certificates": None,
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.protocol": "TLSv1.3",
    "ssl.cipher.suites": None,
    "ssl.endpoint.identification.algorithm": "https",
    # SASL (client/sasl.py): the Java client's names, and librdkafka's sasl.username/password
    "sasl.mechanism": "GSSAPI",
    "sasl.jaas.config": None,
    "sasl.username": None,
    "sasl.password": None,
}

PRODUCER: dict[str, Any] = {
    **COMMON,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 16384,
    "buffer.memory": 32 * 1024 * 1024,
    "max.block.ms": 60000,
    "max.request.size": 1048576,
    "compression.type": "none",
    "enable.idempotence": True,
    "delivery.timeout.ms": 120000,
    "retries": 2147483647,
    "max.in.flight.requests.per.connection": 5,
    "key.serializer": None,
    "value.serializer": None,
    "partitioner": None,
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
}

CONSUMER: dict[str, Any] = {
    **COMMON,
    "group.id": None,
    "group.instance.id": None,
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "auto.offset.reset": "latest",
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 52428800,
    "fetch.max.wait.ms": 500,
    "max.partition.fetch.bytes": 1048576,
    "max.poll.records": 500,
    "max.poll.interval.ms": 300000,
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "partition.assignment.strategy": ("range", "cooperative-sticky"),
    "isolation.level": "read_uncommitted",
    "check.crcs": True,
    "exclude.internal.topics": True,
    "key.deserializer": None,
    "value.deserializer": None,
    "client.rack": None,
}

ADMIN: dict[str, Any] = dict(COMMON)


def make_config(defaults: dict[str, Any], config: dict[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    merged = dict(config or {})
    for k, v in kwargs.items():
        merged[k.replace("_", ".")] = v
    for k, v in merged.items():
        if k not in defaults:
            raise ValueError(f"unknown configuration {k!r}")
        out[k] = v
    servers = out["bootstrap.servers"]
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",") if s.strip()]
    out["bootstrap.servers"] = list(servers)
    return out


def parse_hostport(s: str, default_port: int = 9092) -> tuple[str, int]:
    s = s.strip()
    if "://" in s:
        s = s.split("://", 1)[1]
    if s.startswith("["):
        host, _, rest = s[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = s.rpartition(":")
    if not sep:
        return s, default_port
    return host, int(port)
