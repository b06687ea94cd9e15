"""The coordinator runtime (coordinator/runtime.py) over its partitions seam, with no broker:
an in-memory log per partition whose appends commit when the test says, whose reads can be
held or fail, and a shard that records what it is told.

Election and resignation races, loading to the log end, pipelined writes (appended at once,
answered in log order once committed), failed, timed-out and abandoned writes and loads,
epoch validity and timers."""

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
    """`CoordinatorPartitions` over in-memory logs. An append is in the log at once and, unless
    `hold`, committed at once too; with `hold` the high watermark passes it only when
    `commit()` says so. `fail` makes the next appends raise; `leader_epochs` (when set for a
    partition) refuses appends at another epoch; `reads_open` (a threading.Event) holds the
    load's reads, `read_error` fails them."""

    def __init__(self) -> None:
        self.logs: dict[int, list[bytes]] = {}
        self.hw: dict[int, int] = {}
        self.hold = False
        self._held: list[tuple[int, int]] = []  # (partition, end offset) of each held append, oldest first
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self.fail: list[BaseException] = []
        self.leader_epochs: dict[int, int] = {}
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

    def keys(self, partition: int) -> list[bytes | None]:
        return [k for _, k, _ in self.records(partition)]

    def append_as_leader(self, topic: str, partition: int, leader_epoch: int, batch: bytes) -> tuple[int, int]:
        assert topic == TOPIC
        if self.fail:
            raise self.fail.pop(0)
        expected = self.leader_epochs.get(partition, leader_epoch)
        if expected != leader_epoch:
            raise error_class(E.fenced_leader_epoch if leader_epoch < expected else E.unknown_leader_epoch)("epoch")
        base = self.put(partition, batch)
        end = self.end(partition)
        if self.hold:
            self._held.append((partition, end))
        else:
            self._advance(partition, end)
        return base, end - 1

    async def wait_for_commit(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None:
        assert topic == TOPIC
        if self.hw.get(partition, 0) > offset:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append((partition, offset, fut))
        try:
            await asyncio.wait_for(fut, timeout_ms / 1000)
        except TimeoutError:
            raise error_class(E.request_timed_out)("not committed in time") from None

    def _advance(self, partition: int, hw: int) -> None:
        self.hw[partition] = max(self.hw.get(partition, 0), hw)
        for entry in list(self._waiting):
            p, offset, fut = entry
            if fut.done() or (p == partition and offset < self.hw[partition]):
                self._waiting.remove(entry)
                if not fut.done():
                    fut.set_result(None)

    def commit(self, n: int = 1) -> None:
        """The high watermark passes the oldest `n` held appends."""
        for _ in range(n):
            self._advance(*self._held.pop(0))

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def waiting(self) -> int:
        """Waits for a commit in progress."""
        return sum(1 for _, _, fut in self._waiting if not fut.done())

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

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.hw.get(partition, 0)


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


def _key_of(r: CoordinatorRuntime[RecordingShard, Rec], partition: int) -> str:
    return next(k for k in (f"g{i}" for i in range(1000)) if r.partition_for(k) == partition)


def test_reads_wait_until_the_high_watermark_reaches_the_end_the_load_replayed():
    """Elected on a follower whose log holds records above its high watermark (the old leader
    appended them and died before every in-sync follower had them; simulator seed 12391):
    writes are served at once, but reads get COORDINATOR_LOAD_IN_PROGRESS, past the commit
    timeout too, until the high watermark reaches the end the load replayed."""
    parts = MemoryPartitions()
    parts.put(0, batch(b"a"))
    parts.put(0, batch(b"b", b"c"))  # appended by the old leader, not committed
    parts._advance(0, 1)

    async def main():
        r = runtime(parts)  # commit timeout 100 ms
        await r.start()
        key = _key_of(r, 0)
        r.on_elected(TOPIC, 0, 2)
        assert r.lookup_for_read(key) == (E.coordinator_load_in_progress, None)  # loading
        await r.wait_loaded()
        assert [k for _, _, k, _ in r.shards[0].replayed] == [b"a", b"b", b"c"]  # to the log end
        err, ctx = r.lookup(key)
        assert err == 0 and ctx is not None  # writes are served
        await asyncio.sleep(0.25)  # the wait for the tail's commit times out and starts again
        assert r.lookup_for_read(key) == (E.coordinator_load_in_progress, None)
        parts._advance(0, 2)  # b only: c is still above the high watermark
        await settle()
        assert r.lookup_for_read(key) == (E.coordinator_load_in_progress, None)
        parts._advance(0, 3)
        await settle()
        assert r.lookup_for_read(key) == (0, ctx)
        await r.stop()

    run(main())


def test_reads_are_served_at_once_when_what_was_loaded_is_committed_and_a_new_shard_waits_again():
    parts = MemoryPartitions()
    parts.put(1, batch(b"a"))
    parts._advance(1, 1)

    async def main():
        r = runtime(parts)
        await r.start()
        key = _key_of(r, 1)
        r.on_elected(TOPIC, 1, 1)
        await r.wait_loaded()
        err, ctx = r.lookup_for_read(key)
        assert err == 0 and ctx is not None
        r.on_resigned(TOPIC, 1, 1)
        parts.put(1, batch(b"b"))  # as a follower again: fetched, not committed here
        r.on_elected(TOPIC, 1, 3)
        await r.wait_loaded()
        assert r.lookup_for_read(key) == (E.coordinator_load_in_progress, None)
        assert r.lookup(key)[0] == 0
        parts._advance(1, 2)
        await settle()
        assert r.lookup_for_read(key)[0] == 0
        await r.stop()

    run(main())


def test_writes_are_pipelined_appended_at_once_in_order_and_answered_in_order_once_committed():
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
        # every write is in its log before any is committed: "b" did not wait for "a"'s commit
        assert [(o, k) for o, k, _ in parts.records(0)] == [(0, b"a"), (1, b"b"), (2, b"c")]
        assert parts.keys(1) == [b"z"] and parts.held == 4
        assert not any(a.done() for a in answers) and not other.done()  # nothing answered before its commit
        # one wait for a commit per partition at a time: the first write's
        assert parts.waiting == 2
        parts.commit()  # "a"
        await settle()
        assert answers[0].result() == "put a" and not answers[1].done() and not other.done()
        parts.commit(2)  # "b", "c"
        await settle()
        assert [a.result() for a in answers] == ["put a", "put b", "put c"] and not other.done()
        parts.commit()  # "z"
        await settle()
        assert other.result() == "put z"
        await r.stop()

    run(main())


def test_responses_follow_the_log_order_not_the_order_outcomes_are_known():
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        ctx = r.context(0)
        assert ctx is not None
        order: list[tuple[str, int]] = []

        def noting(name: str) -> Any:
            return lambda error, now: order.append((name, error))

        r.submit(ctx, ctx.shard.put(b"a", token=None, now=0, then=noting("a")))
        parts.fail = [error_class(E.not_enough_replicas)("ISR too small")]
        r.submit(ctx, ctx.shard.put(b"b", token=None, now=0, then=noting("b")))  # refused at once
        r.submit(ctx, ctx.shard.put(b"c", token=None, now=0, then=noting("c")))
        await settle()
        assert parts.keys(0) == [b"a", b"c"] and order == []  # "b"'s error waits for "a"
        parts.commit()
        await settle()
        assert order == [("a", 0), ("b", E.not_enough_replicas)]
        parts.commit()
        await settle()
        assert order == [("a", 0), ("b", E.not_enough_replicas), ("c", 0)]
        await r.stop()

    run(main())


def test_a_write_not_committed_in_time_times_out_and_those_after_it_wait_their_own_time():
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)  # commit_timeout_ms=100
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        first = asyncio.ensure_future(r.append(0, 1, [(b"a", b"1")]))
        await asyncio.sleep(0.06)
        second = asyncio.ensure_future(r.append(0, 1, [(b"b", b"2")]))
        assert await asyncio.wait_for(first, 1) == E.request_timed_out
        assert not second.done()  # appended 60 ms later: its own 100 ms are not over
        parts.commit(2)  # both commit after all: the second is answered, the first was already
        assert await asyncio.wait_for(second, 1) == 0
        assert parts.keys(0) == [b"a", b"b"]  # a timed-out write stays in the log, as in Kafka
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
        # a continuation that raises is logged; the writes after it are still answered
        ctx = r.context(0)
        assert ctx is not None
        r.submit(ctx, CoordinatorResult([(b"d", None)], then=lambda error, now: 1 / 0))  # type: ignore[arg-type,return-value]
        assert await r.append(0, 1, [(b"e", b"5")]) == 0
        await r.stop()

    run(main())


def test_a_lost_partition_fails_its_waiting_writes_at_once_and_later_ones_are_not_appended():
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        ctx = r.context(0)
        assert ctx is not None
        order: list[str] = []
        waiting = asyncio.get_running_loop().create_future()
        waiting.add_done_callback(lambda f: order.append(f"shard's waiter: {f.result()}"))
        ctx.shard.waiting.append(waiting)
        for k in (b"a", b"b", b"c"):
            if k == b"c":
                parts.fail = [error_class(E.not_enough_replicas)("ISR too small")]
            r.submit(
                ctx,
                ctx.shard.put(
                    k, token=None, now=0, then=lambda e, now, k=k: order.append(f"{k!r}: {e} {waiting.done()}")
                ),
            )
        await settle()
        assert parts.keys(0) == [b"a", b"b"] and parts.waiting == 1
        r.on_resigned(TOPIC, 0, 1)  # the leader lost the partition: nothing will commit here
        assert parts.held == 2  # no commit came, yet every waiting write is answered at once,
        # in log order (the refused one with its own error), before what waits on the shard itself
        nc, ner = int(E.not_coordinator), int(E.not_enough_replicas)
        assert order == [f"b'a': {nc} False", f"b'b': {nc} False", f"b'c': {ner} False"]
        await settle()
        assert order[3:] == ["shard's waiter: gone"]
        assert parts.waiting == 0  # the wait for the commit was given up
        # a write computed on the old shard is not appended
        assert await r.append(0, 1, [(b"c", b"3")]) == E.not_coordinator
        assert parts.keys(0) == [b"a", b"b"]
        parts.commit(2)  # committed after all (the next leader had them): nothing more to answer
        await settle()
        await r.stop()

    run(main())


def test_writes_of_a_shard_that_moved_are_not_appended_or_not_acknowledged():
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        in_flight = [asyncio.ensure_future(r.append(0, 1, [(k, b"1")])) for k in (b"a", b"b")]
        await settle()
        assert parts.held == 2
        r.on_elected(TOPIC, 0, 2)  # elected again, without a resignation: the epoch-1 writes belong to the old shard
        await settle()
        assert [w.result() for w in in_flight] == [E.not_coordinator, E.not_coordinator]
        assert await r.append(0, 1, [(b"c", b"3")]) == E.not_coordinator  # an old epoch: not appended
        # the new shard's writes are appended after the old ones and answered once committed
        new = asyncio.ensure_future(r.append(0, 2, [(b"d", b"4")]))
        await settle()
        assert parts.keys(0) == [b"a", b"b", b"d"] and not new.done()
        parts.commit(3)
        assert await asyncio.wait_for(new, 1) == 0
        await r.stop()

    run(main())


def test_an_append_the_partition_refuses_at_the_shards_epoch_is_not_coordinator():
    parts = MemoryPartitions()
    parts.leader_epochs[0] = 2  # the partition is led at epoch 2; the runtime has not been told

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        assert await r.append(0, 1, [(b"a", b"1")]) == E.not_coordinator
        assert parts.keys(0) == []
        parts.leader_epochs[0] = 0
        assert await r.append(0, 1, [(b"a", b"1")]) == E.not_coordinator
        parts.leader_epochs[0] = 1
        assert await r.append(0, 1, [(b"a", b"1")]) == 0 and parts.keys(0) == [b"a"]
        await r.stop()

    run(main())


def test_an_unloaded_shard_answers_what_waits_on_it_and_stop_ends_writes_in_flight():
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
        in_flight = [asyncio.ensure_future(r.append(0, 1, [(k, b"1")])) for k in (b"a", b"b")]
        await settle()
        stopping = asyncio.ensure_future(r.stop())
        await settle()
        assert not stopping.done()  # the writes in flight may still learn their commit
        assert await r.append(0, 1, [(b"c", b"3")]) == E.not_coordinator  # stopping: not appended
        parts.commit(2)
        await asyncio.wait_for(stopping, 1)
        assert waiting.result() == "gone"
        assert [await w for w in in_flight] == [E.not_coordinator, E.not_coordinator]  # (stopped)
        assert parts.keys(0) == [b"a", b"b"]

    run(main())


def test_stop_gives_up_on_commits_that_do_not_come(monkeypatch):
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = CoordinatorRuntime(TOPIC, 4, parts, RecordingShard, lambda r: r, commit_timeout_ms=60000)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        write = asyncio.ensure_future(r.append(0, 1, [(b"a", b"1")]))
        await settle()
        real_wait = asyncio.wait
        monkeypatch.setattr(rt.asyncio, "wait", lambda fs, timeout: real_wait(fs, timeout=0.05))
        await asyncio.wait_for(r.stop(), 2)
        assert write.result() == E.not_coordinator and parts.waiting == 0

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


def test_stop_cancels_background_tasks_in_the_order_they_were_started():
    """Not in a set's order (object addresses): the simulator replays a seed exactly only when
    what a stop does comes in the same order every run."""

    async def main():
        r = runtime(MemoryPartitions())
        await r.start()
        cancelled: list[int] = []

        async def background(i: int) -> None:
            try:
                await asyncio.sleep(60)
            finally:
                cancelled.append(i)

        for i in range(64):
            r.spawn(background(i))
        await settle()
        await r.stop()
        assert cancelled == list(range(64))

    run(main())


# =========================================================================== answers that write nothing


def _answer(token: Any, value: str) -> CoordinatorResult[Rec]:
    res: CoordinatorResult[Rec] = CoordinatorResult()
    res.reply(token, value)
    return res


def test_an_answer_that_writes_nothing_waits_for_the_writes_before_it_to_commit():
    """Kafka's runtime: an operation with no records (a heartbeat, a SyncGroup of a stable
    group) answers once the shard's last written offset is committed, never from state a
    write not yet committed put there. Before: answered at once."""
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        ctx = r.context(0)
        assert ctx is not None
        write = asyncio.ensure_future(r.run(ctx, lambda t, now: ctx.shard.put(b"a", token=t, now=now)))
        await settle()
        seen = asyncio.ensure_future(r.run(ctx, lambda t, now: _answer(t, "seen")))
        await settle()
        assert not write.done() and not seen.done()  # before: "seen" at once
        parts.commit()
        await settle()
        assert write.result() == "put a" and seen.result() == "seen"
        # nothing waiting: answered at once
        assert await asyncio.wait_for(r.run(ctx, lambda t, now: _answer(t, "now")), 0.05) == "now"
        await r.stop()

    run(main())


def test_an_answer_that_writes_nothing_waits_for_a_loaded_tail_and_is_never_sent_if_it_is_lost():
    """A shard loaded past its high watermark: an answer that writes nothing waits for the
    tail's commit; the shard unloaded before it commits, the token gets NOT_COORDINATOR (the
    caller's `on_error`), not the answer; one not committed in time gets REQUEST_TIMED_OUT."""
    parts = MemoryPartitions()
    parts.put(0, batch(b"a"))
    parts.put(0, batch(b"b"))  # appended by the old leader, not committed
    parts._advance(0, 1)

    async def main():
        r = runtime(parts)  # commit timeout 100 ms
        await r.start()
        r.on_elected(TOPIC, 0, 2)
        await r.wait_loaded()
        ctx = r.context(0)
        assert ctx is not None and ctx.state is ShardState.ACTIVE
        timed_out = await r.run(ctx, lambda t, now: _answer(t, "seen"), lambda code: code)
        assert timed_out == E.request_timed_out  # before: "seen"
        seen = asyncio.ensure_future(r.run(ctx, lambda t, now: _answer(t, "seen"), lambda code: code))
        raised = asyncio.ensure_future(r.run(ctx, lambda t, now: _answer(t, "seen")))
        await settle()
        assert not seen.done()
        r.on_resigned(TOPIC, 0, 2)
        await settle()
        assert seen.result() == E.not_coordinator
        with pytest.raises(error_class(E.not_coordinator)):
            raised.result()
        r.on_elected(TOPIC, 0, 3)
        await r.wait_loaded()
        ctx = r.context(0)
        assert ctx is not None
        seen = asyncio.ensure_future(r.run(ctx, lambda t, now: _answer(t, "seen"), lambda code: code))
        await settle()
        assert not seen.done()
        parts._advance(0, 2)
        await settle()
        assert seen.result() == "seen"
        await r.stop()

    run(main())


def test_a_continuation_that_writes_nothing_answers_at_once_with_its_writes_outcome():
    """The answer a continuation gives is the outcome of a committed write: it does not wait
    for writes appended after that one."""
    parts = MemoryPartitions()
    parts.hold = True

    async def main():
        r = runtime(parts)
        await r.start()
        r.on_elected(TOPIC, 0, 1)
        ctx = r.context(0)
        assert ctx is not None
        first = asyncio.get_running_loop().create_future()

        def then(error: int, now: int) -> CoordinatorResult[Rec]:
            return _answer(first, f"a: {error}")

        r.submit(ctx, CoordinatorResult([(b"a", b"v")], then=then))
        later = asyncio.ensure_future(r.run(ctx, lambda t, now: ctx.shard.put(b"b", token=t, now=now)))
        await settle()
        parts.commit()  # "a" only
        await settle()
        assert first.result() == "a: 0" and not later.done()
        parts.commit()
        await settle()
        assert later.result() == "put b"
        await r.stop()

    run(main())
