"""The fetcher: Fetch requests per leader, buffered decoded records, offset lookups.

A background task keeps at most one Fetch in flight per broker, for the assigned,
unpaused partitions with a known position and little buffered data (so the next batch
is usually on its way while the application works through the last one). Responses are
decoded on arrival (`_records.decode_fetched`) and buffered per partition; `poll` takes
records from the buffers and advances positions. In columnar mode (`set_columnar`, used by
`poll_columns`) responses are decoded into `RecordColumns` instead, one per response and
partition, and `take_columns` hands them out whole.

``isolation.level=read_committed``: the broker serves data up to the last stable offset and
names the aborted transactions in that range; their batches are found from the batch
headers (`_records.aborted_batches`, Kafka's algorithm) and skipped while decoding. Control
batches (transaction markers) are never returned, under either level, and the position
moves past them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .. import _wire
from .. import errors as E
from .._records import aborted_batches, decode_fetched, decode_fetched_columns, scan_next_offset
from ..cluster import STALE_METADATA_CODES, Cluster
from .subscription import OffsetAndTimestamp, SubscriptionState, TopicPartition

log = logging.getLogger(__name__)


def _leader_epoch(md, tp: TopicPartition) -> int:
    """The leader epoch the metadata gives the partition, or -1."""
    ti = md.topics.get(tp.topic)
    p = ti.partitions.get(tp.partition) if ti is not None else None
    return p.leader_epoch if p is not None else -1


FETCH = 1
LIST_OFFSETS = 2
EARLIEST, LATEST = -2, -1
OFFSET_OUT_OF_RANGE = 1


class Fetcher:
    def __init__(self, cluster: Cluster, subs: SubscriptionState, config: dict[str, Any]) -> None:
        self.cluster = cluster
        self.subs = subs
        self.min_bytes = int(config["fetch.min.bytes"])
        self.max_bytes = int(config["fetch.max.bytes"])
        self.max_wait_ms = int(config["fetch.max.wait.ms"])
        self.partition_max_bytes = int(config["max.partition.fetch.bytes"])
        level = config["isolation.level"]
        if level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation.level must be read_uncommitted or read_committed, not {level!r}")
        self.isolation = 1 if level == "read_committed" else 0
        self.check_crcs = bool(config["check.crcs"])
        self.reset_policy = config["auto.offset.reset"]
        self.rack = config.get("client.rack") or ""
        self.backoff = int(config["retry.backoff.ms"]) / 1000
        self.prefetch_records = max(int(config["max.poll.records"]), 1)
        self._in_flight: dict[int, asyncio.Task] = {}
        self._wake: asyncio.Event | None = None
        self.data_ready: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._running = False
        self._resetting = False
        self.columnar = False

    def set_columnar(self, on: bool) -> None:
        """Decode into `RecordColumns` (True) or `ConsumerRecord` lists (False). What is
        buffered in the other form is dropped and fetched again from the consumed position."""
        on = bool(on)
        if on != self.columnar:
            self.columnar = on
            for st in self.subs.assignment.values():
                st.clear_buffer()

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self.data_ready = asyncio.Event()
        self._running = True
        # new metadata may name a leader a partition was waiting for: look again at once
        self.cluster.add_listener(lambda _md: self.wakeup())
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._running = False
        for t in list(self._in_flight.values()):
            t.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    def wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------ background loop
    async def _run(self) -> None:
        while self._running:
            try:
                await self._resolve_positions()
                self._send_fetches()
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self.max_wait_ms / 1000 + 0.5)
                except TimeoutError:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as e:  # pragma: no cover - keep fetching
                log.warning("fetcher loop error: %r", e)
                await asyncio.sleep(self.backoff)

    async def _resolve_positions(self) -> None:
        """Apply pending offset resets (ListOffsets earliest/latest)."""
        pending = {tp: st.reset_to for tp, st in self.subs.assignment.items() if st.reset_to is not None}
        if not pending or self._resetting:
            return
        self._resetting = True
        try:
            ts = {tp: EARLIEST if how == "earliest" else LATEST for tp, how in pending.items()}
            try:  # partitions without a leader yet stay pending; the others start now
                offsets = await self.list_offsets(ts, partial=True)
            except E.KafkaError as e:
                log.debug("offset reset failed: %r", e)
                await asyncio.sleep(self.backoff)
                return
            for tp, (offset, _ts) in offsets.items():
                st = self.subs.assignment.get(tp)
                if st is not None and st.reset_to is not None:
                    st.seek(offset)
        finally:
            self._resetting = False

    def _send_fetches(self) -> None:
        md = self.cluster.metadata
        by_node: dict[int, list] = {}
        for tp, st in self.subs.fetchable():
            if st.fetching or len(st.buffer) >= 2:
                continue
            ti = md.topics.get(tp.topic)
            p = ti.partitions.get(tp.partition) if ti is not None else None
            if p is None or p.leader < 0:
                self.cluster.add_topics([tp.topic])
                self.cluster.request_update()
                continue
            if p.leader in self._in_flight:
                continue
            by_node.setdefault(p.leader, []).append((tp, st))
        for node, parts in by_node.items():
            for _tp, st in parts:
                st.fetching = True
            task = asyncio.get_running_loop().create_task(self._fetch(node, parts))
            self._in_flight[node] = task

    async def _fetch(self, node: int, parts: list) -> None:
        sent = {tp: (st, st.epoch, st.fetch_position) for tp, st in parts}
        released = False
        try:
            topics: dict[str, list] = {}
            md = self.cluster.metadata
            for tp, (_st, _epoch, pos) in sent.items():
                topics.setdefault(tp.topic, []).append(
                    {
                        "partition": tp.partition,
                        # KIP-320: a broker on another leader epoch refuses it (FENCED_/UNKNOWN_LEADER_EPOCH)
                        "current_leader_epoch": _leader_epoch(md, tp),
                        "fetch_offset": pos,
                        "log_start_offset": -1,
                        "last_fetched_epoch": -1,
                        "partition_max_bytes": self.partition_max_bytes,
                    }
                )
            data = {
                "replica_id": -1,
                "max_wait": self.max_wait_ms,
                "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes,
                "isolation_level": self.isolation,
                "session_id": 0,
                "session_epoch": -1,
                "rack_id": self.rack,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [],
            }
            try:
                conn = await self.cluster.connection(node)
                resp = await conn.request(FETCH, data, timeout=conn.request_timeout + self.max_wait_ms / 1000)
            except E.KafkaError as e:
                log.debug("fetch from %s failed: %r", node, e)
                self.cluster.request_update()
                await asyncio.sleep(self.backoff)
                return
            code = int(getattr(resp, "error_code", 0))
            if code:
                log.debug("fetch error %s", code)
                await asyncio.sleep(self.backoff)
                return
            arrived = []  # (tp, st, pos, raw, ahead) to decode once the next Fetch is out
            for t in resp.responses:
                for p in t.partitions:
                    tp = TopicPartition(t.topic, int(p.partition_index))
                    entry = sent.get(tp)
                    if entry is None:
                        continue
                    st, epoch, pos = entry
                    if self.subs.assignment.get(tp) is not st or st.epoch != epoch:
                        continue  # seeked or unassigned meanwhile
                    pcode = int(p.error_code)
                    if pcode:
                        self._partition_error(tp, st, pcode)
                        continue
                    st.high_watermark = int(p.high_watermark)
                    st.log_start_offset = int(getattr(p, "log_start_offset", -1))
                    st.last_stable_offset = int(getattr(p, "last_stable_offset", -1))
                    raw = p.records
                    if not raw:
                        continue
                    ahead = scan_next_offset(raw, pos)
                    if ahead > pos:
                        st.ahead = ahead
                    aborted = None
                    if self.isolation:
                        txns = p.aborted_transactions
                        if txns:
                            aborted = aborted_batches(raw, _aborted_pairs(txns))
                    arrived.append((tp, st, epoch, pos, raw, ahead, aborted))
            # The next Fetch goes out from the offsets the batch headers give, before this
            # response is decoded: the broker serves it while we decode (one yield sends it).
            self._release(node, sent)
            released = True
            if any(a[5] > a[3] for a in arrived):
                self._send_fetches()
                await asyncio.sleep(0)
            got = False
            for tp, st, epoch, pos, raw, ahead, aborted in arrived:
                if self.subs.assignment.get(tp) is not st or st.epoch != epoch:
                    continue  # seeked or unassigned while the next Fetch went out
                st.ahead = None
                decode = decode_fetched_columns if self.columnar else decode_fetched
                try:
                    recs, nxt = decode(tp.topic, tp.partition, raw, pos, check_crcs=self.check_crcs, aborted=aborted)
                except E.KafkaError as e:
                    st.error = e
                    st.epoch += 1  # drop what was fetched past the bad batch
                    got = True
                    continue
                except ValueError as e:
                    st.error = E.CorruptMessageError(str(e))
                    st.epoch += 1
                    got = True
                    continue
                if nxt != ahead and ahead > pos:
                    st.epoch += 1  # the headers misled the early Fetch: drop its answer
                if nxt > pos:
                    st.buffer.append([recs if recs is not None else [], 0, nxt])
                    if recs:
                        got = True
                elif len(raw) >= self.partition_max_bytes:
                    st.error = E.RecordTooLargeClientError(
                        f"{tp.topic}-{tp.partition}: a batch at {pos} is larger than max.partition.fetch.bytes"
                    )
                    got = True
            if got:
                self.data_ready.set()
        finally:
            if not released:
                self._release(node, sent)

    def _release(self, node: int, sent: dict) -> None:
        """This Fetch is answered: its partitions and its broker may be fetched again."""
        for _tp, (st, _e, _p) in sent.items():
            st.fetching = False
        if self._in_flight.get(node) is asyncio.current_task():
            del self._in_flight[node]
        self.wakeup()

    def _partition_error(self, tp: TopicPartition, st, code: int) -> None:
        if code == OFFSET_OUT_OF_RANGE:
            if self.reset_policy in ("earliest", "latest"):
                st.reset_to = self.reset_policy
                st.clear_buffer()
            else:
                st.error = E.OffsetOutOfRangeError(f"{tp.topic}-{tp.partition}: offset {st.position} out of range")
                self.data_ready.set()
        elif code in STALE_METADATA_CODES:
            self.cluster.request_update()
        else:
            cls = E.error_class(code)
            if not cls.retriable:
                st.error = cls(f"{tp.topic}-{tp.partition}")
                self.data_ready.set()

    # ------------------------------------------------------------------ consuming
    def take(self, max_records: int) -> list:
        """Buffered records in partition order, at most `max_records`; advances positions."""
        out: list = []
        errors = []
        for _tp, st in list(self.subs.assignment.items()):
            if st.error is not None:
                errors.append(st)
                continue
            if st.paused:
                continue
            buf = st.buffer
            while buf and len(out) < max_records:
                entry = buf[0]
                recs, idx, nxt = entry
                room = max_records - len(out)
                chunk = recs[idx : idx + room]
                out.extend(chunk)
                idx += len(chunk)
                if idx >= len(recs):
                    buf.popleft()
                    st.position = nxt
                else:
                    entry[1] = idx
                    st.position = recs[idx].offset
            if len(out) >= max_records:
                break
        _raise_if_nothing_else(errors, out)
        if out:
            self.wakeup()
        return out

    def take_columns(self) -> list:
        """Every buffered `RecordColumns` (columnar mode), in partition order; advances positions."""
        out: list = []
        errors = []
        for _tp, st in list(self.subs.assignment.items()):
            if st.error is not None:
                errors.append(st)
                continue
            if st.paused:
                continue
            buf = st.buffer
            while buf:
                cols, _idx, nxt = buf.popleft()
                if cols:
                    out.append(cols)
                st.position = nxt
        _raise_if_nothing_else(errors, out)
        self.wakeup()
        return out

    def has_buffered(self) -> bool:
        return any(st.buffer and not st.paused for st in self.subs.assignment.values()) or any(
            st.error is not None for st in self.subs.assignment.values()
        )

    # ------------------------------------------------------------------ offsets
    async def list_offsets(self, timestamps: dict, timeout: float | None = None, partial: bool = False) -> dict:
        """{tp: (offset, timestamp)} for each tp's timestamp (-2 earliest, -1 latest).

        `partial`: answer for the partitions that have a leader and leave out those that
        have none or whose leader answers a retriable error (a metadata refresh is requested
        for them), instead of retrying until every partition has its answer."""
        result: dict = {}
        remaining = dict(timestamps)

        async def attempt():
            md = self.cluster.metadata
            by_node: dict[int, dict] = {}
            for tp, ts in list(remaining.items()):
                leader = self.cluster.leader_for(tp.topic, tp.partition)
                if leader < 0 and self.cluster.partitions_for(tp.topic) is None:
                    # a topic just assigned, not in the metadata yet: ask now, not after a backoff
                    try:
                        await self.cluster.wait_for_topic(tp.topic, min(1.0, 10 * self.backoff))
                    except E.KafkaTimeoutError:
                        pass  # retried below like any leaderless partition, until the deadline
                    leader = self.cluster.leader_for(tp.topic, tp.partition)
                if leader < 0:
                    self.cluster.add_topics([tp.topic])
                    if partial:
                        self.cluster.request_update()
                        continue
                    raise E.LeaderNotAvailableError(f"no leader for {tp.topic}-{tp.partition}")
                by_node.setdefault(leader, {})[tp] = ts
            del md
            for node, tps in by_node.items():
                topics: dict[str, list] = {}
                for tp, ts in tps.items():
                    epoch = _leader_epoch(self.cluster.metadata, tp)
                    topics.setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "timestamp": ts, "current_leader_epoch": epoch}
                    )
                resp = await self.cluster.send(
                    node,
                    LIST_OFFSETS,
                    {
                        "replica_id": -1,
                        "isolation_level": self.isolation,
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    },
                )
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, int(p.partition_index))
                        code = int(p.error_code)
                        if code:
                            err = E.error_class(code)(f"ListOffsets {tp.topic}-{tp.partition}")
                            if partial and err.retriable:
                                self.cluster.request_update()
                                continue
                            raise err
                        result[tp] = (int(p.offset), _wire.ms(getattr(p, "timestamp", -1)))
                        remaining.pop(tp, None)
            return result

        return await self.cluster.retrying(attempt, timeout=timeout, what="ListOffsets")

    async def offsets_for_times(self, timestamps: dict, timeout: float | None = None) -> dict:
        raw = await self.list_offsets({TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()}, timeout)
        return {tp: (None if off < 0 else OffsetAndTimestamp(off, ts)) for tp, (off, ts) in raw.items()}


def _aborted_pairs(txns) -> list:
    """(producer id, first offset) pairs from the hand decoder's tuples or kio's entities."""
    if isinstance(txns[0], tuple):
        return txns
    return [(int(t.producer_id), int(t.first_offset)) for t in txns]


def _raise_if_nothing_else(errored: list, out: list) -> None:
    """A partition's error is raised (once) by a take that has no records to hand out."""
    if errored and not out:
        st = errored[0]
        err, st.error = st.error, None
        raise err


def now_ms() -> int:
    return int(time.time() * 1000)
