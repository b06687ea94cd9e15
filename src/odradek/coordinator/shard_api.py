"""What a coordinator's shards implement and return, sans-IO (Kafka's CoordinatorShard,
CoordinatorResult and CoordinatorTimer): the runtime (runtime.py) drives them. Re-exported by
runtime.py, where coordinators import them from."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

R = TypeVar("R")  # what a coordinator's records are before serialization
T = TypeVar("T")


class Settings(Protocol):
    """The broker's settings by Kafka name (broker/config.py's BrokerConfig): what each
    coordinator's config reads in its `from_broker`."""

    def __getitem__(self, name: str) -> Any: ...


# =========================================================================== results


@dataclass(slots=True)
class CoordinatorResult(Generic[R]):
    """What an operation produced (Kafka's CoordinatorResult): `records` to append to the
    shard's partition, `replies` `(token, answer)` to send once they are committed, and a
    continuation `then(error_code, now)` run after the append (0: committed), which may return
    more to write. A waiting request is an opaque token: the runtime passes an asyncio future,
    tests any object."""

    records: list[R] = field(default_factory=list)
    replies: list[tuple[Any, Any]] = field(default_factory=list)
    then: Callable[[int, int], CoordinatorResult[R] | None] | None = None
    # A transactional write (TxnOffsetCommit): the records go in one transactional batch of
    # this producer, base sequence 0 as Kafka's coordinators write it (-1: a plain batch).
    producer_id: int = -1
    producer_epoch: int = -1
    # Set by the runtime once appended, before `then` runs: the log offset of the first record.
    base_offset: int = -1

    def reply(self, token: Any, value: Any) -> None:
        if token is not None:
            self.replies.append((token, value))


# =========================================================================== timers


class Timer(Generic[T]):
    """Keyed deadlines of one shard (Kafka's CoordinatorTimer), sans-IO: `schedule(key, at, op)`
    replaces the key's deadline; `expire(now)` runs each due `op(now)` in deadline order and
    returns what they produced. The runtime arms one event-loop timer for the earliest
    deadline of all shards."""

    __slots__ = ("_ops", "_heap", "_seq")

    def __init__(self) -> None:
        self._ops: dict[Hashable, tuple[int, int, Callable[[int], T | None]]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def schedule(self, key: Hashable, at: int, op: Callable[[int], T | None]) -> None:
        self._seq += 1
        self._ops[key] = (at, self._seq, op)
        heapq.heappush(self._heap, (at, self._seq, key))

    def cancel(self, key: Hashable) -> None:
        self._ops.pop(key, None)

    def cancel_if(self, pred: Callable[[Any], bool]) -> None:
        for key in [k for k in self._ops if pred(k)]:
            del self._ops[key]

    def deadline(self, key: Hashable) -> int | None:
        entry = self._ops.get(key)
        return None if entry is None else entry[0]

    def next_deadline(self) -> int | None:
        while self._heap:
            at, seq, key = self._heap[0]
            entry = self._ops.get(key)
            if entry is not None and entry[1] == seq:
                return at
            heapq.heappop(self._heap)
        return None

    def expire(self, now: int) -> list[T]:
        """Run every deadline at or before `now` (those its operations set too)."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _at, seq, key = heapq.heappop(self._heap)
            entry = self._ops.get(key)
            if entry is None or entry[1] != seq:
                continue
            del self._ops[key]
            produced = entry[2](now)
            if produced is not None:
                out.append(produced)
        return out


# =========================================================================== shards


class Shard(Protocol[R]):
    """The state a coordinator keeps for one partition of its topic (Kafka's CoordinatorShard)."""

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        """Apply one record of the partition, at `offset`, of a transactional batch of
        `producer_id` (-1: a plain batch). Raises RecordFormatError for bytes it cannot read
        (the runtime logs and skips the record)."""
        ...

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT (`commit`) or ABORT marker is in the partition: read while
        loading, or written and committed since (the broker's WriteTxnMarkers)."""
        ...

    def on_loaded(self, now: int) -> None:
        """The partition is replayed to its end; operations follow."""
        ...

    def on_unloaded(self) -> list[tuple[Any, Any]]:
        """The shard is dropped: `(token, answer)` for whatever waits on it."""
        ...

    def next_deadline(self) -> int | None: ...

    def expire(self, now: int) -> Sequence[CoordinatorResult[R]]:
        """Run the deadlines due at `now`: what they produced, to write."""
        ...
