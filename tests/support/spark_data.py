"""Helpers for tests/spark: topics, producing, checksums."""

from __future__ import annotations

import hashlib


def make_topic(bootstrap: str, name: str, partitions: int = 2, configs: dict | None = None) -> None:
    from odradek.client import Admin

    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topic(name, partitions, -1, configs or {})


def produce(
    bootstrap: str, topic: str, n: int, partitions: int = 2, start: int = 0, headers: bool = False, size: int = 100
) -> list[tuple[bytes, bytes, int]]:
    """n records keyed k<i>, value v<i> padded to `size`; returns (key, value, partition)."""
    from odradek.client import Producer

    out = []
    with Producer(bootstrap_servers=bootstrap, linger_ms=10, batch_size=256 * 1024) as p:
        futs = []
        for i in range(start, start + n):
            k = f"k{i}".encode()
            v = f"v{i}".encode().ljust(size, b".")
            part = i % partitions
            h = [("h", str(i).encode())] if headers and i % 2 == 0 else None
            futs.append(p.send(topic, v, key=k, partition=part, headers=h))
            out.append((k, v, part))
        p.flush()
        for f in futs:
            f.result(30)
    return out


def checksum(rows) -> str:
    """Order-independent digest over (key, value, partition, offset)."""
    h = 0
    for k, v, part, off in rows:
        d = hashlib.blake2b(b"%s|%s|%d|%d" % (k or b"", v or b"", part, off), digest_size=8).digest()
        h ^= int.from_bytes(d, "big")
    return f"{h:016x}"
