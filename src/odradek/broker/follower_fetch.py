"""The leader's fast path for a follower's Fetch request (issue 28).

A replicated single-record Produce costs the leader three requests: the Produce and one Fetch
from each follower, each of which is long-polled. On the generic path each Fetch wakes its
connection's processor task, gets a request entity from kio, a RequestContext, the Fetch
handler's coroutine (with its generic steps for consumers, ACLs and quotas), and when it waits,
a future in the purgatory and a second task wake to answer. Here, a follower's Fetch in the
common shape is served from the connection's readiness callback itself: its frame read with
one struct per part (`decode_replica_fetch_request`), its session updated, its partitions read
and recorded as the generic handler does (`ReplicaManager.read`, the same calls in the same
order), and, when it must wait, parked in the followers' purgatory with a callback instead of
a future: the append that wakes it schedules the answer with `call_soon`, which reads again,
encodes (`encode_fetch_response`, held byte for byte to kio) and sends, all without a task.

Served here only: a follower's Fetch (replica id >= 0) of v12-v16 in the shape followers send,
in an incremental session the cache knows at the epoch it expects, on a connection with no
SASL and a transport that sends at once (plaintext, the simulator), a broker with no
authorizer (a follower's Fetch needs CLUSTER_ACTION there), with debug logging off. Anything
else (a session being created, closed or evicted, an epoch the cache does not expect,
forgotten partitions, a tagged field, another version, a malformed frame) is left untouched to
the generic path, which answers it as before; what is served here gets the answer the generic
handler gives, errors included (they answer at once, as there). Kafka's behaviour does not
change: followers' Fetch requests have no quota (Kafka exempts them), and the answer is the
same bytes.
"""

from __future__ import annotations

import logging
import struct
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    CachedPartition,
    PartitionRead,
    Target,
    read_partitions,
)
from odradek.broker.partition import Isolation
from odradek.protocol.constants import ZERO_UUID
from odradek.protocol.fetch_codec import (
    PartitionResult,
    ReplicaFetchRequest,
    TopicResult,
    decode_replica_fetch_request,
    encode_fetch_response,
    encode_one_partition_response,
)

if TYPE_CHECKING:
    import asyncio

    from odradek.broker.connection_state import ConnectionState
    from odradek.broker.fetch_session import FetchSession
    from odradek.broker.replica_manager import ReplicaManager

log = logging.getLogger("odradek.broker.connection")

_I32 = struct.Struct(">i").pack
_FETCH = "fetch"  # the handler's name, as metrics count it


class Connection(Protocol):
    """What this path uses of its connection (broker/connection.py's Connection)."""

    services: Any  # the broker's services (BrokerServices, which only the connection driver sees)
    state: ConnectionState
    loop: asyncio.AbstractEventLoop
    closed: bool

    def fast_answer(self, correlation_id: int, chunks: list, size: int) -> None: ...

    def fast_done(self) -> None: ...

    def fast_failed(self, version: int) -> None: ...


def accept(conn: Connection, frame: bytes) -> FollowerFetch | None:
    """`frame`, the first request waiting on `conn` (whose processor is idle), as a follower's
    Fetch this path serves (its `start()` serves it), or None for the generic path; nothing is
    changed before `start()`."""
    req = decode_replica_fetch_request(frame)
    if req is None or req.replica_id < 0:
        return None
    services = conn.services
    if services.acls is not None:
        return None
    session_id, epoch = req.session_id, req.session_epoch
    if not session_id or epoch in (FINAL_EPOCH, INITIAL_EPOCH):
        return None
    session = services.fetch_sessions.sessions.get(session_id)
    if session is None or session.epoch != epoch:
        return None
    return FollowerFetch(conn, req, session)


class FollowerFetch:
    """One follower's Fetch on the fast path, from its arrival to its answer: the steps of
    k01_fetch.handle for a follower, without its coroutine."""

    __slots__ = (
        "conn",
        "req",
        "version",
        "correlation_id",
        "replica_id",
        "replica_epoch",
        "max_bytes",
        "session",
        "targets",
    )

    def __init__(self, conn: Connection, req: ReplicaFetchRequest, session: FetchSession) -> None:
        self.conn = conn
        self.req: ReplicaFetchRequest | None = req
        self.version = req.version
        self.correlation_id = req.correlation_id
        self.replica_id = req.replica_id
        self.replica_epoch = req.replica_epoch
        self.session = session
        self.targets: list[Target] = []
        self.max_bytes = 0

    def start(self) -> None:
        """Serve it: answered now, or parked in the followers' purgatory until it is."""
        req, self.req = self.req, None
        assert req is not None
        conn = self.conn
        s = conn.services
        self._update_session(req)
        snap = s.snapshot
        by_id = self.version >= 13
        targets = self.targets
        for (key, part), cp in self.session.partitions.items():
            if cp.named_in is not snap:  # looked up once per metadata snapshot, as the handler does
                if cp.topic_id is not None:
                    info = snap.topic_by_id(cp.topic_id)
                    cp.name = info.name if info else None
                else:
                    cp.name = key  # type: ignore[assignment]
                cp.named_in = snap
            targets.append((key, cp.name, part, cp))
        max_bytes = req.max_bytes
        self.max_bytes = min(max_bytes if max_bytes > 0 else 0x7FFFFFFF, s.config["fetch.max.bytes"])
        conn.state.request_cpu = None  # a follower's Fetch is not charged to the request quota
        rm = s.replica_manager
        results, total, errors = self._read_all(rm, True, by_id)
        wait_ms = req.max_wait_ms
        if total < req.min_bytes and wait_ms > 0 and not errors and targets:
            keys = [(name, part) for _k, name, part, _cp in targets if name is not None]
            rm.follower_fetch_purgatory.watch(
                keys, wait_ms / 1000.0, target=req.min_bytes - total, callback=self._woken
            )
            return
        self._answer(results, total)

    def _update_session(self, req: ReplicaFetchRequest) -> None:
        """As FetchSessionCache.resolve for an incremental request at the expected epoch (no
        forgotten partition: this path takes none)."""
        session = self.session
        self.conn.services.fetch_sessions.sessions.move_to_end(session.id)
        parts = session.partitions
        by_id = req.version >= 13
        for topic, plist in req.topics:
            key: object = int.from_bytes(topic, "big") if by_id else topic  # type: ignore[arg-type]
            for partition, leader_epoch, offset, last_epoch, _start, part_max in plist:
                old = parts.get((key, partition))
                if old is None:
                    cp = CachedPartition(offset, part_max, leader_epoch, last_epoch)
                    cp.topic_id = uuid.UUID(bytes=topic) if by_id else None  # type: ignore[arg-type]
                    parts[(key, partition)] = cp
                else:
                    old.asked(offset, part_max, leader_epoch, last_epoch)
        e = req.session_epoch
        session.epoch = e + 1 if e < 0x7FFFFFFF else 1

    def _read_all(
        self, rm: ReplicaManager, update_fetch_state: bool, by_id: bool
    ) -> tuple[list[PartitionRead], int, bool]:
        """Each partition of the session read as the handler reads it (`read_partitions`)."""
        return read_partitions(
            rm,
            self.targets,
            self.max_bytes,
            int(time.time() * 1000),
            by_id=by_id,
            isolation=Isolation.HIGH_WATERMARK,  # a follower reads to the log end whatever it says
            replica_id=self.replica_id,
            replica_epoch=self.replica_epoch,
            update_fetch_state=update_fetch_state,
            incremental=True,  # the fast path serves only a session's incremental fetches
        )

    def _woken(self, _satisfied: bool) -> None:
        """The purgatory's callback (an append, the timeout, a leadership change): the answer
        is read and sent on the loop's next turn, not inside the append that woke it."""
        self.conn.loop.call_soon(self._after_wait)

    def _after_wait(self) -> None:
        conn = self.conn
        if conn.closed:
            conn.fast_done()
            return
        try:
            # as Kafka's DelayedFetch: the follower's position was recorded by the first read
            results, total, _errors = self._read_all(conn.services.replica_manager, False, self.version >= 13)
            self._answer(results, total)
        except Exception:
            conn.fast_failed(self.version)

    def _answer(self, results: list[PartitionRead], total: int) -> None:
        """The handler's response for these reads (an incremental session's: the partitions
        with news), encoded and sent."""
        session = self.session
        conn = self.conn
        by_topic: dict[object, TopicResult] = {}
        partitions = session.partitions
        one: tuple[str | None, CachedPartition, PartitionResult] | None = None  # the only partition answered
        count = 0
        for key, name, cp, pr, _r in results:
            news = cp.answers(pr)
            if not news:
                continue
            if pr.records and (key, pr.partition) in partitions:
                partitions.move_to_end((key, pr.partition))
            tr = by_topic.get(key)
            if tr is None:
                tr = by_topic[key] = TopicResult(name or "", cp.topic_id if cp.topic_id is not None else ZERO_UUID, [])
            tr.partitions.append(pr)
            one = (name, cp, pr)
            count += 1
        metrics = conn.services.metrics
        if metrics is not None and total:
            out: dict[str, list[int]] = {}
            for _key, name, _cp, _pr, r in results:
                if r is not None and name is not None:
                    acc = out.setdefault(name, [0, 0])
                    acc[0] += r.size
                    acc[1] += r.offsets_returned
            for name, (nbytes, nrecords) in out.items():
                metrics.bytes_out(name, nbytes, nrecords)
        version = self.version
        if count == 1 and one is not None:
            name, cp, pr = one
            records = pr.records
            if (
                not pr.error_code
                and pr.diverging_epoch is None
                and pr.aborted is None
                and (not records or (len(records) == 1 and type(records[0]) is bytes))
            ):
                topic: bytes | str = (cp.topic_id or ZERO_UUID).bytes if version >= 13 else (name or "")
                body = encode_one_partition_response(
                    version,
                    session.id,
                    topic,
                    pr.partition,
                    pr.high_watermark,
                    pr.last_stable_offset,
                    pr.log_start_offset,
                    records[0] if records else None,
                )
                conn.fast_answer(self.correlation_id, [body], len(body))
                return
        chunks, size = encode_fetch_response(version, list(by_topic.values()), session_id=session.id)
        conn.fast_answer(self.correlation_id, chunks, size)
