"""Partitioners. The default one places keyed records exactly where the Java client does.

Java: ``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions`` over the *serialized*
key, over all partitions of the topic (available or not). Records without a key stick to
one partition until ``batch.size`` bytes went there, then move to another available one
(KIP-794's uniform sticky partitioner, simplified: no load-based weighting).
"""

from __future__ import annotations

import random
from functools import lru_cache


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like Java's."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    i = 0
    frm = int.from_bytes
    while i < n4:
        k = frm(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
        i += 4
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def _positive_murmur2(key: bytes) -> int:
    return murmur2(key) & 0x7FFFFFFF


class DefaultPartitioner:
    """Java's built-in partitioner: murmur2 for keys, sticky for null keys.

    Call signature for every partitioner: ``partition(topic, key_bytes, all_partitions,
    available_partitions) -> int`` (partition lists are sorted ints).
    """

    def __init__(self, batch_size: int = 16384) -> None:
        self.batch_size = batch_size
        self._sticky: dict[str, list] = {}  # topic -> [partition, bytes since switch]

    def partition(self, topic: str, key: bytes | None, all_partitions, available) -> int:
        if key is not None:
            return _positive_murmur2(bytes(key)) % len(all_partitions)
        st = self._sticky.get(topic)
        if st is None or st[0] not in all_partitions:
            return self._switch(topic, available or all_partitions, None)
        return st[0]

    def on_append(self, topic: str, partition: int, size: int) -> None:
        """Count bytes appended to a null-key sticky partition; move on after batch.size."""
        st = self._sticky.get(topic)
        if st is not None and st[0] == partition:
            st[1] += size
            if st[1] >= self.batch_size:
                st[1] = 0
                st[0] = -1  # re-pick on next record

    def _switch(self, topic: str, candidates, previous) -> int:
        cands = list(candidates)
        if len(cands) > 1 and previous in cands:
            cands.remove(previous)
        p = random.choice(cands)
        self._sticky[topic] = [p, 0]
        return p


class RoundRobinPartitioner:
    """Every record (keyed or not) to the next available partition."""

    def __init__(self, batch_size: int = 16384) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic, key, all_partitions, available) -> int:
        parts = available or all_partitions
        i = self._next.get(topic, 0)
        self._next[topic] = i + 1
        return parts[i % len(parts)]

    def on_append(self, topic, partition, size) -> None:
        pass


def make_partitioner(spec, batch_size: int):
    if spec is None or spec == "default" or spec == "murmur2":
        return DefaultPartitioner(batch_size)
    if spec == "round_robin":
        return RoundRobinPartitioner(batch_size)
    if callable(spec) and not hasattr(spec, "partition"):
        return _CallablePartitioner(spec)
    return spec


class _CallablePartitioner:
    def __init__(self, fn) -> None:
        self.fn = fn

    def partition(self, topic, key, all_partitions, available) -> int:
        return self.fn(key, all_partitions, available)

    def on_append(self, topic, partition, size) -> None:
        pass
