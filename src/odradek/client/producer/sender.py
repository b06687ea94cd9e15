"""The sender: a background task on the client's loop that drains the accumulator.

Each round it finds the nodes with sendable batches (full, lingered long enough, being
flushed, or retried), takes at most one batch per partition per request, and sends
Produce requests without waiting for earlier ones (up to
``max.in.flight.requests.per.connection`` per node). Idempotence (on by default) gets a
producer id from InitProducerId and numbers every partition's batches; retried batches
keep their sequence numbers, so the broker drops duplicates and keeps order.

A sequence gap cannot close by retrying: when a batch that was sent fails for good (expired,
or a non-retriable error), the broker never sees its sequences and answers every later batch of
that partition OUT_OF_ORDER_SEQUENCE_NUMBER. When the oldest outstanding batch of a partition
gets that answer (or UNKNOWN_PRODUCER_ID), the producer bumps its epoch locally, as Java's
idempotent producer does (KIP-360): it stops sending, waits for its requests in flight, takes
epoch + 1 (a new producer id from InitProducerId once the epoch is exhausted), numbers every
partition from 0 again and re-sends the unacknowledged batches under the new epoch.

A transactional producer (``transactional.id``) gets its producer id from
`TransactionManager.init_transactions` instead, marks its batches transactional, sends a
partition's batches only once the partition is in the transaction, and leaves sequence gaps
to the transaction: they abort it and the abort bumps the epoch (producer/transactions.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from .. import _wire
from .. import errors as E
from ..cluster import STALE_METADATA_CODES, Cluster
from .accumulator import Accumulator, ProducerBatch

log = logging.getLogger(__name__)

PRODUCE = 0
INIT_PRODUCER_ID = 22
DUPLICATE_SEQUENCE = 46
OUT_OF_ORDER_SEQUENCE = 45
UNKNOWN_PRODUCER_ID = 59
MAX_EPOCH = 32767


class _Wakeup:
    """asyncio.Event for the sender's one waiter, without the Task that `wait_for(event.wait())`
    creates per wait: a future and a timer."""

    __slots__ = ("loop", "flag", "fut")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.flag = False
        self.fut: asyncio.Future | None = None

    def set(self) -> None:
        self.flag = True
        f = self.fut
        if f is not None and not f.done():
            f.set_result(None)

    def clear(self) -> None:
        self.flag = False

    async def wait(self, timeout: float) -> None:
        if self.flag:
            return
        self.fut = f = self.loop.create_future()
        timer = self.loop.call_later(timeout, _resolve, f)
        try:
            await f
        finally:
            self.fut = None
            timer.cancel()


def _resolve(f: asyncio.Future) -> None:
    if not f.done():
        f.set_result(None)


class Sender:
    def __init__(self, cluster: Cluster, acc: Accumulator, config: dict[str, Any], compression: int) -> None:
        self.cluster = cluster
        self.acc = acc
        acks = config["acks"]
        self.acks = -1 if acks in ("all", -1, "-1") else int(acks)
        self.compression = compression
        self.request_timeout_ms = int(config["request.timeout.ms"])
        self.delivery_timeout = int(config["delivery.timeout.ms"]) / 1000
        self.retries = int(config["retries"])
        self.backoff = int(config["retry.backoff.ms"]) / 1000
        self.max_request_size = int(config["max.request.size"])
        self.max_in_flight = int(config["max.in.flight.requests.per.connection"])
        self.idempotent = bool(config["enable.idempotence"])
        if self.idempotent:
            if self.acks != -1:
                raise ValueError("enable.idempotence requires acks=all")
            if self.max_in_flight > 5:
                raise ValueError("enable.idempotence requires max.in.flight.requests.per.connection <= 5")
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_seq: dict[tuple[str, int], int] = {}
        self.bump_pending = False  # an epoch bump waits for the requests in flight
        self.epoch_bumps = 0
        self.node_in_flight: dict[int, int] = {}
        self._wake: _Wakeup | None = None
        self._wake_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._task: asyncio.Task | None = None
        self._running = False
        self._tasks: dict[asyncio.Task, None] = {}  # an ordered set: cancelled in the order they started
        self.fatal: BaseException | None = None
        self.txn: Any = None  # the TransactionManager of a transactional producer
        self.transactional_id: str | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = _Wakeup(self._loop)
        self.acc.wakeup = self.wakeup
        if self.idempotent and self.txn is None:
            await self._init_producer_id()
        self._running = True
        self._task = self._loop.create_task(self._run())

    def wakeup(self) -> None:
        if self._wake is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake.set()
        elif not self._wake_pending:
            self._wake_pending = True  # one cross-thread wakeup until the sender runs again
            self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self, drain: bool = True, timeout: float | None = None) -> None:
        if drain:
            self.acc.closed = True
            self.wakeup()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self.acc.incomplete and self.fatal is None:
                if deadline is not None and time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.005)
        self._running = False
        self.acc.closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for t in list(self._tasks):
            t.cancel()
        err = E.ProducerClosedError("producer closed before delivery")
        for b in self.acc.abort_all(err):
            self._fail(b, err)
        for b in list(self.acc.incomplete):
            self._fail(b, err)

    async def _bump_epoch(self) -> None:
        """Start the sequences over under a new epoch (nothing is in flight now)."""
        if self.producer_epoch >= MAX_EPOCH:
            await self._init_producer_id()
        else:
            self.producer_epoch += 1
        self.next_seq.clear()
        self.acc.renumber_unsent()
        self.bump_pending = False
        self.epoch_bumps += 1
        log.warning(
            "idempotent producer %d: sequence gap, continuing with epoch %d", self.producer_id, self.producer_epoch
        )

    def _gap_at(self, b: ProducerBatch) -> bool:
        """Whether no batch of `b`'s partition with a lower sequence is still outstanding: the
        broker then lacks sequences that no retry will bring."""
        return not any(
            x is not b
            and x.topic == b.topic
            and x.partition == b.partition
            and 0 <= x.sequence < b.sequence
            and not x.done
            for x in list(self.acc.incomplete)
        )

    async def _init_producer_id(self) -> None:
        async def attempt():
            conn = await self.cluster.any_connection()
            if not conn.supports(INIT_PRODUCER_ID):
                log.warning("broker lacks InitProducerId: idempotence disabled")
                return None
            resp = await conn.request(
                INIT_PRODUCER_ID,
                {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
            )
            code = int(resp.error_code)
            if code:
                raise E.error_class(code)("InitProducerId")
            return resp

        resp = await self.cluster.retrying(attempt, what="InitProducerId")
        if resp is None:
            self.idempotent = False
            return
        self.producer_id = int(resp.producer_id)
        self.producer_epoch = int(resp.producer_epoch)

    # ------------------------------------------------------------------ main loop
    async def _run(self) -> None:
        acc = self.acc
        cluster = self.cluster
        wake = self._wake
        while self._running:
            try:
                if self.txn is not None:
                    self.txn.on_sender_round()
                now = time.monotonic()
                md = cluster.metadata

                def leader_of(topic: str, partition: int, _md=md) -> int:
                    ti = _md.topics.get(topic)
                    if ti is None:
                        return -1
                    p = ti.partitions.get(partition)
                    return -1 if p is None else p.leader

                if self.bump_pending and not any(self.node_in_flight.values()):
                    await self._bump_epoch()
                if self.bump_pending:  # sending waits until the requests in flight are answered
                    nodes, next_check, unknown = set(), now + self.backoff, False
                else:
                    nodes, next_check, unknown = acc.ready(now, leader_of, self._node_ok)
                if unknown:
                    cluster.request_update()
                for node in nodes:
                    batches = acc.drain(node, leader_of, self.max_request_size, now, self._tp_ok)
                    if batches:
                        self._send(node, batches)
                for b in acc.expired(now, self.delivery_timeout):
                    self._fail(
                        b,
                        E.KafkaTimeoutError(
                            f"{b.topic}-{b.partition}: {b.builder.count} record(s) expired after delivery.timeout.ms"
                        ),
                    )
                cluster.maybe_refresh()
                timeout = max(0.0, next_check - time.monotonic())
                if unknown:
                    timeout = min(timeout, self.backoff)
                wake.clear()
                self._wake_pending = False
                if timeout > 0:
                    await wake.wait(timeout)
                else:
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception:  # pragma: no cover - keep the sender alive
                log.exception("producer sender loop error")
                await asyncio.sleep(self.backoff)

    def _node_ok(self, node: int) -> bool:
        return self.node_in_flight.get(node, 0) < self.max_in_flight

    def _tp_ok(self, topic: str, partition: int, batch: ProducerBatch) -> bool:
        txn = self.txn
        return txn is None or txn.send_allowed(topic, partition)

    # ------------------------------------------------------------------ sending
    def _send(self, node: int, batches: list[ProducerBatch]) -> None:
        topics: dict[str, list] = {}
        for b in batches:
            if b.wire is None:
                if self.idempotent:
                    tp = (b.topic, b.partition)
                    seq = self.next_seq.get(tp, 0)
                    b.sequence = seq
                    self.next_seq[tp] = (seq + b.builder.count) & 0x7FFFFFFF
                b.wire = b.builder.build(
                    compression=self.compression,
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    base_sequence=b.sequence,
                    transactional=self.txn is not None,
                )
            b.attempts += 1
            topics.setdefault(b.topic, []).append((b.partition, b.wire))
        self.node_in_flight[node] = self.node_in_flight.get(node, 0) + 1
        task = self._loop.create_task(self._produce(node, batches, topics))
        self._tasks[task] = None
        task.add_done_callback(lambda t: self._tasks.pop(t, None))

    def _request(self, version: int, topics: dict):
        """The Produce request for `topics` ({name: [(partition, batch bytes)]}): encoded by
        hand where `_wire.encode_produce` knows the version, else as fields for kio."""
        if 3 <= version <= 12:
            return _wire.encode_produce(version, self.acks, self.request_timeout_ms, topics, self.transactional_id)
        return {
            "transactional_id": self.transactional_id,
            "acks": self.acks,
            "timeout": self.request_timeout_ms,
            "topic_data": [
                {"name": t, "partition_data": [{"index": i, "records": r} for i, r in parts]}
                for t, parts in topics.items()
            ],
        }

    async def _produce(self, node: int, batches: list[ProducerBatch], topics: dict) -> None:
        try:
            try:
                conn = await self.cluster.connection(node)
                version = conn.version(PRODUCE)
                data = self._request(version, topics)
                if self.acks == 0:
                    conn.send(PRODUCE, data, version=version, expect_response=False)
                    for b in batches:
                        self._succeed(b, -1, -1)
                    return
                resp = await conn.request(PRODUCE, data, version=version, timeout=self.request_timeout_ms / 1000 + 5)
            except E.KafkaError as e:
                self.cluster.request_update()
                for b in batches:
                    self._retry_or_fail(b, e)
                return
            by_tp = {(b.topic, b.partition): b for b in batches}
            for t in resp.responses:
                for p in t.partition_responses:
                    b = by_tp.pop((t.name, int(p.index)), None)
                    if b is None:
                        continue
                    code = int(p.error_code)
                    if code == 0:
                        self._succeed(b, int(p.base_offset), _wire.ms(getattr(p, "log_append_time", -1)))
                    elif code == DUPLICATE_SEQUENCE:
                        self._succeed(b, -1, -1)
                    else:
                        msg = getattr(p, "error_message", None)
                        err = E.error_class(code)(f"{b.topic}-{b.partition}: {msg or E.error_class(code).name}")
                        if code in STALE_METADATA_CODES:
                            self.cluster.request_update()
                        if (
                            code in (OUT_OF_ORDER_SEQUENCE, UNKNOWN_PRODUCER_ID)
                            and self.idempotent
                            and self.txn is None
                        ):
                            err.retriable = True
                            if b.sequence >= 0 and self._gap_at(b):
                                self.bump_pending = True
                        self._retry_or_fail(b, err)
            for b in by_tp.values():
                self._retry_or_fail(b, E.KafkaError(f"{b.topic}-{b.partition}: missing from Produce response"))
        finally:
            self.node_in_flight[node] -= 1
            self.wakeup()

    def _retry_or_fail(self, b: ProducerBatch, err: BaseException) -> None:
        now = time.monotonic()
        retriable = getattr(err, "retriable", False)
        if retriable and b.attempts <= self.retries and now - b.created < self.delivery_timeout and self._running:
            backoff = min(self.backoff * (2 ** min(b.attempts - 1, 5)), 1.0)
            self.acc.reenqueue(b, now + backoff)
            self.wakeup()
        else:
            self._fail(b, err)

    def _succeed(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        b.in_flight = False
        self.acc.release(b)
        b.complete(base_offset, log_append_time, None)

    def _fail(self, b: ProducerBatch, err: BaseException) -> None:
        b.in_flight = False
        self.acc.release(b)
        if self.txn is not None:
            self.txn.batch_failed(b, err)
        b.complete(-1, -1, err)
