"""Waiting is an object: delayed operations completed by events or by a timeout (Kafka's purgatory).

A `DelayedOperation` watches some keys (topic-partitions). `notify(key, amount)` gives every
operation watching that key the chance to complete; a timer completes it otherwise.
Handlers `await op.wait()`; nobody sleeps or polls.

- **Delayed fetch** (max_wait_ms / min_bytes): completed when enough bytes became visible
  to its partitions. The replica manager notifies it when a partition's high watermark
  advances, with the bytes that became visible (not on append: with followers, appended is
  not yet visible to consumers).
- **Delayed produce** (acks=all): `DelayedProduce` completes when every partition's high
  watermark has passed the last offset appended for this request, or when a partition
  can never get there (it lost leadership; its ISR shrank below min.insync.replicas); on
  timeout the partitions still waiting get REQUEST_TIMED_OUT. Notified on high-watermark
  advances and leadership changes. While the ISR is this broker alone, the high watermark
  has passed the append before the handler asks, so no operation is created at all.

Timeouts: one event-loop timer per purgatory, armed for the earliest deadline of a waiting
operation (the deadlines in a heap, an operation completed early left in it until it reaches
the top or the heap is compacted), not a timer per operation: arming and cancelling a loop
timer for every long-polled Fetch and every acks=all Produce cost more than the rest of the
wait (Kafka's purgatory uses a timing wheel for the same reason).
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from odradek.protocol.errors import ErrorCode


class DelayedOperation:
    """One wait: awaited (`wait()`, its future), or, given a `callback`, completed by calling
    it with whether events satisfied it (the leader's fast path for followers' Fetch requests,
    broker/follower_fetch.py: no task to wake)."""

    __slots__ = ("keys", "_check", "_future", "_callback", "watched", "purgatory", "accumulated", "target")

    def __init__(
        self,
        purgatory: Purgatory,
        keys: Iterable[Hashable],
        target: int,
        check: Callable[[DelayedOperation, Hashable | None], bool] | None,
        future: asyncio.Future[bool] | None,
        callback: Callable[[bool], None] | None = None,
    ) -> None:
        self.purgatory = purgatory
        self.keys = tuple(keys)
        self.accumulated = 0
        self.target = target
        self._check = check
        self._future = future
        self._callback = callback
        self.watched = True  # in the purgatory: its keys watched, its deadline pending

    @property
    def done(self) -> bool:
        future = self._future
        return future.done() if future is not None else self._callback is None

    def try_complete(self, amount: int, key: Hashable | None = None) -> bool:
        """Notified (of `key`, when the notifier says which): complete it if satisfied."""
        self.accumulated += amount
        if self.accumulated >= self.target if self._check is None else self._check(self, key):
            self.complete(True)
            return True
        return False

    def complete(self, satisfied: bool) -> None:
        future = self._future
        if future is not None:
            if not future.done():  # (a cancelled waiter's future is done, and it must leave too)
                future.set_result(satisfied)
        if self.watched:
            self.watched = False
            self.purgatory._remove(self)
        callback = self._callback
        if callback is not None:
            self._callback = None
            callback(satisfied)

    async def wait(self) -> bool:
        """True when completed by events, False on timeout."""
        assert self._future is not None, "an operation with a callback is not awaited"
        try:
            return await self._future
        finally:
            self.complete(False)  # cancelled waiters leave the purgatory too


class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        # Watchers of a key in the order they came (a dict as an ordered set): notified first
        # come, first served, as Kafka's watcher lists, and in the same order every run.
        self._watchers: dict[Hashable, dict[DelayedOperation, None]] = {}
        self._count = 0
        # (deadline on the loop's clock, sequence, operation); the one loop timer is armed at
        # `_timer_at` on `_timer_loop`
        self._deadlines: list[tuple[float, int, DelayedOperation]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return self._count

    def watch(
        self,
        keys: Iterable[Hashable],
        timeout_s: float,
        *,
        target: int = 1,
        check: Callable[[DelayedOperation, Hashable | None], bool] | None = None,
        callback: Callable[[bool], None] | None = None,
    ) -> DelayedOperation:
        """An operation waiting on `keys` for `timeout_s`: awaited with `wait()`, or, given
        `callback`, completed by calling it (once, from `notify`, the timer or `cancel_all`,
        after the operation left the purgatory) with whether events satisfied it."""
        loop = asyncio.get_running_loop()
        op = DelayedOperation(self, keys, target, check, None if callback else loop.create_future(), callback)
        for k in op.keys:
            self._watchers.setdefault(k, {})[op] = None
        self._count += 1
        deadline = loop.time() + max(timeout_s, 0.0)
        self._seq += 1
        heap = self._deadlines
        heapq.heappush(heap, (deadline, self._seq, op))
        if deadline < self._timer_at or loop is not self._timer_loop:
            self._arm(loop, deadline)
        if len(heap) > 2 * self._count + 64:  # mostly operations completed early: drop them
            heap[:] = [e for e in heap if e[2].watched]
            heapq.heapify(heap)
        return op

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._expire)
        self._timer_at = when
        self._timer_loop = loop

    def _expire(self) -> None:
        """The timer: every operation whose deadline came times out (completes unsatisfied), in
        deadline order; the timer is armed again for the next one still waiting."""
        loop = self._timer_loop
        due = max(loop.time(), self._timer_at) if loop is not None else self._timer_at
        self._timer = None
        self._timer_at = math.inf
        heap = self._deadlines
        while heap:
            deadline, _seq, op = heap[0]
            if op.watched and deadline > due:
                break
            heapq.heappop(heap)
            if op.watched:
                op.complete(False)
        if heap and loop is not None:
            self._arm(loop, heap[0][0])

    def notify(self, key: Hashable, amount: int = 0) -> int:
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if not op.done and op.try_complete(amount, key):
                completed += 1
        return completed

    def _remove(self, op: DelayedOperation) -> None:
        """Called once per operation (its `watched` flag), when it completes."""
        for k in op.keys:
            ops = self._watchers.get(k)
            if ops is not None and op in ops:
                del ops[op]
                if not ops:
                    del self._watchers[k]
        self._count -= 1

    def cancel_all(self) -> None:
        for ops in list(self._watchers.values()):
            for op in list(ops):
                op.complete(False)
        self._deadlines.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf


# ------------------------------------------------------------------ delayed produce
class AcksTarget(Protocol):
    """What a delayed produce asks of a partition (broker/partition.py's Partition)."""

    @property
    def key(self) -> Hashable: ...

    def acks_satisfied(self, required_offset: int) -> ErrorCode | None: ...


@dataclass(slots=True)
class ProduceWait:
    """One partition of an acks=all produce: satisfied once the partition's high watermark
    reaches `required_offset`; `error_code` is what the response says for it."""

    partition: AcksTarget
    required_offset: int
    error_code: int = 0
    pending: bool = True


class DelayedProduce:
    """acks=all for one Produce request (Kafka's DelayedProduce).

    A notification of one partition checks that partition's waits alone (each partition's
    high watermark and leadership changes notify its own key, as Kafka's checkAndComplete): a
    request spread over N partitions is settled in O(N) checks. Kafka's tryComplete looks at
    every partition still pending at each notification, N*N/2 checks per request, cheap on the
    JVM; here a Produce of 667 partitions made about 220,000, a fifth of a second of a leader's
    CPU each (the produce spread of bench/scale/cluster.py at 152 records/s)."""

    def __init__(self, purgatory: Purgatory, waits: Sequence[ProduceWait]) -> None:
        self.purgatory = purgatory
        self.waits = waits
        self._pending = sum(1 for w in waits if w.pending)
        self._by_key: dict[Hashable, list[ProduceWait]] = {}

    def _settle(self, w: ProduceWait) -> None:
        code = w.partition.acks_satisfied(w.required_offset)
        if code is not None:
            w.pending = False
            w.error_code = int(code)
            self._pending -= 1

    def _check(self, _op: DelayedOperation | None = None, key: Hashable | None = None) -> bool:
        waits = self.waits if key is None else self._by_key.get(key, ())
        for w in waits:
            if w.pending:
                self._settle(w)
        return self._pending == 0

    async def complete(self, timeout_s: float) -> None:
        """Return once every partition is satisfied or failed, or the timeout ends the wait
        (partitions still waiting: REQUEST_TIMED_OUT)."""
        if self._check():
            return
        op = self.purgatory.watch(self._watched(), timeout_s, check=self._check)
        await op.wait()
        self._time_out()

    def park(self, timeout_s: float, callback: Callable[[], None]) -> bool:
        """`complete` without a coroutine (the leader's fast path for Produce,
        broker/fast_produce.py): True when done at once; otherwise False, and `callback` is
        called (from the purgatory, once) when it is, the same waits given the same codes."""
        if self._check():
            return True

        def done(_satisfied: bool) -> None:
            self._time_out()
            callback()

        self.purgatory.watch(self._watched(), timeout_s, check=self._check, callback=done)
        return False

    def _watched(self) -> dict[Hashable, list[ProduceWait]]:
        """The keys to watch: the partitions still pending, each with its waits."""
        for w in self.waits:
            if w.pending:
                self._by_key.setdefault(w.partition.key, []).append(w)
        return self._by_key

    def _time_out(self) -> None:
        for w in self.waits:
            if w.pending:
                w.pending = False
                w.error_code = int(ErrorCode.request_timed_out)
