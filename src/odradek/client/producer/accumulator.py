"""The record accumulator: per-partition queues of batches, bounded by buffer.memory.

Thread-safe: the blocking `Producer` appends from the caller's thread while the sender
drains on the client's event-loop thread (the Java client's split). Batches complete on
the loop thread; `FutureRecordMetadata` can be waited on from any thread or awaited on
that loop.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from .._records import BatchBuilder
from ..errors import KafkaTimeoutError


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class ProducerBatch:
    __slots__ = (
        "topic",
        "partition",
        "builder",
        "created",
        "reserved",
        "done",
        "base_offset",
        "log_append_time",
        "error",
        "callbacks",
        "attempts",
        "producer_id",
        "producer_epoch",
        "sequence",
        "sequence_reset",
        "maybe_written",
        "wire",
        "event",
        "waiters",
        "retry_at",
        "in_request",
        "node",
        "conn",
    )

    def __init__(self, topic: str, partition: int, limit: int, now: float) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = BatchBuilder(limit)
        self.created = now
        self.reserved = 0
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.callbacks: list | None = None
        self.attempts = 0  # times sent
        # what the batch is written under, once an idempotent producer first drains it: kept
        # until it completes, unless it is certain the broker never wrote it (sequences.py)
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequence = -1
        self.sequence_reset = False  # renumbered after it was sent (an epoch bump)
        # an attempt went unanswered, or was answered with an error after which the leader may
        # have written it all the same: the batch may be in the log
        self.maybe_written = False
        self.wire: bytes | None = None  # the batch as sent (built at its first send, again once renumbered)
        self.event: threading.Event | None = None  # created only when a thread waits
        self.waiters: list | None = None
        self.retry_at = 0.0
        self.in_request = False  # in a Produce request not answered yet
        self.node = -1  # the broker its last request went to
        # the connection its request was written on (None while the request waits for one): a new
        # batch of its partition is pipelined only behind requests on one connection (sequences.py)
        self.conn: object | None = None

    @property
    def last_sequence(self) -> int:
        return (self.sequence + self.builder.count - 1) & 0x7FFFFFFF

    def set_producer_state(self, producer_id: int, producer_epoch: int, sequence: int) -> None:
        """Numbered at its first drain."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequence = sequence

    def reset_producer_state(self, producer_id: int, producer_epoch: int, sequence: int) -> None:
        """Renumbered under a new epoch (Java's ProducerBatch.resetProducerState): rebuilt when next sent."""
        self.set_producer_state(producer_id, producer_epoch, sequence)
        self.sequence_reset = True
        self.wire = None

    def complete(self, base_offset: int, log_append_time: int = -1, error: BaseException | None = None) -> None:
        """Called on the loop thread once: run callbacks, wake waiters."""
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        with _EVENT_LOCK:
            self.done = True
            ev = self.event
        self.wire = None
        if ev is not None:
            ev.set()
        if self.waiters:
            for fut, _frm in self.waiters:
                if not fut.done():
                    fut.set_result(None)
            self.waiters = None
        if self.callbacks:
            for rec_future, cb in self.callbacks:
                try:
                    if error is None:
                        cb(rec_future._meta(), None)
                    else:
                        cb(None, error)
                except Exception:  # a user callback must not break the sender
                    import logging

                    logging.getLogger(__name__).exception("delivery callback failed")
            self.callbacks = None


_EVENT_LOCK = threading.Lock()


def _wait(b: ProducerBatch, timeout: float | None) -> bool:
    with _EVENT_LOCK:
        if b.done:
            return True
        ev = b.event
        if ev is None:
            ev = b.event = threading.Event()
    return ev.wait(timeout)


class FutureRecordMetadata:
    """The outcome of one `send`: `result(timeout)` (alias `get`) or `await`."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    def done(self) -> bool:
        return self._batch.done

    def _meta(self) -> RecordMetadata:
        b = self._batch
        offset = b.base_offset + self._index if b.base_offset >= 0 else -1
        ts = b.log_append_time if b.log_append_time >= 0 else self._timestamp
        return RecordMetadata(b.topic, b.partition, offset, ts)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        b = self._batch
        if not b.done and not _wait(b, timeout):
            raise KafkaTimeoutError(f"no delivery report within {timeout}s")
        if b.error is not None:
            raise b.error
        return self._meta()

    get = result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        b = self._batch
        if not b.done and not _wait(b, timeout):
            raise KafkaTimeoutError(f"no delivery report within {timeout}s")
        return b.error

    def add_callback(self, cb: Callable[[RecordMetadata | None, BaseException | None], Any]) -> None:
        """`cb(metadata, exception)` once delivered (on the client's I/O thread), or now if done."""
        b = self._batch
        if b.done:
            cb(self._meta() if b.error is None else None, b.error)
            return
        if b.callbacks is None:
            b.callbacks = []
        b.callbacks.append((self, cb))

    def __await__(self):
        b = self._batch
        if not b.done:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            if b.waiters is None:
                b.waiters = []
            b.waiters.append((fut, loop))
            yield from fut
        if b.error is not None:
            raise b.error
        return self._meta()


class Accumulator:
    def __init__(self, *, batch_size: int, linger_ms: float, buffer_memory: int, threaded: bool = True) -> None:
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.lock = threading.Lock()
        # The per-record path takes the lock only when callers append from other threads than
        # the sender's (the blocking Producer); the asyncio producer appends on the loop's
        # thread, where the lock would cost ~0.2 µs per record for nothing.
        self.append_lock: threading.Lock | None = self.lock if threaded else None
        self.cond = threading.Condition(self.lock)
        self.deques: dict[tuple[str, int], collections.deque] = {}
        # the batch that takes the partition's next records (the last of its queue, until
        # drained): a batch once sent never takes records again, even if it comes back
        self.open: dict[tuple[str, int], ProducerBatch] = {}
        self.used = 0
        # batches not yet delivered or failed, in the order they were made (a dict as an ordered
        # set: flush waits for them, and close fails them, oldest first, the same way every run)
        self.incomplete: dict[ProducerBatch, None] = {}
        self.flushing = 0
        self.closed = False
        self.wakeup: Callable[[], None] = lambda: None
        self.space: asyncio.Event | None = None  # set by release() on the loop thread
        # A batch filled up (or a first one began) since the asyncio producer last let the
        # loop run: its send() yields once so the sender drains while records keep coming.
        self.yield_due = False

    def set_threaded(self) -> None:
        """Appends will come from threads other than the sender's: take the lock for them too."""
        self.append_lock = self.lock

    # ------------------------------------------------------------------ appending
    def try_append(self, topic: str, partition: int, ts: int, key, value, headers, size: int):
        """Append (under the lock when threaded): a future, or None when buffer.memory is exhausted."""
        lock = self.append_lock
        if lock is not None:
            lock.acquire()
        try:
            used = self.used
            if used + size > self.buffer_memory and used > 0:
                return None
            if self.closed:
                from ..errors import ProducerClosedError

                raise ProducerClosedError("producer closed")
            batch = self.open.get((topic, partition))
            if batch is None or not batch.builder.append(ts, key, value, headers):
                batch = self._new_batch(topic, partition, ts, key, value, headers, size)
            builder = batch.builder
            batch.reserved += size
            self.used = used + size
            if builder.size >= self.batch_size:
                self.yield_due = True
                self.wakeup()
            return FutureRecordMetadata(batch, builder.count - 1, ts)
        finally:
            if lock is not None:
                lock.release()

    def _new_batch(self, topic, partition, ts, key, value, headers, size) -> ProducerBatch:
        """Open a new batch for the partition (under the lock) with the record in it."""
        tp = (topic, partition)
        dq = self.deques.get(tp)
        if dq is None:
            dq = self.deques[tp] = collections.deque()
        batch = ProducerBatch(topic, partition, max(self.batch_size, size + 128), time.monotonic())
        batch.builder.append(ts, key, value, headers)
        dq.append(batch)
        self.open[tp] = batch
        self.incomplete[batch] = None
        # a batch that filled up or a first batch (its linger starts now): the sender looks again
        self.yield_due = True
        self.wakeup()
        return batch

    def _close_batch(self, b: ProducerBatch) -> None:
        """`b` leaves its queue (under the lock): it takes no more records."""
        tp = (b.topic, b.partition)
        if self.open.get(tp) is b:
            del self.open[tp]

    def append_blocking(self, topic, partition, ts, key, value, headers, size, max_block: float):
        fut = self.try_append(topic, partition, ts, key, value, headers, size)
        if fut is not None:
            return fut
        deadline = time.monotonic() + max_block
        while True:
            with self.cond:
                while self.used + size > self.buffer_memory and self.used > 0 and not self.closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise KafkaTimeoutError(f"buffer.memory exhausted for {max_block:.1f}s (max.block.ms)")
                    self.cond.wait(remaining)
            fut = self.try_append(topic, partition, ts, key, value, headers, size)
            if fut is not None:
                return fut

    async def append_async(self, topic, partition, ts, key, value, headers, size, max_block: float):
        fut = self.try_append(topic, partition, ts, key, value, headers, size)
        if fut is not None:
            return fut
        deadline = time.monotonic() + max_block
        if self.space is None:
            self.space = asyncio.Event()
        while fut is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"buffer.memory exhausted for {max_block:.1f}s (max.block.ms)")
            self.space.clear()
            try:
                await asyncio.wait_for(self.space.wait(), remaining)
            except TimeoutError:
                pass
            fut = self.try_append(topic, partition, ts, key, value, headers, size)
        return fut

    def release(self, batch: ProducerBatch) -> None:
        with self.cond:
            self.used -= batch.reserved
            batch.reserved = 0
            self.incomplete.pop(batch, None)
            self.cond.notify_all()
        if self.space is not None:
            self.space.set()

    # ------------------------------------------------------------------ draining
    def ready(
        self,
        now: float,
        leader_of: Callable[[str, int], int],
        node_ok: Callable[[int], bool],
        sendable: Callable[[ProducerBatch, int], bool],
    ):
        """Nodes with a sendable batch, the next time to look again, and whether a leader is
        unknown. A partition whose first batch may not go now (`sendable`: a transaction that
        lacks the partition, a retry that waits for an older one, ...) marks no node: what
        changes that (an answer, a partition added) wakes the sender."""
        nodes: set[int] = set()
        next_check = now + 1.0
        unknown = False
        flushing = self.flushing > 0 or self.closed
        with self.lock:
            for (topic, partition), dq in self.deques.items():
                if not dq:
                    continue
                b = dq[0]
                leader = leader_of(topic, partition)
                if leader < 0:
                    unknown = True
                    continue
                if b.retry_at > now:
                    next_check = min(next_check, b.retry_at)
                    continue
                if not sendable(b, leader):
                    continue
                if len(dq) > 1 or flushing or b.builder.size >= self.batch_size or b.attempts:
                    if node_ok(leader):
                        nodes.add(leader)
                    continue
                due = b.created + self.linger
                if due <= now:
                    if node_ok(leader):
                        nodes.add(leader)
                else:
                    next_check = min(next_check, due)
        return nodes, next_check, unknown

    def drain(
        self,
        node: int,
        leader_of: Callable[[str, int], int],
        max_request_size: int,
        now: float,
        sendable: Callable[[ProducerBatch, int], bool],
    ) -> list[ProducerBatch]:
        """The first batch of each partition led by `node` that may go now, up to
        max.request.size (Java's drain: one batch per partition per request)."""
        out: list[ProducerBatch] = []
        size = 0
        with self.lock:
            for (topic, partition), dq in self.deques.items():
                if not dq or leader_of(topic, partition) != node:
                    continue
                b = dq[0]
                if b.retry_at > now or not sendable(b, node):
                    continue
                bsize = b.builder.size
                if out and size + bsize > max_request_size:
                    break
                dq.popleft()
                self._close_batch(b)
                b.in_request = True
                b.node = node
                b.conn = None
                out.append(b)
                size += bsize
        return out

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch to retry back at the front of its partition's queue, after the queued
        batches with lower sequence numbers (Java's insertInSequenceOrder): answers to a
        partition's requests may come back out of order across a leader change."""
        batch.in_request = False
        batch.retry_at = retry_at
        with self.lock:
            dq = self.deques.setdefault((batch.topic, batch.partition), collections.deque())
            i = 0
            if batch.sequence >= 0:
                while i < len(dq) and dq[i].sequence >= 0 and dq[i].sequence < batch.sequence:
                    i += 1
            dq.insert(i, batch)

    def expired(self, now: float, delivery_timeout: float) -> list[ProducerBatch]:
        """The batches at the front of their queues past delivery.timeout.ms, taken out."""
        out = []
        with self.lock:
            for dq in self.deques.values():
                while dq and now - dq[0].created > delivery_timeout:
                    out.append(dq.popleft())
                    self._close_batch(out[-1])
        return out

    def has_undrained(self) -> bool:
        with self.lock:
            return any(self.deques.values())

    def abort_all(self, error: BaseException) -> list[ProducerBatch]:
        with self.lock:
            out = [b for dq in self.deques.values() for b in dq]
            for dq in self.deques.values():
                dq.clear()
            self.open.clear()
        return out
