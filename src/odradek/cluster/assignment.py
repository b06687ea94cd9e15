"""Replica assignment for new topics and partitions (Kafka's AdminUtils, without racks).

Partition p's first replica is broker (p + start) mod n; the other replicas follow at a
shift that grows by one every n partitions, so leaders and followers both spread evenly
over the brokers and no two replicas of a partition share a broker. Rack awareness comes
with cluster mode.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


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
