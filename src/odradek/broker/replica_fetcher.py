"""Followers copy their leaders' logs with ordinary Fetch requests (Kafka's ReplicaFetcherThread).

One `ReplicaFetcher` per leader broker (`num.replica.fetchers` per leader, partitions spread
over them by hash) fetches every partition this broker follows from that leader: Fetch v12
with `replica_id` = this broker, each partition from its log end offset with its current
leader epoch and the last epoch in its log (`last_fetched_epoch`, KIP-320). For each
partition of the response:
- records: appended as they are (same offsets, same bytes, the leader's epochs kept), then
  the leader's high watermark and log start offset followed (`Partition.append_as_follower`);
- a diverging epoch (the leader's log differs from ours from some offset on): truncate there
  (the end offset of our own copy of that epoch, or the leader's end of it, whichever is
  lower), then fetch on; never by high watermark alone;
- OFFSET_OUT_OF_RANGE: ask the leader for its log end and start (ListOffsets as a replica):
  above its end, truncate to it; below its start, start over empty at its start;
- NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH and the like: back off
  (`replica.fetch.backoff.ms`) until the metadata says who leads now.
A connection error backs the whole fetcher off and reconnects. The leader answers as soon as
it has something (its follower fetches are woken by appends), else after
`replica.fetch.wait.max.ms`.

Runs on the broker's event loop; appends are the same in-loop writes as a producer's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.partition import Partition, Role
from odradek.client.conn import Connection
from odradek.client.errors import KafkaConnectionError
from odradek.cluster.metadata import BrokerInfo
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.records import HEADER_SIZE, LOG_OVERHEAD

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig

log = logging.getLogger("odradek.broker.replica_fetcher")

FETCH, LIST_OFFSETS = 1, 2
FETCH_VERSION = 12  # topic names (v13+ use ids); diverging epochs; replica_id in the request body
_BACKOFF_ERRORS = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.unknown_topic_id,
    ErrorCode.kafka_storage_error,
    ErrorCode.replica_not_available,
}


@dataclass(frozen=True)
class FetcherConfig:
    fetch_max_bytes: int = 1048576  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10485760  # replica.fetch.response.max.bytes
    wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    fetchers_per_leader: int = 1  # num.replica.fetchers

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> FetcherConfig:
        return cls(
            config["replica.fetch.max.bytes"],
            config["replica.fetch.response.max.bytes"],
            config["replica.fetch.wait.max.ms"],
            config["replica.fetch.min.bytes"],
            config["replica.fetch.backoff.ms"],
            config["num.replica.fetchers"],
        )


def complete_batches(records: memoryview) -> int:
    """How many leading bytes are whole batches (a response may end in a partial one)."""
    n = len(records)
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        size = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True)
        if size < HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + size > n:
            break
        pos += LOG_OVERHEAD + size
    return pos


class ReplicaFetcher:
    def __init__(self, node_id: int, leader: BrokerInfo, index: int, config: FetcherConfig) -> None:
        self.node_id = node_id
        self.leader = leader
        self.index = index
        self.config = config
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._delayed: dict[tuple[str, int], float] = {}  # until when a partition waits (monotonic s)
        self._wake = asyncio.Event()
        self._conn: Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def __repr__(self) -> str:
        n = len(self.partitions)
        return f"ReplicaFetcher(broker {self.node_id} <- {self.leader.node_id} #{self.index}, {n} partitions)"

    def add(self, part: Partition) -> None:
        self.partitions[part.key] = part
        self._delayed.pop(part.key, None)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def moved(self, leader: BrokerInfo) -> None:
        self.leader = leader
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self._delayed.pop(key, None)

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._conn is not None:
            self._conn.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # ------------------------------------------------------------------ loop
    async def _run(self) -> None:
        backoff = self.config.backoff_ms / 1000
        while not self._stopped:
            now = time.monotonic()
            ready = [p for k, p in self.partitions.items() if self._delayed.get(k, 0) <= now]
            if not ready:
                self._wake.clear()
                soonest = min(self._delayed.values(), default=now + 1) - now
                try:
                    await asyncio.wait_for(self._wake.wait(), max(soonest, 0.01))
                except TimeoutError:
                    pass
                continue
            try:
                await self._fetch_once(ready)
            except (KafkaConnectionError, KafkaError, OSError) as e:
                log.info("fetching from broker %d failed: %r; retrying in %.1f s", self.leader.node_id, e, backoff)
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                await asyncio.sleep(backoff)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying", self.leader.node_id)
                await asyncio.sleep(backoff)

    async def _connection(self) -> Connection:
        if self._conn is None or not self._conn.connected:
            self._conn = await Connection(
                self.leader.host,
                self.leader.port,
                node_id=self.leader.node_id,
                client_id=f"broker-{self.node_id}-fetcher-{self.index}",
                request_timeout_ms=30000 + self.config.wait_max_ms,
            ).connect()
        return self._conn

    async def _fetch_once(self, ready: list[Partition]) -> None:
        conn = await self._connection()
        sent: dict[tuple[str, int], tuple[Partition, int, int]] = {}
        topics: dict[str, list[dict[str, int]]] = {}
        for part in ready:
            if part.role is not Role.FOLLOWER:
                continue
            lg = part.log
            offset = lg.log_end_offset
            sent[part.key] = (part, offset, part.leader_epoch)
            topics.setdefault(part.topic, []).append(
                {
                    "partition": part.partition,
                    "current_leader_epoch": part.leader_epoch,
                    "fetch_offset": offset,
                    "last_fetched_epoch": lg.epoch_cache.latest_epoch,
                    "log_start_offset": lg.log_start_offset,
                    "partition_max_bytes": self.config.fetch_max_bytes,
                }
            )
        if not sent:
            return
        data = {
            "replica_id": self.node_id,
            "max_wait": self.config.wait_max_ms,
            "min_bytes": self.config.min_bytes,
            "max_bytes": self.config.response_max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "rack_id": "",
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
        }
        version = min(conn.version(FETCH), FETCH_VERSION)
        resp = await conn.request(FETCH, data, version=version)
        if int(resp.error_code):
            raise KafkaError(f"Fetch from broker {self.leader.node_id}: error {int(resp.error_code)}")
        for t in resp.responses:
            for p in t.partitions:
                entry = sent.get((t.topic, int(p.partition_index)))
                if entry is None:
                    continue
                part, offset, epoch = entry
                if (
                    self.partitions.get(part.key) is not part
                    or part.leader_epoch != epoch
                    or part.role is not Role.FOLLOWER
                ):
                    continue  # no longer ours to fetch, or the leader changed meanwhile
                await self._handle(conn, part, offset, p)

    async def _handle(self, conn: Connection, part: Partition, offset: int, p) -> None:  # noqa: ANN001 - FetchedPartition
        code = int(p.error_code)
        if code == 0:
            diverging = getattr(p, "diverging_epoch", None)
            if diverging is not None:
                self._truncate_diverging(part, offset, *diverging)
                return
            records = p.records
            if records is not None and len(records):
                whole = complete_batches(records)
                records = records[:whole]
            part.append_as_follower(records or b"", int(p.high_watermark), int(p.log_start_offset))
            return
        if code == ErrorCode.offset_out_of_range:
            await self._out_of_range(conn, part, offset)
            return
        if code not in _BACKOFF_ERRORS:
            log.warning("%s-%d: fetch from broker %d: error %d", part.topic, part.partition, self.leader.node_id, code)
        self._delayed[part.key] = time.monotonic() + self.config.backoff_ms / 1000

    def _truncate_diverging(self, part: Partition, offset: int, epoch: int, end_offset: int) -> None:
        """KIP-320: our log diverges from the leader's after `end_offset` of `epoch` (the leader's
        view): keep what both have, i.e. up to the lower of that and the end of our own copy of
        that epoch (our end for the largest epoch <= it)."""
        lg = part.log
        if epoch < 0 or end_offset < 0:
            target = lg.high_watermark  # the leader knows none of our epochs: what was committed stays
        else:
            ours_epoch, ours_end = lg.end_offset_for_epoch(epoch)
            target = end_offset if ours_end < 0 else min(end_offset, ours_end)
        target = min(target, offset)
        log.info(
            "%s-%d: log diverges from leader %d's at epoch %d (end %d): truncating %d -> %d",
            part.topic,
            part.partition,
            self.leader.node_id,
            epoch,
            end_offset,
            offset,
            target,
        )
        part.truncate_to(target)

    async def _out_of_range(self, conn: Connection, part: Partition, offset: int) -> None:
        latest = await self._leader_offset(conn, part, -1)
        earliest = await self._leader_offset(conn, part, -2)
        if offset > latest >= 0:
            log.warning(
                "%s-%d: fetch offset %d is past leader %d's log end %d: truncating to it",
                part.topic,
                part.partition,
                offset,
                self.leader.node_id,
                latest,
            )
            part.truncate_to(latest)
        elif earliest > offset:
            log.warning(
                "%s-%d: fetch offset %d is below leader %d's log start %d: starting over there",
                part.topic,
                part.partition,
                offset,
                self.leader.node_id,
                earliest,
            )
            part.truncate_fully_and_start_at(earliest)
        else:
            self._delayed[part.key] = time.monotonic() + self.config.backoff_ms / 1000

    async def _leader_offset(self, conn: Connection, part: Partition, timestamp: int) -> int:
        data = {
            "replica_id": self.node_id,
            "isolation_level": 0,
            "topics": [
                {
                    "name": part.topic,
                    "partitions": [
                        {
                            "partition_index": part.partition,
                            "current_leader_epoch": part.leader_epoch,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        }
        resp = await conn.request(LIST_OFFSETS, data)
        p = resp.topics[0].partitions[0]
        if int(p.error_code):
            raise KafkaError(
                f"ListOffsets {part.topic}-{part.partition} from broker {self.leader.node_id}: "
                f"error {int(p.error_code)}"
            )
        return int(p.offset)


class ReplicaFetcherManager:
    """Which fetcher fetches which followed partition: by leader, then by hash."""

    def __init__(self, node_id: int, config: FetcherConfig) -> None:
        self.node_id = node_id
        self.config = config
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[tuple[str, int], tuple[int, int]] = {}

    def follow(self, part: Partition, leader: BrokerInfo) -> None:
        index = hash(part.key) % max(self.config.fetchers_per_leader, 1)
        key = (leader.node_id, index)
        old = self._assigned.get(part.key)
        if old is not None and old != key:
            self._fetcher_remove(old, part.key)
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(self.node_id, leader, index, self.config)
        elif fetcher.leader != leader:
            fetcher.moved(leader)  # the leader broker restarted on another endpoint
        self._assigned[part.key] = key
        fetcher.add(part)

    def unfollow(self, key: tuple[str, int]) -> None:
        at = self._assigned.pop(key, None)
        if at is not None:
            self._fetcher_remove(at, key)

    def _fetcher_remove(self, at: tuple[int, int], key: tuple[str, int]) -> None:
        fetcher = self.fetchers.get(at)
        if fetcher is not None:
            fetcher.remove(key)

    async def stop(self) -> None:
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._assigned.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
