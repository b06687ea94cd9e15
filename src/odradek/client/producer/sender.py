"""The sender: a background task on the client's loop that drains the accumulator.

Each round it finds the nodes with sendable batches (full, lingered long enough, being
flushed, or retried), takes at most one batch per partition per request, and sends
Produce requests without waiting for earlier ones (up to
``max.in.flight.requests.per.connection`` per node). What happens to a batch after its answer
follows Java's Sender.completeBatch: acknowledged, retried, or failed.

Idempotence (on by default) gets a producer id from InitProducerId and numbers every
partition's batches; producer/sequences.py keeps them and decides, as Java's producer
(KIP-98, KIP-360): retried batches keep their numbers and go one at a time in sequence order,
so the broker drops duplicates and keeps order across leader changes; a real sequence gap (a
batch refused for good, OUT_OF_ORDER_SEQUENCE_NUMBER for the next batch expected) bumps the
epoch locally and renumbers from 0 the batches after the gap, never one that may have been
written.

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
from ..conn import Connection
from .accumulator import Accumulator, ProducerBatch
from .sequences import Sequences

log = logging.getLogger(__name__)

PRODUCE = 0
INIT_PRODUCER_ID = 22
DUPLICATE_SEQUENCE = 46
# a partition's answers after which the batch may have been written all the same: the leader
# appended it but the replicas did not follow in time
MAYBE_WRITTEN = frozenset({7, 20, 56})  # REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR


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
        self.seqs = Sequences(transactional=bool(config.get("transactional.id")))
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

    @property
    def producer_id(self) -> int:
        return self.seqs.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.seqs.producer_epoch

    @property
    def epoch_bumps(self) -> int:
        return self.seqs.epoch_bumps

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

    async def _maybe_bump_epoch(self) -> None:
        """Bump the epoch if a partition asked (Java's bumpIdempotentEpochAndResetIdIfNeeded),
        then renumber the partitions that are ready for it."""
        seqs = self.seqs
        if seqs.epoch_bump_required:
            pid = seqs.producer_id
            if seqs.bump_epoch():
                log.warning(
                    "idempotent producer %d: epoch bumped to %d (KIP-360) for a sequence gap in %s",
                    pid,
                    seqs.producer_epoch,
                    ", ".join(f"{t}-{p}" for t, p in seqs.rewrite),
                )
            else:
                log.warning("idempotent producer %d: epoch exhausted, asking for a new producer id", pid)
        if seqs.producer_id < 0:
            await self._init_producer_id()
        for t, p in seqs.apply_rewrites():
            log.info("%s-%d: batches in flight renumbered from 0 under epoch %d", t, p, seqs.producer_epoch)

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
        self.seqs.set_producer_id_and_epoch(int(resp.producer_id), int(resp.producer_epoch))

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

                for b in acc.expired(now, self.delivery_timeout):
                    self._fail(
                        b,
                        E.KafkaTimeoutError(
                            f"{b.topic}-{b.partition}: {b.builder.count} record(s) expired after delivery.timeout.ms"
                        ),
                    )
                if self.idempotent:
                    gaps = self.seqs.resolve()
                    if gaps and self.txn is not None:
                        self.txn.sequence_gap(gaps)
                    if self.txn is None:
                        await self._maybe_bump_epoch()
                nodes, next_check, unknown = acc.ready(now, leader_of, self._node_ok, self._sendable)
                if unknown:
                    cluster.request_update()
                for node in nodes:
                    batches = acc.drain(node, leader_of, self.max_request_size, now, self._sendable)
                    if batches:
                        self._send(node, batches)
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

    def _sendable(self, b: ProducerBatch, node: int) -> bool:
        """Whether the first batch of a partition's queue may be drained now, to `node` (whose
        open connection a request drained now is written on: `_send`)."""
        txn = self.txn
        if txn is not None and not txn.send_allowed(b.topic, b.partition):
            return False
        return not self.idempotent or self.seqs.sendable(b, node, self.cluster.open_connection(node))

    # ------------------------------------------------------------------ sending
    def _prepare(self, b: ProducerBatch) -> bytes:
        """A drained batch's bytes for this attempt: numbered at its first drain, built then
        (and again once renumbered)."""
        if self.idempotent and b.sequence < 0:
            self.seqs.assign(b)
        if b.wire is None:
            b.wire = b.builder.build(
                compression=self.compression,
                producer_id=b.producer_id,
                producer_epoch=b.producer_epoch,
                base_sequence=b.sequence,
                transactional=self.txn is not None,
            )
        b.attempts += 1
        return b.wire

    def _send(self, node: int, batches: list[ProducerBatch]) -> None:
        """Send a Produce request of `batches` to `node`: on the node's connection open now, if
        any (the one `sendable` pipelined them on: should it close before the request is
        written, the request fails rather than go on a new connection, ahead of requests that
        failed with the old one), else on the one opened for it."""
        topics: dict[str, list] = {}
        for b in batches:
            topics.setdefault(b.topic, []).append((b.partition, self._prepare(b)))
        self.node_in_flight[node] = self.node_in_flight.get(node, 0) + 1
        pinned = self.cluster.open_connection(node)
        task = self._loop.create_task(self._produce(node, batches, topics, pinned))
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

    async def _produce(
        self, node: int, batches: list[ProducerBatch], topics: dict, pinned: Connection | None = None
    ) -> None:
        try:
            sent = False
            try:
                if pinned is None:
                    conn = await self.cluster.connection(node)
                elif pinned.connected:
                    conn = pinned
                else:
                    raise E.KafkaConnectionError(f"connection to broker {node} lost before the request was written")
                version = conn.version(PRODUCE)
                data = self._request(version, topics)
                sent = True
                for b in batches:
                    b.conn = conn  # written on it below, before any other request can be
                if pinned is None:
                    self.wakeup()  # new batches of these partitions may now be pipelined behind them
                if self.acks == 0:
                    conn.send(PRODUCE, data, version=version, expect_response=False)
                    for b in batches:
                        self._succeed(b, -1, -1)
                    return
                resp = await conn.request(PRODUCE, data, version=version, timeout=self.request_timeout_ms / 1000 + 5)
            except E.KafkaError as e:
                # no answer: once the request may have left (it timed out, the connection was
                # lost), each batch may have been written, or not
                self.cluster.request_update()
                for b in batches:
                    b.maybe_written |= sent
                    self._complete_batch(b, e, -1)
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
                        continue
                    msg = getattr(p, "error_message", None)
                    err = E.error_class(code)(f"{b.topic}-{b.partition}: {msg or E.error_class(code).name}")
                    if code in STALE_METADATA_CODES:
                        self.cluster.request_update()
                    if code in MAYBE_WRITTEN:
                        b.maybe_written = True
                    self._complete_batch(b, err, int(getattr(p, "log_start_offset", -1)))
            for b in by_tp.values():
                b.maybe_written = True
                self._complete_batch(b, E.KafkaError(f"{b.topic}-{b.partition}: missing from Produce response"), -1)
        finally:
            self.node_in_flight[node] -= 1
            self.wakeup()

    def _complete_batch(self, b: ProducerBatch, err: E.KafkaError, log_start_offset: int) -> None:
        """An attempt of `b` failed with `err`: retry, or complete it (Java's Sender.completeBatch)."""
        if b.done:
            return
        code = err.code
        if self._can_retry(b, err, code, log_start_offset):
            backoff = min(self.backoff * (2 ** min(b.attempts - 1, 5)), 1.0)
            now = time.monotonic()
            self.acc.reenqueue(b, now + backoff)
            self.wakeup()
        elif code == DUPLICATE_SEQUENCE:
            # the broker has it, and no longer its offset
            self._succeed(b, -1, -1)
        else:
            # the broker's own refusal at every attempt: it never took these sequences
            self._fail(b, err, refused=code >= 0 and not b.maybe_written)

    def _can_retry(self, b: ProducerBatch, err: E.KafkaError, code: int, log_start_offset: int) -> bool:
        if not self._running or b.attempts > self.retries:
            return False
        if time.monotonic() - b.created >= self.delivery_timeout:
            return False
        if self.idempotent:
            decided = self.seqs.can_retry(b, code, log_start_offset)
            if decided is not None:
                return decided
        return bool(err.retriable)

    def _succeed(self, b: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if b.done:
            return
        b.in_request = False
        if self.idempotent:
            self.seqs.completed(b, base_offset)
        self.acc.release(b)
        b.complete(base_offset, log_append_time, None)

    def _fail(self, b: ProducerBatch, err: BaseException, refused: bool = False) -> None:
        """`b` failed for good. `refused`: by the broker at every attempt (it was never written)."""
        if b.done:
            return
        b.in_request = False
        if self.idempotent:
            self.seqs.failed(b, getattr(err, "code", -1), refused)
        self.acc.release(b)
        if self.txn is not None:
            self.txn.batch_failed(b, err)
        b.complete(-1, -1, err)
