"""A fenced coordinator runtime (coordinator/runtime.py `fence` / `unfence`): what a broker cut
from ZooKeeper past its session does (broker/coordinator_fence.py decides when, issue 25).

Over an in-memory partitions seam: every append commits at once unless `hold`."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.coordinator.runtime import CoordinatorResult, CoordinatorRuntime
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.records import Record, build_batch, decode_records, iter_batches

TOPIC = "__test_coordinator"
Rec = tuple[bytes, bytes | None]


class Partitions:
    def __init__(self) -> None:
        self.logs: dict[int, list[bytes]] = {}
        self.hold = False
        self._waiting: list[asyncio.Future[None]] = []

    def end(self, partition: int) -> int:
        batches = self.logs.get(partition, [])
        return next(iter_batches(batches[-1])).next_offset if batches else 0

    def append_as_leader(self, topic: str, partition: int, leader_epoch: int, batch: bytes) -> tuple[int, int]:
        base = self.end(partition)
        buf = bytearray(batch)
        buf[0:8] = base.to_bytes(8, "big")
        self.logs.setdefault(partition, []).append(bytes(buf))
        return base, self.end(partition) - 1

    def keys(self, partition: int) -> list[bytes | None]:
        return [r.key for b in self.logs.get(partition, []) for r in decode_records(b, 0)]

    async def wait_for_commit(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None:
        if self.hold:
            fut = asyncio.get_running_loop().create_future()
            self._waiting.append(fut)
            await fut

    def read_log_bytes(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        return b"".join(self.logs.get(partition, [])), self.end(partition)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return 0

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.end(partition)

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.end(partition)  # what a load reads is committed (held appends are new writes)


class Shard:
    def __init__(self) -> None:
        self.replayed: list[bytes] = []
        self.loaded = False
        self.unloaded = False
        self.waiting: list[Any] = []

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        self.replayed.append(key)

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        pass

    def on_loaded(self, now: int) -> None:
        self.loaded = True

    def on_unloaded(self) -> list[tuple[Any, Any]]:
        self.unloaded = True
        return [(token, "gone") for token in self.waiting]

    def next_deadline(self) -> int | None:
        return None

    def expire(self, now: int) -> list[CoordinatorResult[Rec]]:
        return []


def runtime(parts: Partitions) -> CoordinatorRuntime[Shard, Rec]:
    return CoordinatorRuntime(TOPIC, 4, parts, Shard, lambda r: r, commit_timeout_ms=1000, clock=lambda: 1000)


def with_records(parts: Partitions, partition: int, *keys: bytes) -> None:
    parts.append_as_leader(TOPIC, partition, 0, build_batch([Record(i, 1, k, b"x", ()) for i, k in enumerate(keys)]))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_fenced_runtime_drops_its_shards_and_answers_not_coordinator():
    """Cut past its session, the broker may no longer lead what it believes it leads: what
    its shards hold (committed offsets) may be older than what a new coordinator has
    acknowledged, so nothing is answered from them."""
    parts = Partitions()
    with_records(parts, 0, b"a")

    async def main() -> None:
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 3)
        r.on_elected(TOPIC, 1, 1)  # empty: serves at once
        await r.wait_loaded()
        assert r.error(0) == 0 and r.error(1) == 0
        shard0, shard1 = r.shards[0], r.shards[1]
        waiter = asyncio.get_running_loop().create_future()
        shard0.waiting.append(waiter)  # a request waiting on the shard (a JoinGroup)
        parts.hold = True
        in_flight = asyncio.ensure_future(r.append(1, 1, [(b"w", b"1")]))  # a write waiting for its commit
        await settle()
        assert not in_flight.done()

        r.fence("its ZooKeeper session expired")

        assert shard0.unloaded and shard1.unloaded and r.shards == {}
        assert r.error(0) == E.not_coordinator and r.error(1) == E.not_coordinator
        assert r.lookup("any group")[0] == E.not_coordinator
        assert waiter.result() == "gone"
        assert await asyncio.wait_for(in_flight, 1) == E.not_coordinator
        # a write computed on a shard from before is not appended
        assert await r.append(0, 3, [(b"late", b"1")]) == E.not_coordinator
        assert parts.keys(0) == [b"a"]
        await r.stop()

    asyncio.run(main())


def test_leadership_is_followed_while_fenced_and_unfence_loads_what_is_led_then():
    parts = Partitions()
    with_records(parts, 0, b"a")
    with_records(parts, 2, b"b", b"c")

    async def main() -> None:
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 3)
        r.on_elected(TOPIC, 1, 1)
        await r.wait_loaded()
        r.fence("cut from ZooKeeper")
        # the metadata moves on meanwhile (the broker registered again and caught up)
        r.on_elected(TOPIC, 2, 7)  # led now: not loaded while fenced
        assert r.context(2) is None and r.error(2) == E.not_coordinator
        r.on_resigned(TOPIC, 0, 3)  # no longer led
        r.on_elected(TOPIC, 1, 2)  # led again at a newer epoch
        r.on_resigned(TOPIC, 1, 1)  # a stale resignation (of the older term): ignored
        r.fence("again")  # a second fence changes nothing
        assert r.shards == {}

        r.unfence()

        await r.wait_loaded()
        assert sorted(r.shards) == [1, 2] and r.epoch(1) == 2 and r.epoch(2) == 7
        assert r.shards[2].replayed == [b"b", b"c"] and r.shards[2].loaded  # loaded from the log
        assert r.error(0) == E.not_coordinator and r.error(1) == 0 and r.error(2) == 0
        assert await r.append(2, 7, [(b"d", b"1")]) == 0
        r.unfence()  # nothing to lift: the shards stay
        assert r.shards[2].replayed == [b"b", b"c"]
        await r.stop()

    asyncio.run(main())


def test_unfence_of_a_runtime_never_fenced_changes_nothing():
    async def main() -> None:
        r = runtime(Partitions())
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        shard = r.shards[0]
        r.unfence()
        assert r.shards[0] is shard and not shard.unloaded and r.error(0) == 0
        await r.stop()

    asyncio.run(main())
