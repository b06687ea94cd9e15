"""read_committed reads of one offset range (``kafka.isolation.level=read_committed``).

A task reads ``[start, end)`` of one partition with Fetch at isolation level 1 (the broker
answers up to the last stable offset, and names the aborted transactions that overlap what
it sends: ``aborted_transactions``, a list of (producer id, first offset)). Records of those
transactions are dropped the way Kafka's consumer drops them (clients' CompletedFetch):

* walking the batches in offset order, a producer becomes *aborted* once a batch reaches the
  first offset of one of its aborted transactions;
* a transactional data batch of an aborted producer is dropped;
* that producer's ABORT marker (a control batch) ends it: later batches of the same producer
  belong to a later transaction, committed unless the list names that one too.

Control batches never reach the rows (the decoder skips them, as under read_uncommitted).
The kept batches are decoded in contiguous runs by the client's decoder, into column buffers
(the Arrow fast path, as ``read_range`` does) or, with headers, into records.

The Fetch is sent here, not through the client's `Consumer`, because the range reader needs the
response's aborted transactions and the consumer (today) does not apply them.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Iterator

from odradek.client import errors as E
from odradek.client._records import decode_fetched, decode_fetched_columns
from odradek.client.cluster import STALE_METADATA_CODES, Cluster
from odradek.client.config import CONSUMER, make_config
from odradek.protocol.records import (
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    TRANSACTIONAL_MASK,
    CorruptRecordError,
    decode_control_record,
)

log = logging.getLogger("odradek.spark")

FETCH = 1
OFFSET_OUT_OF_RANGE = 1
ABORT_MARKER = 0
_LOG_OVERHEAD = 12
_MAGIC_AT = 16
_LENGTH = struct.Struct(">i")


def committed_runs(data, aborted: list[tuple[int, int]] | None) -> tuple[list[tuple[int, int]], int]:
    """The byte ranges ``[a, b)`` of `data` (a Fetch response's record bytes) that a
    read_committed consumer keeps, merged where adjacent, and the offset after the last complete
    batch (-1 if none). Control batches stay in the ranges (the decoder skips them); a
    truncated last batch stays too (the decoder stops before it). Legacy (v0/v1) entries have no
    producer and are kept."""
    pending = sorted(aborted or (), key=lambda a: a[1])
    i = 0
    active: set[int] = set()
    runs: list[tuple[int, int]] = []
    run_start = 0
    pos = 0
    n = len(data)
    next_offset = -1
    while pos + _MAGIC_AT < n:
        if data[pos + _MAGIC_AT] != 2:  # a legacy entry: no producer, kept
            pos += _LOG_OVERHEAD + _LENGTH.unpack_from(data, pos + 8)[0]
            continue
        if pos + HEADER_SIZE > n:
            break  # truncated: kept, the decoder stops before it
        h = HEADER.unpack_from(data, pos)
        # (base_offset, length, epoch, magic, crc, attrs, last_offset_delta, base_ts, max_ts, pid, pepoch, bseq, count)
        end = pos + _LOG_OVERHEAD + h[1]
        if end > n:
            break
        last_offset = h[0] + h[6]
        attrs, pid = h[5], h[9]
        while i < len(pending) and pending[i][1] <= last_offset:
            active.add(pending[i][0])
            i += 1
        drop = False
        if attrs & CONTROL_MASK:
            if pid in active:
                marker = decode_control_record(data, pos)
                if marker is not None and marker[1] == ABORT_MARKER:
                    active.discard(pid)
        elif attrs & TRANSACTIONAL_MASK and pid in active:
            drop = True
        if drop:
            if pos > run_start:
                runs.append((run_start, pos))
            run_start = end
        next_offset = last_offset + 1
        pos = end
    if n > run_start:
        runs.append((run_start, n))
    return runs, next_offset


class CommittedFetcher:
    """Fetch at isolation level read_committed for one partition, on a private event loop."""

    def __init__(self, consumer_config: dict, max_wait_ms: int, partition_max_bytes: int) -> None:
        cfg = {k: v for k, v in consumer_config.items() if k in CONSUMER}
        cfg["allow.auto.create.topics"] = False
        self.config = make_config(CONSUMER, cfg, {})
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.loop = asyncio.new_event_loop()
        self.cluster = Cluster(self.config)
        self.loop.run_until_complete(self.cluster.start())

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.cluster.close())
        finally:
            self.loop.close()

    def fetch(self, topic: str, partition: int, offset: int):
        """One partition's answer (a FetchedPartition); retries stale leadership until the
        client's default API timeout."""
        return self.loop.run_until_complete(
            self.cluster.retrying(lambda: self._fetch(topic, partition, offset), what="Fetch")
        )

    def log_start(self, topic: str, partition: int) -> int:
        async def go():
            leader = await self._leader(topic, partition)
            resp = await self.cluster.send(
                leader,
                2,  # ListOffsets
                {
                    "replica_id": -1,
                    "isolation_level": 1,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [{"partition_index": partition, "timestamp": -2, "current_leader_epoch": -1}],
                        }
                    ],
                },
            )
            p = resp.topics[0].partitions[0]
            if int(p.error_code):
                raise E.error_class(int(p.error_code))(f"ListOffsets {topic}-{partition}")
            return int(p.offset)

        return self.loop.run_until_complete(self.cluster.retrying(go, what="ListOffsets"))

    async def _leader(self, topic: str, partition: int) -> int:
        leader = self.cluster.leader_for(topic, partition)
        if leader < 0:
            self.cluster.add_topics([topic])
            await self.cluster.refresh()
            leader = self.cluster.leader_for(topic, partition)
            if leader < 0:
                raise E.LeaderNotAvailableError(f"no leader for {topic}-{partition}")
        return leader

    async def _fetch(self, topic: str, partition: int, offset: int):
        leader = await self._leader(topic, partition)
        data = {
            "replica_id": -1,
            "max_wait": self.max_wait_ms,
            "min_bytes": 1,
            "max_bytes": self.partition_max_bytes,
            "isolation_level": 1,
            "session_id": 0,
            "session_epoch": -1,
            "rack_id": "",
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "last_fetched_epoch": -1,
                            "partition_max_bytes": self.partition_max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        }
        conn = await self.cluster.connection(leader)
        resp = await conn.request(FETCH, data, timeout=conn.request_timeout + self.max_wait_ms / 1000)
        code = int(getattr(resp, "error_code", 0))
        if code:
            raise E.error_class(code)(f"Fetch {topic}-{partition}")
        for t in resp.responses:
            for p in t.partitions:
                if int(p.partition_index) != partition:
                    continue
                pcode = int(p.error_code)
                if pcode in STALE_METADATA_CODES:
                    self.cluster.request_update()
                    raise E.error_class(pcode)(f"Fetch {topic}-{partition}")
                return p
        raise E.KafkaError(f"Fetch {topic}-{partition}: the broker did not answer for the partition")


def decode_committed(topic: str, partition: int, data, aborted, start: int, columnar: bool) -> tuple[list, int]:
    """The committed records at or after `start` in `data`: a list of RecordColumns (columnar)
    or one list of ConsumerRecords, and the next offset to fetch (`start` if no complete batch)."""
    runs, nxt = committed_runs(data, aborted)
    out: list = []
    recs: list = []
    for a, b in runs:
        chunk = data[a:b]
        if columnar:
            cols, run_next = decode_fetched_columns(topic, partition, chunk, start)
            if cols is not None and cols.count:
                out.append(cols)
        else:
            got, run_next = decode_fetched(topic, partition, chunk, start)
            recs.extend(got)
        nxt = max(nxt, run_next)  # legacy entries: the decoder knows where they end
    if not columnar:
        out = [recs] if recs else []
    return out, max(nxt, start)


def read_committed_batches(p) -> Iterator[tuple[str, list]]:
    """The committed records of ``[p.start, ...)`` of one partition, fetch by fetch, until the
    position reaches `p.end`: ("columns", [RecordColumns]) or, with headers, ("records",
    [ConsumerRecord]); records at or past `p.end` are the caller's to cut. Data loss (the log
    start moving past the position) follows `p.fail_on_data_loss`."""
    from .planner import DataLossError, data_loss_message

    f = CommittedFetcher(p.consumer_config, max_wait_ms=100, partition_max_bytes=8 * 1024 * 1024)
    columnar = not p.include_headers
    try:
        pos, end = p.start, p.end
        idle_since = time.monotonic()
        while pos < end:
            fp = f.fetch(p.topic, p.partition, pos)
            code = int(fp.error_code)
            if code == OFFSET_OUT_OF_RANGE:
                lo = f.log_start(p.topic, p.partition)
                msg = data_loss_message(
                    f"{p.topic}-{p.partition}: offset {pos} is out of range "
                    f"(log start offset is now {lo}) while reading {p.start}..{end - 1}"
                )
                if p.fail_on_data_loss or lo <= pos:
                    raise DataLossError(msg)
                log.warning(msg)
                pos = lo
                continue
            if code:
                raise E.error_class(code)(f"Fetch {p.topic}-{p.partition}")
            raw = fp.records
            if not raw:
                if time.monotonic() - idle_since > p.poll_timeout_s:
                    msg = data_loss_message(
                        f"{p.topic}-{p.partition}: no committed records after offset {pos} within "
                        f"kafkaConsumer.pollTimeoutMs while reading up to {end - 1}"
                    )
                    if p.fail_on_data_loss:
                        raise DataLossError(msg)
                    log.warning(msg)
                    return
                continue
            try:
                items, nxt = decode_committed(p.topic, p.partition, raw, fp.aborted_transactions, pos, columnar)
            except (CorruptRecordError, ValueError) as e:
                raise E.CorruptMessageError(f"{p.topic}-{p.partition} at {pos}: {e}") from None
            if nxt <= pos:
                raise E.RecordTooLargeError(
                    f"{p.topic}-{p.partition}: a batch at {pos} is larger than the fetch size (8 MiB)"
                )
            idle_since = time.monotonic()
            for item in items:
                yield ("columns" if columnar else "records"), item
            pos = nxt
    finally:
        f.close()
