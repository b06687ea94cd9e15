"""The leader's fast path for a Produce request of the common shape (issue 28).

A replicated single-record Produce costs the leader three requests: the Produce and one Fetch
from each follower (served by broker/follower_fetch.py). On the generic path the Produce wakes
its connection's processor task, gets a request entity from kio, a RequestContext and the
Produce handler's coroutine (with its generic steps for ACLs, quotas, transactions and many
partitions), and for acks=all a future in the produce purgatory and a second wake of the task
to answer. Here, a Produce in the common shape is served from the connection's readiness
callback itself: its frame read with a few struct unpacks (`decode_single_produce_request`,
held to kio's reading of the same bytes), the handler's checks made on it, the batch appended
with the replica manager's own step of `append_records` (`append_now`: the same validation,
offsets, producer state and errors), and for acks=all the same `DelayedProduce` parked in the
purgatory with a callback instead of a future: the follower's Fetch that moves the high
watermark schedules the answer with `call_soon`, encoded with a few packs
(`encode_single_produce_response`, held byte for byte to kio) and sent, all without a task.

Served here only: Produce v3-v13 with acks 1 or -1, no transactional id, one topic of one
partition with records (one batch, not a control batch) led here by a hosted partition, on a
connection with no SASL and a transport that sends at once (plaintext, the simulator), a broker
with no authorizer and no produce or request quota in force, with debug logging off and no throttle pending on the
connection. Anything else (acks=0, a transaction, several partitions, an unknown or internal
topic, a partition not hosted here, an empty or multi-batch or control record set, a malformed
frame) is left untouched to the generic path, which answers it as before. What is served here
gets the answer the generic handler gives, errors included (an append's refusal, NOT_LEADER,
NOT_ENOUGH_REPLICAS, CORRUPT_MESSAGE, a duplicate or out-of-order sequence, a timeout: the same
codes and messages, encoded by `encode_produce_response` as there); the tests compare the bytes
(tests/inprocess/broker/test_fast_produce.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.purgatory import DelayedProduce, ProduceWait
from odradek.cluster.metadata import INTERNAL_TOPICS
from odradek.protocol.produce_codec import (
    SingleProduce,
    TopicProduceResult,
    decode_single_produce_request,
    encode_produce_response,
    encode_single_produce_response,
)
from odradek.protocol.records import batch_is_control, batch_size
from odradek.storage.log import AppendOrigin

if TYPE_CHECKING:
    from odradek.broker.connection_state import ConnectionState
    from odradek.broker.partition import Partition
    from odradek.broker.replica_manager import ProduceResult, ReplicaManager

# the flushes demanded by flush.messages (the one step here that awaits), kept until done
_flushing: set[asyncio.Task[None]] = set()


class Connection(Protocol):
    """What this path uses of its connection (broker/connection.py's Connection)."""

    services: Any  # the broker's services (BrokerServices, which only the connection driver sees)
    state: ConnectionState
    loop: asyncio.AbstractEventLoop
    closed: bool

    def fast_answer(self, correlation_id: int, chunks: list, size: int, flexible: bool = True) -> None: ...

    def fast_done(self) -> None: ...

    def fast_failed(self, version: int) -> None: ...


def accept(conn: Connection, frame: bytes) -> FastProduce | None:
    """`frame`, the first request waiting on `conn` (whose processor is idle), as a Produce this
    path serves (its `start()` serves it), or None for the generic path; nothing is changed
    before `start()`. The checks are the handler's (handlers/k00_produce.py), each of which
    sends a request that fails it to the generic path."""
    req = decode_single_produce_request(frame)
    if req is None or req.acks not in (1, -1):
        return None
    services = conn.services
    if services.acls is not None:
        return None
    quotas = services.client_quotas() if services.quotas is not None else None
    if quotas is not None and (quotas.produce.enabled or quotas.request.enabled):
        return None  # a quota to charge (the produce quota for its bytes, the request quota for its time)
    snap = services.snapshot
    if req.version >= 13:
        info = snap.topic_by_id(uuid.UUID(bytes=req.topic))  # type: ignore[arg-type]
    else:
        info = snap.topics.get(req.topic)
    if info is None or info.name in INTERNAL_TOPICS or not 0 <= req.partition < len(info.partitions):
        return None
    records = req.records
    size = batch_size(records)
    if (size is not None and size < len(records)) or batch_is_control(records):
        return None
    part = services.replica_manager.partitions.get((info.name, req.partition))
    if part is None:
        return None
    return FastProduce(conn, req, part)


class FastProduce:
    """One Produce on the fast path, from its arrival to its answer: the steps of
    k00_produce.handle and ReplicaManager.append_records for one partition, without their
    coroutines."""

    __slots__ = ("conn", "req", "part", "version", "result", "wait")

    def __init__(self, conn: Connection, req: SingleProduce, part: Partition) -> None:
        self.conn = conn
        self.req = req
        self.part = part
        self.version = req.version
        self.result: ProduceResult | None = None
        self.wait: ProduceWait | None = None

    def start(self) -> None:
        """Serve it: answered now, or parked in the produce purgatory until it is."""
        conn = self.conn
        state = conn.state
        state.request_cpu = state.request_step = None  # no request quota (none is configured)
        rm: ReplicaManager = conn.services.replica_manager
        req = self.req
        result, info = rm.append_now(self.part, req.records, int(time.time() * 1000), req.acks, AppendOrigin.CLIENT)
        self.result = result
        if info is not None and info.needs_flush:  # flush.messages: flushed before the answer
            task = conn.loop.create_task(self._flush(rm))
            _flushing.add(task)
            task.add_done_callback(_flushing.discard)
            return
        self._replicate(rm)

    async def _flush(self, rm: ReplicaManager) -> None:
        try:
            assert self.result is not None
            self.result = await rm.flush_appended(self.part, self.result)
            self._replicate(rm)
        except Exception:
            self.conn.fast_failed(self.version)

    def _replicate(self, rm: ReplicaManager) -> None:
        """acks=all: wait for the ISR as append_records does (DelayedProduce, one partition)."""
        result = self.result
        assert result is not None
        if self.req.acks == -1 and not result.error_code:
            w = self.wait = ProduceWait(self.part, result.last_offset + 1)
            if not DelayedProduce(rm.produce_purgatory, [w]).park(self.req.timeout_ms / 1000, self._woken):
                return
        self._answer()

    def _woken(self) -> None:
        """The purgatory's callback (the high watermark passed the append, the partition failed,
        the timeout): the answer is sent on the loop's next turn, not inside what woke it."""
        self.conn.loop.call_soon(self._after_wait)

    def _after_wait(self) -> None:
        conn = self.conn
        if conn.closed:
            conn.fast_done()
            return
        try:
            self._answer()
        except Exception:
            conn.fast_failed(self.version)

    def _answer(self) -> None:
        """The handler's response for this result (with the acks=all wait's error, if any),
        encoded and sent."""
        r, req = self.result, self.req
        assert r is not None
        if self.wait is not None and self.wait.error_code:
            r.error_code = self.wait.error_code
        v = req.version
        if not r.error_code and not r.record_errors:
            body = encode_single_produce_response(
                v, req.topic, req.partition, r.base_offset, r.log_append_time, r.log_start_offset
            )
        else:
            part = r.answer(req.partition)
            if v >= 13:
                topic = TopicProduceResult(None, uuid.UUID(bytes=req.topic), [part])  # type: ignore[arg-type]
            else:
                topic = TopicProduceResult(req.topic, None, [part])  # type: ignore[arg-type]
            body = encode_produce_response(v, [topic])
        self.conn.fast_answer(req.correlation_id, [body], len(body), v >= 9)
