"""Replica assignment for new topics and partitions (Kafka's AdminUtils).

Partition p's first replica is broker (p + start) mod n; the other replicas follow at a
shift that grows by one every n partitions, so leaders and followers both spread evenly
over the brokers and no two replicas of a partition share a broker. When every broker has
a `broker.rack`, the brokers are first interleaved rack by rack and a replica is skipped
onto the next broker while its rack already holds one of the partition's replicas (and not
every rack does): a partition spans as many racks as it can. Some brokers with a rack and
some without is refused, as Kafka does.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


class AssignmentError(ValueError):
    pass


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    start_index: int = -1,
    rng: random.Random | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists for `partitions` partitions numbered from `first_partition`.

    `start_index` >= 0 fixes both the first broker and the initial shift (tests); -1
    chooses them at random as Kafka does."""
    ids = sorted(brokers)
    n = len(ids)
    if partitions < 1:
        raise AssignmentError("Number of partitions must be larger than 0.")
    if replication_factor < 1:
        raise AssignmentError("Replication factor must be larger than 0.")
    if replication_factor > n:
        raise AssignmentError(f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    pick = rng or random
    start = start_index if start_index >= 0 else pick.randrange(n)
    shift = start_index if start_index >= 0 else pick.randrange(n)
    out = []
    p = max(first_partition, 0)
    for _ in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out.append(tuple(replicas))
        p += 1
    return out


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers interleaved by rack: the first of each rack (racks in name order), then the
    second of each, ..."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    order = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        for brokers in order:
            if i < len(brokers):
                out.append(brokers[i])
        i += 1
    return out


def assign_replicas_rack_aware(
    racks: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    start_index: int = -1,
    rng: random.Random | None = None,
) -> list[tuple[int, ...]]:
    """Kafka's assignment over brokers that may have racks (broker -> rack or None)."""
    with_rack = {b: r for b, r in racks.items() if r}
    if not with_rack:
        return assign_replicas(
            list(racks),
            partitions,
            replication_factor,
            first_partition=first_partition,
            start_index=start_index,
            rng=rng,
        )
    if len(with_rack) != len(racks):
        missing = sorted(b for b in racks if not racks[b])
        raise AssignmentError(f"Not all brokers have rack information: brokers {missing} have none")
    brokers = rack_alternated(with_rack)
    n, n_racks = len(brokers), len(set(with_rack.values()))
    if partitions < 1:
        raise AssignmentError("Number of partitions must be larger than 0.")
    if replication_factor < 1:
        raise AssignmentError("Replication factor must be larger than 0.")
    if replication_factor > n:
        raise AssignmentError(f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    pick = rng or random
    start = start_index if start_index >= 0 else pick.randrange(n)
    shift = start_index if start_index >= 0 else pick.randrange(n)
    out = []
    p = max(first_partition, 0)
    for _ in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = brokers[first]
        replicas = [leader]
        used_racks, used = {with_rack[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                b = brokers[(first + 1 + (shift * n_racks + k) % (n - 1)) % n] if n > 1 else brokers[0]
                k += 1
                rack = with_rack[b]
                if (rack not in used_racks or len(used_racks) == n_racks) and (b not in used or len(used) == n):
                    replicas.append(b)
                    used_racks.add(rack)
                    used.add(b)
                    break
        out.append(tuple(replicas))
        p += 1
    return out
