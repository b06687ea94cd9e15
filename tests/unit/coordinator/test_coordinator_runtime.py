"""The coordinator runtime (coordinator/runtime.py) over its partitions seam, with no broker:
an in-memory log per partition whose appends commit when the test says, whose reads can be
held or fail, and a shard that records what it is told.

Election and resignation races, loading to the log end, the write queue per partition,
commit-then-reply, failed writes and loads, epoch validity and timers."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from typing import Any

import pytest

from odradek.coordinator import runtime as rt
from odradek.coordinator.runtime import CoordinatorResult, CoordinatorRuntime, ShardState, Timer
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.errors import error_class
from odradek.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)

TOPIC = "__test_coordinator"
Rec = tuple[bytes, bytes | None]


class MemoryPartitions:
    """`CoordinatorPartitions` over in-memory logs. With `hold`, an append is in the log at
    once but committed only when `commit()` says so; `fail` makes the next appends raise;
    `reads_open` (a threading.Event) holds the load's reads, `read_error` fails them."""

    def __init__(self) -> None:
        self.logs: dict[int, list[bytes]] = {}
        self.hold = False
        self._held: list[asyncio.Future[None]] = []
        self.fail: list[BaseException] = []
        self.reads_open = threading.Event()
        self.reads_open.set()
        self.read_error: BaseException | None = None
        self.reads = 0

    def end(self, partition: int) -> int:
        batches = self.logs.get(partition, [])
        return next(iter_batches(batches[-1])).next_offset if batches else 0

    def put(self, partition: int, batch: bytes) -> int:
        """Append a batch as is, its base offset set to the log end: returns that offset."""
        base = self.end(partition)
        buf = bytearray(batch)
        struct.pack_into(">q", buf, 0, base)
        self.logs.setdefault(partition, []).append(bytes(buf))
        return base

    def records(self, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of every data record in the log."""
        out = []
        for b in self.logs.get(partition, []):
            h = next(iter_batches(b))
            if not h.is_control:
                out.extend((r.offset, r.key, r.value) for r in decode_records(b, 0))
        return out

    async def append_committed(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> int:
        assert topic == TOPIC
        if self.fail:
            raise self.fail.pop(0)
        base = self.put(partition, batch)
        if self.hold:
            fut = asyncio.get_running_loop().create_future()
            self._held.append(fut)
            await fut
        return base

    def commit(self, n: int = 1) -> None:
        """The oldest `n` held appends are committed."""
        for _ in range(n):
            self._held.pop(0).set_result(None)

    @property
    def held(self) -> int:
        return len(self._held)

    def read_log_bytes(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        self.reads += 1
        assert self.reads_open.wait(10)
        if self.read_error is not None:
            raise self.read_error
        out = b""
        for b in self.logs.get(partition, []):
            h = next(iter_batches(b))
            if h.next_offset > offset and (not out or len(out) + len(b) <= max_bytes):
                out += b
        return out, self.end(partition)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return 0

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.end(partition)


class RecordingShard:
    """A shard that records what the runtime tells it; `put` is its one operation."""

    def __init__(self) -> None:
        self.replayed: list[tuple[int, int, bytes, bytes | None]] = []
        self.ended: list[tuple[int, bool]] = []
        self.loaded_at: int | None = None
        self.unloaded = False
        self.waiting: list[Any] = []
        self.timer: Timer[CoordinatorResult[Rec]] = Timer()

    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        if key == b"unreadable":
            raise rt.RecordFormatError("cannot read it")
        self.replayed.append((offset, producer_id, key, value))

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        self.ended.append((producer_id, commit))

    def on_loaded(self, now: int) -> None:
        self.loaded_at = now

    def on_unloaded(self) -> list[tuple[Any, Any]]:
        self.unloaded = True
        return [(token, "gone") for token in self.waiting]

    def next_deadline(self) -> int | None:
        return self.timer.next_deadline()

    def expire(self, now: int) -> list[CoordinatorResult[Rec]]:
        return self.timer.expire(now)

    def put(self, key: bytes, *, token: Any, now: int, then: Any = None) -> CoordinatorResult[Rec]:
        res: CoordinatorResult[Rec] = CoordinatorResult([(key, b"v")], then=then)
        res.reply(token, f"put {key.decode()}")
        return res


def runtime(parts: MemoryPartitions, **kw: Any) -> CoordinatorRuntime[RecordingShard, Rec]:
    kw.setdefault("clock", lambda: 1000)
    return CoordinatorRuntime(TOPIC, 4, parts, RecordingShard, lambda r: r, commit_timeout_ms=100, **kw)


def batch(*keys: bytes, producer_id: int = -1) -> bytes:
    return build_batch(
        [Record(i, 1, k, b"x", ()) for i, k in enumerate(keys)],
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=producer_id >= 0,
    )


def marker(producer_id: int, control: int) -> bytes:
    return build_control_batch(control, producer_id=producer_id, producer_epoch=0, timestamp=1)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# =========================================================================== loading


def test_load_replays_to_the_log_end_over_several_reads_and_then_serves(monkeypatch):
    monkeypatch.setattr(rt, "LOAD_READ_BYTES", 1)  # one batch a read
    parts = MemoryPartitions()
    parts.put(1, batch(b"a", b"b"))
    parts.put(1, batch(b"t1", producer_id=7))
    parts.put(1, marker(7, CONTROL_COMMIT))
    parts.put(1, batch(b"unreadable", b"c"))
    parts.put(1, marker(8, CONTROL_ABORT))

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 1, 3)
        assert r.error(1) == E.coordinator_load_in_progress
        parts.put(1, batch(b"d"))  # appended after the load began: still before the log end it reaches
        await r.wait_loaded()
        shard = r.shards[1]
        assert [(o, p, k) for o, p, k, _ in shard.replayed] == [
            (0, -1, b"a"),
            (1, -1, b"b"),
            (2, 7, b"t1"),  # a transactional batch: replayed with its producer id
            (5, -1, b"c"),  # (the unreadable record at 4 skipped)
            (7, -1, b"d"),
        ]
        assert shard.ended == [(7, True), (8, False)]
        assert shard.loaded_at == 1000 and r.error(1) == 0
        assert parts.reads >= 6  # one batch per read: the runtime kept reading to the end
        await r.stop()

    run(main())


def test_an_empty_partition_serves_at_once_and_others_answer_not_coordinator():
    async def main():
        r = runtime(MemoryPartitions())
        assert r.error(0) == E.coordinator_not_available  # not started
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        r.on_elected("__another_topic", 1, 1)
        assert r.error(0) == 0 and r.shards[0].loaded_at == 1000
        assert r.error(1) == E.not_coordinator
        await r.stop()
        assert r.error(0) == E.coordinator_not_available and r.shards == {}

    run(main())


def test_a_resignation_while_loading_drops_the_load():
    parts = MemoryPartitions()
    parts.put(2, batch(b"a"))
    parts.reads_open.clear()

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 2, 5)
        await asyncio.sleep(0.05)  # the load's read is waiting in its thread
        first = r.shards[2]
        r.on_resigned(TOPIC, 2, 5)
        assert first.unloaded and r.error(2) == E.not_coordinator
        parts.reads_open.set()
        await r.wait_loaded()
        assert first.loaded_at is None and r.context(2) is None  # the abandoned load activated nothing
        # elected again: a new shard, loaded from the start
        r.on_elected(TOPIC, 2, 6)
        await r.wait_loaded()
        assert r.shards[2] is not first and [k for _, _, k, _ in r.shards[2].replayed] == [b"a"]
        assert r.error(2) == 0
        await r.stop()

    run(main())


def test_a_reelection_while_loading_starts_over_at_the_new_epoch():
    parts = MemoryPartitions()
    parts.put(0, batch(b"a"))
    parts.reads_open.clear()

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        await asyncio.sleep(0.05)
        first = r.shards[0]
        r.on_elected(TOPIC, 0, 2)  # without a resignation in between
        assert first.unloaded and r.epoch(0) == 2
        parts.reads_open.set()
        await r.wait_loaded()
        second = r.shards[0]
        assert first.loaded_at is None and second.loaded_at is not None
        assert [k for _, _, k, _ in second.replayed] == [b"a"] and r.error(0) == 0
        await r.stop()

    run(main())


def test_an_election_at_an_older_or_the_same_epoch_is_ignored_and_so_is_a_stale_resignation():
    async def main():
        r = runtime(MemoryPartitions())
        await r.start()
        r.on_elected(TOPIC, 0, 5)
        shard = r.shards[0]
        r.on_elected(TOPIC, 0, 5)
        r.on_elected(TOPIC, 0, 4)
        assert r.shards[0] is shard and r.epoch(0) == 5 and not shard.unloaded
        r.on_resigned(TOPIC, 0, 4)  # of an older term: not this shard's
        assert r.shards[0] is shard and not shard.unloaded
        r.on_elected(TOPIC, 0, 6)  # a newer term: a new shard
        assert r.shards[0] is not shard and shard.unloaded and r.epoch(0) == 6
        r.on_resigned(TOPIC, 0, 6)
        assert r.context(0) is None
        await r.stop()

    run(main())


def test_a_failed_load_is_not_served_until_elected_again():
    parts = MemoryPartitions()
    parts.put(3, batch(b"a"))
    parts.read_error = OSError("disk gone")

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 3, 1)
        await r.wait_loaded()
        assert r.context(3).state is ShardState.FAILED  # type: ignore[union-attr]
        assert r.error(3) == E.not_coordinator and r.shards[3].loaded_at is None
        assert not r.complete_transaction(3, 7, True)
        parts.read_error = None
        r.on_elected(TOPIC, 3, 2)
        await r.wait_loaded()
        assert r.error(3) == 0 and [k for _, _, k, _ in r.shards[3].replayed] == [b"a"]
        await r.stop()

    run(main())


def test_a_transaction_completed_while_loading_is_applied_once_loaded():
    parts = MemoryPartitions()
    parts.put(0, batch(b"t", producer_id=9))
    parts.reads_open.clear()

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        assert r.complete_transaction(0, 9, True)  # the marker was written after the load's read
        assert r.shards[0].ended == []
        parts.reads_open.set()
        await r.wait_loaded()
        assert r.shards[0].ended == [(9, True)]
        assert r.complete_transaction(0, 9, False) and r.shards[0].ended == [(9, True), (9, False)]
        assert not r.complete_transaction(1, 9, True)  # no shard of that partition here
        await r.stop()

    run(main())


# =========================================================================== writing


def test_writes_of_a_partition_are_appended_in_order_and_answered_once_committed():
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        for p in (0, 1):
            r.on_elected(TOPIC, p, 1)
        ctx0, ctx1 = r.context(0), r.context(1)
        assert ctx0 is not None and ctx1 is not None
        answers = [
            asyncio.ensure_future(r.run(ctx0, lambda t, now, k=k: ctx0.shard.put(k, token=t, now=now)))
            for k in (b"a", b"b", b"c")
        ]
        other = asyncio.ensure_future(r.run(ctx1, lambda t, now: ctx1.shard.put(b"z", token=t, now=now)))
        await settle()
        # one write at a time per partition: "b" waits for "a"'s commit; partition 1 does not
        assert [k for _, k, _ in parts.records(0)] == [b"a"] and [k for _, k, _ in parts.records(1)] == [b"z"]
        assert not any(a.done() for a in answers) and not other.done()  # nothing answered before its commit
        parts.commit()  # "a"
        await settle()
        assert answers[0].result() == "put a" and not answers[1].done()
        assert [k for _, k, _ in parts.records(0)] == [b"a", b"b"]
        parts.commit(2)  # "z", "b"
        await settle()
        parts.commit()  # "c"
        await settle()
        assert [a.result() for a in answers] == ["put a", "put b", "put c"] and other.result() == "put z"
        assert [(o, k) for o, k, _ in parts.records(0)] == [(0, b"a"), (1, b"b"), (2, b"c")]
        await r.stop()

    run(main())


def test_the_continuation_runs_with_the_outcome_and_the_base_offset_and_may_write_more():
    parts = MemoryPartitions()

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        ctx = r.context(0)
        assert ctx is not None
        seen = []

        def then(error: int, now: int) -> CoordinatorResult[Rec]:
            seen.append((error, first.base_offset))
            return CoordinatorResult([(b"second", None)])

        first = ctx.shard.put(b"first", token=None, now=0, then=then)
        r.submit(ctx, first)
        await settle()
        assert seen == [(0, 0)]
        assert [(o, k, v) for o, k, v in parts.records(0)] == [(0, b"first", b"v"), (1, b"second", None)]
        # an operation with nothing to write is answered at once
        assert await r.run(ctx, lambda t, now: CoordinatorResult(replies=[(t, "nothing")])) == "nothing"
        await r.stop()

    run(main())


def test_a_failed_write_completes_with_its_error_and_the_next_one_is_written():
    parts = MemoryPartitions()
    parts.fail = [error_class(E.not_enough_replicas)("ISR too small"), RuntimeError("a bug")]

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        results = await asyncio.gather(r.append(0, 1, [(b"a", b"1")]), r.append(0, 1, [(b"b", b"2")]))
        assert results == [E.not_enough_replicas, E.unknown_server_error]
        assert await r.append(0, 1, [(b"c", b"3")]) == 0
        assert [k for _, k, _ in parts.records(0)] == [b"c"]
        await r.stop()

    run(main())


def test_writes_of_a_shard_that_moved_are_not_appended_or_not_acknowledged():
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        in_flight = asyncio.ensure_future(r.append(0, 1, [(b"a", b"1")]))
        queued = asyncio.ensure_future(r.append(0, 1, [(b"b", b"2")]))
        await settle()
        assert parts.held == 1
        r.on_resigned(TOPIC, 0, 1)
        r.on_elected(TOPIC, 0, 2)  # elected again: the epoch-1 writes belong to the old shard
        parts.commit()
        await settle()
        assert parts.held == 0 and queued.done() and in_flight.done()
        assert in_flight.result() == E.not_coordinator  # appended, but its shard is gone
        assert queued.result() == E.not_coordinator  # never appended
        assert [k for _, k, _ in parts.records(0)] == [b"a"]
        assert await r.append(0, 1, [(b"c", b"3")]) == E.not_coordinator  # an old epoch
        await r.stop()

    run(main())


def test_an_unloaded_shard_answers_what_waits_on_it_and_stop_ends_queued_writes():
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        ctx = r.context(0)
        assert ctx is not None
        waiting = asyncio.get_running_loop().create_future()
        ctx.shard.waiting.append(waiting)
        in_flight = asyncio.ensure_future(r.append(0, 1, [(b"a", b"1")]))
        queued = asyncio.ensure_future(r.append(0, 1, [(b"b", b"2")]))
        await settle()
        stopping = asyncio.ensure_future(r.stop())
        await settle()
        parts.commit()
        await stopping
        assert waiting.result() == "gone"
        assert await in_flight == E.not_coordinator and await queued == E.not_coordinator
        assert [k for _, k, _ in parts.records(0)] == [b"a"]

    run(main())


# =========================================================================== timers


def test_timer_runs_due_operations_in_deadline_order_and_honours_replace_and_cancel():
    t: Timer[str] = Timer()
    t.schedule("a", 30, lambda now: f"a@{now}")
    t.schedule("b", 10, lambda now: f"b@{now}")
    t.schedule("c", 20, lambda now: None)  # runs, produces nothing
    t.schedule("a", 15, lambda now: f"a2@{now}")  # replaces a's deadline and operation
    t.schedule(("g", 1), 12, lambda now: "g1")
    t.schedule(("g", 2), 12, lambda now: "g2")
    t.cancel_if(lambda k: isinstance(k, tuple) and k[1] == 2)
    t.schedule("d", 40, lambda now: "d")
    t.cancel("d")
    assert t.deadline("a") == 15 and t.deadline("d") is None
    assert t.next_deadline() == 10
    assert t.expire(9) == []
    assert t.expire(25) == ["b@25", "g1", "a2@25"]
    assert t.next_deadline() is None and t.expire(100) == []
    # an operation may schedule what is due at once: it runs in the same pass
    t.schedule("x", 5, lambda now: t.schedule("y", now, lambda n: "y") or "x")
    assert t.expire(5) == ["x", "y"]


def test_the_runtime_fires_the_earliest_deadline_of_its_loaded_shards():
    parts = MemoryPartitions()

    async def main():
        loop = asyncio.get_running_loop()
        r = runtime(parts, clock=lambda: int(loop.time() * 1000))
        await r.start()
        for p in (0, 1):
            r.on_elected(TOPIC, p, 1)
        now = r.clock()
        for p, delay in ((0, 60), (1, 20)):
            ctx = r.context(p)
            assert ctx is not None
            ctx.shard.timer.schedule(
                "t", now + delay, lambda at, p=p: CoordinatorResult([(f"fired {p}".encode(), None)])
            )
        r.submit(r.context(0), CoordinatorResult())  # type: ignore[arg-type]  # (re-arms the timer)
        started = time.monotonic()
        while not parts.records(0):
            assert time.monotonic() - started < 5
            await asyncio.sleep(0.005)
        assert [k for _, k, _ in parts.records(1)] == [b"fired 1"]
        assert [k for _, k, _ in parts.records(0)] == [b"fired 0"]
        assert time.monotonic() - started >= 0.05
        await r.stop()

    run(main())


def test_periodic_checks_run_until_the_runtime_stops():
    async def main():
        r = runtime(MemoryPartitions())
        await r.start()
        calls = []
        r.every(10, lambda: calls.append(1))
        r.every(10, lambda: 1 / 0)  # an error is logged; the check keeps its schedule
        await asyncio.sleep(0.1)
        await r.stop()
        n = len(calls)
        assert n >= 3
        await asyncio.sleep(0.05)
        assert len(calls) == n

    run(main())


@pytest.mark.parametrize("producer_id", [-1, 1000])
def test_a_write_is_one_batch_plain_or_transactional_as_kafkas_coordinators_write_it(producer_id):
    parts = MemoryPartitions()

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        ctx = r.context(0)
        assert ctx is not None
        res: CoordinatorResult[Rec] = CoordinatorResult(
            [(b"k1", b"v1"), (b"k2", None)], producer_id=producer_id, producer_epoch=3 if producer_id >= 0 else -1
        )
        r.submit(ctx, res)
        await settle()
        expected = build_batch(
            [Record(0, 1000, b"k1", b"v1", ()), Record(1, 1000, b"k2", None, ())],
            producer_id=producer_id,
            producer_epoch=3 if producer_id >= 0 else -1,
            base_sequence=0 if producer_id >= 0 else -1,
            is_transactional=producer_id >= 0,
        )
        assert parts.logs[0] == [expected]
        await r.stop()

    run(main())
