"""Followers copy their leaders' logs with ordinary Fetch requests (Kafka's ReplicaFetcherThread).

`ReplicaFetcherManager` gives every partition this broker follows to one `ReplicaFetcher`:
one per leader broker and index (`num.replica.fetchers` per leader, partitions spread over
them by a hash of topic and partition). A fetcher is a loop on the broker's event loop: ask
its `FetcherState` (fetcher_state.py, the decisions) which partitions to fetch, send that
Fetch through its `RemoteLeaderEndpoint` (leader_endpoint.py, the I/O), and apply, partition
by partition, what the state decides: append (`Partition.append_as_follower`), truncate,
ask the leader's offsets and decide again, back off or park. An exception while handling one
partition becomes that partition's backoff or park; the others go on. A failed request
(connection lost, timeout) backs off every partition in it; the next one reconnects. The
leader answers as soon as it has something (its follower fetches are woken by appends),
else after `replica.fetch.wait.max.ms`.

Time comes from `time.monotonic` (a simulator replaces it); appends are the same in-loop
writes as a producer's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from odradek.broker.partition import Partition, Role
from odradek.broker.replication.channel import ConnectionProvider, direct_connections
from odradek.broker.replication.fetcher_state import (
    EXPECTED_ERRORS,
    Action,
    Append,
    Backoff,
    FetcherConfig,
    FetcherState,
    Key,
    ListLeaderOffsets,
    Park,
    PartitionData,
    PartitionRequest,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from odradek.broker.replication.leader_endpoint import EARLIEST, LATEST, LeaderOffsetError, RemoteLeaderEndpoint
from odradek.cluster.metadata import BrokerInfo
from odradek.protocol.errors import KafkaError

if TYPE_CHECKING:
    from odradek.cluster.store import MetadataStore

__all__ = ["FetcherConfig", "ReplicaFetcher", "ReplicaFetcherManager"]

log = logging.getLogger("odradek.broker.replica_fetcher")


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicaFetcher:
    def __init__(
        self,
        node_id: int,
        leader: BrokerInfo,
        index: int,
        config: FetcherConfig,
        connect: ConnectionProvider,
        broker_epoch: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.index = index
        self.config = config
        self.state = FetcherState(config)
        self.endpoint = RemoteLeaderEndpoint(node_id, leader, connect, f"replica-fetcher-{index}", config, broker_epoch)
        self.partitions: dict[Key, Partition] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def leader(self) -> BrokerInfo:
        return self.endpoint.leader

    def __repr__(self) -> str:
        n = len(self.partitions)
        return f"ReplicaFetcher(broker {self.node_id} <- {self.leader.node_id} #{self.index}, {n} partitions)"

    def add(self, part: Partition) -> None:
        """Fetch `part` from this leader at its current leader epoch (kept as it is when it
        already does at that epoch: a partition parked or waiting stays so)."""
        self.partitions[part.key] = part
        self.state.add(part.topic, part.partition, part.topic_id, part.leader_epoch)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def moved(self, leader: BrokerInfo) -> None:
        self.endpoint.moved(leader)

    def remove(self, key: Key) -> None:
        self.partitions.pop(key, None)
        self.state.remove(key)

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.endpoint.close()

    # ------------------------------------------------------------------ loop
    async def _run(self) -> None:
        while not self._stopped:
            now = _now_ms()
            if not self.state.refresh(now, self.partitions):
                self._wake.clear()
                soonest = self.state.next_ready_ms(now)
                wait_ms = 1000 if soonest is None else min(max(soonest - now, 1), 1000)
                try:
                    await asyncio.wait_for(self._wake.wait(), wait_ms / 1000)
                except TimeoutError:
                    pass
                continue
            await self._fetch_once()

    async def _fetch_once(self) -> None:
        """One Fetch, its answer applied partition by partition. A function of its own so that
        nothing of the answer outlives it: its records are views of the connection's receive
        buffer, and held (by the loop's locals) while the next Fetch waits they keep that buffer
        from being reused, so each answer would cost a new one (allocated, zeroed, faulted in)."""
        try:
            responses = await self.endpoint.fetch(self.state)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # connection lost, a timeout, a top-level error: every partition waits
            log.info(
                "fetching from broker %d failed: %r; retrying in %.1f s",
                self.leader.node_id,
                e,
                self.config.backoff_ms / 1000,
            )
            self.state.on_fetch_failed(list(self.state.fetching.values()), _now_ms(), repr(e))
            return
        now = _now_ms()
        # in a fetch session, a partition without news is not answered: the answer is walked,
        # not the request (`fetching` is what the request asked: only `refresh` changes it)
        asked = self.state.fetching
        for key, data in responses.items():
            req = asked.get(key)
            if req is not None and self._handle(req, data, now):
                await self._out_of_range(req)
                now = _now_ms()

    def _handle(self, req: PartitionRequest, data: PartitionData, now_ms: int) -> bool:
        """Decide and apply what one answered partition says, without awaiting (the common
        case costs no coroutine per partition). True when the leader's offsets are to be
        asked first (OFFSET_OUT_OF_RANGE: `_out_of_range`)."""
        part = self.partitions.get(req.key)
        if part is None or part.role is not Role.FOLLOWER:
            return False
        try:
            action = self.state.on_partition(req, data, part, now_ms)
            if isinstance(action, ListLeaderOffsets):
                return True
            self._apply(req, part, action)
        except Exception as e:  # this partition alone: a storage error, invalid records, a bug
            self._failed(req, e)
        return False

    async def _out_of_range(self, req: PartitionRequest) -> None:
        part = self.partitions.get(req.key)
        if part is None:
            return
        try:
            try:
                end = await self.endpoint.list_offset(req, LATEST)
                start = await self.endpoint.list_offset(req, EARLIEST)
            except LeaderOffsetError as e:
                action = self.state.on_leader_offsets_error(req, e.code, _now_ms())
            except (KafkaError, OSError, TimeoutError) as e:  # no answer: this partition tries again later
                action = self.state.on_leader_offsets_failed(req, repr(e), _now_ms())
            else:
                action = self.state.on_leader_offsets(req, end, start, part, _now_ms())
            self._apply(req, part, action)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._failed(req, e)

    def _failed(self, req: PartitionRequest, e: Exception) -> None:
        action = self.state.on_exception(req.key, e, _now_ms())
        log.log(
            logging.WARNING if isinstance(action, Backoff) else logging.ERROR,
            "%s-%d: fetching from broker %d at %d failed: %s",
            req.topic,
            req.partition,
            self.leader.node_id,
            req.fetch_offset,
            action.reason,
            exc_info=(type(e), e, e.__traceback__) if not isinstance(action, Backoff) else None,
        )

    def _apply(self, req: PartitionRequest, part: Partition, action: Action) -> None:
        if isinstance(action, Append):
            part.append_as_follower(action.records, action.leader_hw, action.leader_log_start)
            self.state.done(req, part, appended=len(action.records) > 0)
        elif isinstance(action, (TruncateTo, TruncateFullyAndStartAt)):
            log.warning(
                "%s-%d: %s: %s to %d (leader %d)",
                req.topic,
                req.partition,
                action.reason,
                "truncating" if isinstance(action, TruncateTo) else "starting over empty",
                action.offset,
                self.leader.node_id,
            )
            if isinstance(action, TruncateTo):
                part.truncate_to(action.offset)
            else:
                part.truncate_fully_and_start_at(action.offset)
            stuck = self.state.truncated(req, part, _now_ms())
            if stuck is not None:
                log.warning("%s-%d: %s", req.topic, req.partition, stuck.reason)
        elif isinstance(action, Park):
            log.warning("%s-%d: parked until new metadata: %s", req.topic, req.partition, action.reason)
        elif isinstance(action, Backoff) and not action.reason.startswith(_EXPECTED):
            log.info("%s-%d: fetch from broker %d: %s", req.topic, req.partition, self.leader.node_id, action.reason)


_EXPECTED = tuple(e.name.upper() for e in EXPECTED_ERRORS)


class ReplicaFetcherManager:
    """Which fetcher fetches which followed partition: by leader, then by a hash of the
    partition (Kafka's `abs(31 * topic.hashCode + partition) % num.replica.fetchers`, with a
    hash that is the same in every process)."""

    def __init__(
        self,
        node_id: int,
        config: FetcherConfig,
        metadata: MetadataStore | None = None,
        connect: ConnectionProvider | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.metadata = metadata
        self.connect = connect or direct_connections(node_id)
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[Key, tuple[int, int]] = {}

    def broker_epoch(self) -> int:
        """This broker's epoch (its registration's session) in the metadata; -1 unknown."""
        me = self.metadata.snapshot.broker(self.node_id) if self.metadata is not None else None
        return me.epoch if me is not None else -1

    def fetcher_index(self, key: Key) -> int:
        n = max(self.config.fetchers_per_leader, 1)
        return (31 * zlib.crc32(key[0].encode()) + key[1]) % n

    def follow(self, part: Partition, leader: BrokerInfo) -> None:
        index = self.fetcher_index(part.key)
        key = (leader.node_id, index)
        old = self._assigned.get(part.key)
        if old is not None and old != key:
            self._fetcher_remove(old, part.key)
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(
                self.node_id, leader, index, self.config, self.connect, self.broker_epoch
            )
        elif fetcher.leader != leader:
            fetcher.moved(leader)  # the leader broker restarted on another endpoint
        self._assigned[part.key] = key
        fetcher.add(part)

    def unfollow(self, key: Key) -> None:
        at = self._assigned.pop(key, None)
        if at is not None:
            self._fetcher_remove(at, key)

    def _fetcher_remove(self, at: tuple[int, int], key: Key) -> None:
        fetcher = self.fetchers.get(at)
        if fetcher is not None:
            fetcher.remove(key)

    async def stop(self) -> None:
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._assigned.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
