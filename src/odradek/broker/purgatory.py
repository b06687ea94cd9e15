"""Waiting is an object: delayed operations completed by events or by a timeout.

A `DelayedOperation` watches some keys (topic-partitions). `notify(key, amount)`
gives every operation watching that key the chance to complete; a timer completes
it otherwise. Handlers `await op.wait()`; nobody sleeps or polls.

Used for Fetch (max_wait_ms / min_bytes: completed when enough bytes were appended
to watched partitions) and, in cluster mode, acks=all Produce (completed when the
high watermark passes the produced offset).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class DelayedOperation:
    __slots__ = ("keys", "_check", "_future", "_timer", "purgatory", "accumulated", "target")

    def __init__(
        self,
        purgatory: Purgatory,
        keys: Iterable[Hashable],
        target: int,
        check: Callable[[DelayedOperation], bool] | None,
    ) -> None:
        self.purgatory = purgatory
        self.keys = tuple(keys)
        self.accumulated = 0
        self.target = target
        self._check = check
        self._future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def done(self) -> bool:
        return self._future.done()

    def try_complete(self, amount: int) -> bool:
        self.accumulated += amount
        if self.accumulated >= self.target if self._check is None else self._check(self):
            self.complete(True)
            return True
        return False

    def complete(self, satisfied: bool) -> None:
        if self._future.done():
            return
        self._future.set_result(satisfied)
        if self._timer is not None:
            self._timer.cancel()
        self.purgatory._remove(self)

    async def wait(self) -> bool:
        """True when completed by events, False on timeout."""
        try:
            return await self._future
        finally:
            self.complete(False)  # cancelled waiters leave the purgatory too


class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, set[DelayedOperation]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def watch(
        self,
        keys: Iterable[Hashable],
        timeout_s: float,
        *,
        target: int = 1,
        check: Callable[[DelayedOperation], bool] | None = None,
    ) -> DelayedOperation:
        op = DelayedOperation(self, keys, target, check)
        for k in op.keys:
            self._watchers.setdefault(k, set()).add(op)
        self._count += 1
        op._timer = asyncio.get_running_loop().call_later(max(timeout_s, 0.0), op.complete, False)
        return op

    def notify(self, key: Hashable, amount: int = 0) -> int:
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if not op.done and op.try_complete(amount):
                completed += 1
        return completed

    def _remove(self, op: DelayedOperation) -> None:
        removed = False
        for k in op.keys:
            ops = self._watchers.get(k)
            if ops is not None and op in ops:
                ops.discard(op)
                removed = True
                if not ops:
                    del self._watchers[k]
        if removed:
            self._count -= 1

    def cancel_all(self) -> None:
        for ops in list(self._watchers.values()):
            for op in list(ops):
                op.complete(False)
