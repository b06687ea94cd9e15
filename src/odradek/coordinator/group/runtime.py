"""The asyncio runtime around the group state machine, one shard per `__consumer_offsets` partition.

Owns: one `GroupCoordinatorState` per partition of `__consumer_offsets` this broker leads
(a shard, Kafka's CoordinatorShard), one event-loop timer armed for the earliest deadline of
all shards, the periodic offset-expiry check, one writer task per partition, and the
loading of shards.

Shards follow leadership: the broker calls `on_elected(topic, partition, epoch)` when it
becomes leader of a partition of `__consumer_offsets` (the shard is created and loaded by
replaying its log to the end; requests for its groups get COORDINATOR_LOAD_IN_PROGRESS
meanwhile) and `on_resigned(...)` when it stops (the shard is dropped; waiting joins and
syncs get NOT_COORDINATOR, as do later requests for its groups). On a single node every
partition is elected at start, through the same hooks.

Concurrency: everything runs on the broker's event loop. A state-machine operation runs
synchronously to completion; its records are queued, in operation order, on the writer of
the group's partition, so the log order is the order of the transitions. Replies (futures
the handlers await) are completed only after the records are committed
(`CoordinatorPartitions.append_committed` returns), then the operation's continuation
runs. No handler sleeps: JoinGroup and SyncGroup await futures that later transitions
complete.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.coordinator.group.model import GroupDescription, JoinResult, LeaveResult, Result, SyncResult
from odradek.coordinator.group.records import (
    OFFSETS_TOPIC,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    partition_for,
)
from odradek.coordinator.group.records import GroupMetadataKey as _GMK
from odradek.coordinator.group.state import CoordinatorConfig, GroupCoordinatorState
from odradek.coordinator.partitions import CoordinatorPartitions
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.errors import KafkaError
from odradek.protocol.records import (
    CONTROL_COMMIT,
    Record,
    build_batch,
    decode_control_record,
    decode_records,
    iter_batches,
)

log = logging.getLogger(__name__)

LOAD_READ_BYTES = 1 << 20
_GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


class Settings(Protocol):
    """The broker's settings by Kafka name (broker/config.py's BrokerConfig)."""

    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class RuntimeConfig:
    num_partitions: int = 50
    retention_check_interval_ms: int = 600000
    commit_timeout_ms: int = 5000
    state: CoordinatorConfig = CoordinatorConfig()

    @classmethod
    def from_broker(cls, config: Settings) -> RuntimeConfig:
        return cls(
            num_partitions=config["offsets.topic.num.partitions"],
            retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            commit_timeout_ms=config["offsets.commit.timeout.ms"],
            state=CoordinatorConfig.from_broker(config),
        )


class GroupCoordinator:
    """The broker's group coordinator: `await start()`, leadership hooks, the group operations, `await stop()`."""

    def __init__(
        self,
        config: RuntimeConfig,
        partitions: CoordinatorPartitions,
        ensure_topic: Callable[[], Awaitable[None]],
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.num_partitions = config.num_partitions
        self.partitions = partitions
        self._ensure_topic = ensure_topic
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.shards: dict[int, GroupCoordinatorState] = {}
        self.epochs: dict[int, int] = {}  # leader epoch each shard was elected at
        self.loading: set[int] = set()
        self.active = False
        self._queues: dict[int, collections.deque[Result]] = {}
        self._writers: dict[int, asyncio.Task] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._retention_timer: asyncio.TimerHandle | None = None
        self._load_queue: collections.deque[tuple[int, int]] = collections.deque()
        self._load_task: asyncio.Task | None = None
        # transactions completed on a partition while it loads: (producer id, commit), applied after
        self._completed_while_loading: dict[int, list[tuple[int, bool]]] = {}

    # =================================================================== lifecycle
    async def start(self) -> None:
        self.active = True
        self._schedule_retention()

    async def stop(self) -> None:
        self.active = False
        for h in (self._timer, self._retention_timer):
            if h is not None:
                h.cancel()
        self._timer = self._retention_timer = None
        if self._load_task is not None and not self._load_task.done():
            self._load_task.cancel()
        writers = list(self._writers.values())
        if writers:
            await asyncio.wait(writers, timeout=5)
        # Answer whatever still waits, so no handler hangs on shutdown.
        for shard in self.shards.values():
            _answer_waiting(shard, E.not_coordinator)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def group_error(self, group_id: str) -> int:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, or 0 if we serve the group."""
        if not self.active:
            return int(E.coordinator_not_available)
        p = self.partition_for(group_id)
        if p in self.loading:
            return int(E.coordinator_load_in_progress)
        if p not in self.shards:
            return int(E.not_coordinator)
        return 0

    def _shard(self, group_id: str) -> tuple[int, GroupCoordinatorState | None]:
        err = self.group_error(group_id)
        return (err, None) if err else (0, self.shards[self.partition_for(group_id)])

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (on the first FindCoordinator)."""
        await self._ensure_topic()

    # =================================================================== leadership
    def on_elected(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != OFFSETS_TOPIC or not self.active:
            return
        if self.epochs.get(partition) == leader_epoch and partition in self.shards:
            return
        self._unload(partition)
        shard = self.shards[partition] = GroupCoordinatorState(self.config.state)
        self.epochs[partition] = leader_epoch
        try:
            empty = self.partitions.log_start_offset(topic, partition) >= self.partitions.log_end_offset(
                topic, partition
            )
        except KafkaError:
            empty = False
        if empty:  # nothing to replay (a new __consumer_offsets): serve at once
            shard.loaded(None, self.clock())
            return
        self.loading.add(partition)
        self._load_queue.append((partition, leader_epoch))
        if self._load_task is None or self._load_task.done():
            self._load_task = asyncio.ensure_future(self._load_loop())

    def on_resigned(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        self._unload(partition)
        self._rearm()

    def _unload(self, partition: int) -> None:
        shard = self.shards.pop(partition, None)
        self.epochs.pop(partition, None)
        self.loading.discard(partition)
        self._completed_while_loading.pop(partition, None)
        if shard is not None:
            _answer_waiting(shard, E.not_coordinator)
            log.info("unloaded %s-%d (%d groups)", OFFSETS_TOPIC, partition, len(shard.groups))

    # =================================================================== loading
    async def _load_loop(self) -> None:
        while self._load_queue:
            partition, epoch = self._load_queue.popleft()
            if self.epochs.get(partition) != epoch:
                continue  # resigned or re-elected since
            await self._load(partition, epoch)
            await asyncio.sleep(0)
        self._rearm()

    async def _load(self, partition: int, epoch: int) -> None:
        shard = self.shards[partition]
        started = time.monotonic()
        count = 0
        offset = 0
        try:
            offset = self.partitions.log_start_offset(OFFSETS_TOPIC, partition)
            while True:
                data, end = await asyncio.to_thread(
                    self.partitions.read_log_bytes, OFFSETS_TOPIC, partition, offset, LOAD_READ_BYTES
                )
                if not data or self.epochs.get(partition) != epoch:
                    break
                for h in iter_batches(data):
                    if h.is_control:
                        if h.next_offset > offset and h.producer_id >= 0:
                            marker = decode_control_record(data, h.position)
                            if marker is not None:
                                shard.replay_end_transaction(h.producer_id, marker[1] == CONTROL_COMMIT)
                    else:
                        pid = h.producer_id if h.is_transactional else -1
                        for rec in decode_records(data, h.position):
                            if rec.offset >= offset and rec.key is not None:
                                self._replay_bytes(shard, rec.key, rec.value, rec.offset, pid)
                                count += 1
                    offset = max(offset, h.next_offset)
                if offset >= end:
                    break
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed at offset %d", OFFSETS_TOPIC, partition, offset)
        if self.epochs.get(partition) != epoch:
            return
        for producer_id, commit in self._completed_while_loading.pop(partition, ()):
            shard.complete_transaction(producer_id, commit)
        shard.loaded(None, self.clock())
        self.loading.discard(partition)
        if count:
            log.info(
                "loaded %d records of %s-%d in %.0f ms",
                count,
                OFFSETS_TOPIC,
                partition,
                (time.monotonic() - started) * 1000,
            )

    @staticmethod
    def _replay_bytes(
        shard: GroupCoordinatorState, key: bytes, value: bytes | None, offset: int, producer_id: int
    ) -> None:
        try:
            k = decode_key(key)
            v = decode_value(k, value)
        except RecordFormatError as e:
            log.warning("skipping unreadable %s record: %s", OFFSETS_TOPIC, e)
            return
        shard.replay(k, v, offset=offset, producer_id=producer_id)

    # =================================================================== writing
    def _submit(self, res: Result) -> None:
        """Queue a Result's records on its partition's writer; deliver replies when committed."""
        if not res.records:
            self._deliver(res.replies)
            if res.then is not None:
                self._submit(res.then(0, self.clock()))
            self._rearm()
            return
        p = self.partition_for(res.group_id)
        self._queues.setdefault(p, collections.deque()).append(res)
        if p not in self._writers:
            self._writers[p] = asyncio.ensure_future(self._write_loop(p))
        self._rearm()

    async def _write_loop(self, partition: int) -> None:
        q = self._queues[partition]
        try:
            while q:
                res = q.popleft()
                error = await self._append(partition, res)
                self._deliver(res.replies)
                if res.then is not None:
                    self._submit(res.then(error, self.clock()))
        finally:
            self._writers.pop(partition, None)
            if q:  # submitted while we were finishing
                self._writers[partition] = asyncio.ensure_future(self._write_loop(partition))

    async def _append(self, partition: int, res: Result) -> int:
        now = self.clock()
        records = []
        for i, (k, v) in enumerate(res.records):
            if v is None:
                value = None
            elif isinstance(k, _GMK):
                value = encode_group_value(v)  # type: ignore[arg-type]
            else:
                value = encode_offset_value(v)  # type: ignore[arg-type]
            records.append(Record(i, now, encode_key(k), value, ()))
        # TxnOffsetCommit: a transactional batch of the producer, base sequence 0 as Kafka's
        # coordinator writes it (sequences of a coordinator's appends are not checked)
        batch = build_batch(
            records,
            base_offset=0,
            producer_id=res.producer_id,
            producer_epoch=res.producer_epoch,
            base_sequence=0 if res.producer_id >= 0 else -1,
            is_transactional=res.producer_id >= 0,
        )
        try:
            res.base_offset = await self.partitions.append_committed(
                OFFSETS_TOPIC, partition, batch, self.config.commit_timeout_ms
            )
            return 0
        except KafkaError as e:
            log.warning("append to %s-%d failed: %s", OFFSETS_TOPIC, partition, e)
            return e.code
        except Exception:
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, partition)
            return int(E.unknown_server_error)

    @staticmethod
    def _deliver(replies: list[tuple[Any, Any]]) -> None:
        for token, value in replies:
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(value)

    # =================================================================== timers
    def _next_deadline(self) -> int | None:
        ats = [at for shard in self.shards.values() if (at := shard.next_deadline()) is not None]
        return min(ats) if ats else None

    def _rearm(self) -> None:
        if not self.active:
            return
        at = self._next_deadline()
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            delay = max(0.0, (at - self.clock()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.clock()
        for p, shard in list(self.shards.items()):
            if p not in self.loading:
                for res in shard.expire(now):
                    self._submit(res)
        self._rearm()

    def _schedule_retention(self) -> None:
        if not self.active:
            return
        interval = self.config.retention_check_interval_ms / 1000
        self._retention_timer = asyncio.get_running_loop().call_later(interval, self._on_retention)

    def _on_retention(self) -> None:
        try:
            now = self.clock()
            for p, shard in list(self.shards.items()):
                if p not in self.loading:  # never expire from a half-loaded state
                    for res in shard.expire_offsets(now):
                        self._submit(res)
        finally:
            self._schedule_retention()

    # =================================================================== operations
    async def _run(self, op: Callable[..., Result], *args: Any, **kw: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self._submit(op(*args, token=fut, now=self.clock(), **kw))
        return await fut

    async def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout: int,
        rebalance_timeout: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        *,
        require_known_member_id: bool,
    ) -> JoinResult:
        err, shard = self._shard(group_id)
        if shard is None:
            return JoinResult(err, member_id)
        return await self._run(
            shard.join,
            group_id,
            member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout,
            rebalance_timeout,
            protocol_type,
            protocols,
            require_known_member_id=require_known_member_id,
        )

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        err, shard = self._shard(group_id)
        if shard is None:
            return SyncResult(err)
        return await self._run(
            shard.sync, group_id, generation, member_id, group_instance_id, protocol_type, protocol_name, assignments
        )

    async def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> int:
        err, shard = self._shard(group_id)
        if shard is None:
            return err
        return await self._run(shard.heartbeat, group_id, member_id, group_instance_id, generation)

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveResult:
        err, shard = self._shard(group_id)
        if shard is None:
            return LeaveResult(err)
        return await self._run(shard.leave, group_id, members)

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: list[tuple[str, int, int, int, str | None]],
        retention_ms: int = -1,
    ) -> dict[tuple[str, int], int]:
        err, shard = self._shard(group_id)
        if shard is None:
            return {(t, p): err for t, p, *_ in offsets}
        return await self._run(
            shard.commit_offsets,
            group_id,
            member_id,
            group_instance_id,
            generation,
            offsets,
            retention_ms=retention_ms,
        )

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: list[tuple[str, int, int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: the offsets are pending in the producer's transaction once durable."""
        err, shard = self._shard(group_id)
        if shard is None:
            return {(t, p): err for t, p, *_ in offsets}
        return await self._run(
            shard.commit_txn_offsets,
            group_id,
            producer_id,
            producer_epoch,
            member_id,
            group_instance_id,
            generation,
            offsets,
        )

    def complete_transaction(self, offsets_partition: int, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """A COMMIT (`commit`) or ABORT marker of the producer was appended to this partition of
        __consumer_offsets and is committed (WriteTxnMarkers): its pending offsets become
        visible, or are dropped. A partition still loading applies it once loaded (its load may
        have read the marker already: then there is nothing left to apply); a partition this
        broker does not lead has nothing to do (its leader loads the marker from the log)."""
        if offsets_partition in self.loading:
            self._completed_while_loading.setdefault(offsets_partition, []).append((producer_id, commit))
            return
        shard = self.shards.get(offsets_partition)
        if shard is None:
            log.info(
                "transaction of producer %d (epoch %d) completed on %s-%d, which is not loaded here",
                producer_id,
                producer_epoch,
                OFFSETS_TOPIC,
                offsets_partition,
            )
            return
        shard.complete_transaction(producer_id, commit)

    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None, *, require_stable: bool = False
    ) -> tuple[int, list]:
        err, shard = self._shard(group_id)
        if shard is None:
            return err, []
        return 0, shard.fetch_offsets(group_id, topics, require_stable=require_stable)

    def describe_group(self, group_id: str) -> GroupDescription:
        err, shard = self._shard(group_id)
        if shard is None:
            return GroupDescription(group_id, err, "", "", "", [])
        return shard.describe_group(group_id)

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> tuple[int, list[tuple[str, str, str]]]:
        if not self.active:
            return int(E.coordinator_not_available), []
        err = int(E.coordinator_load_in_progress) if self.loading else 0
        out = []
        for shard in self.shards.values():
            out.extend(shard.list_groups(states, types))
        return err, out

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        futs = []
        for gid in group_ids:
            fut = asyncio.get_running_loop().create_future()
            err, shard = self._shard(gid) if gid else (0, None)
            if shard is None:
                fut.set_result(err if gid else int(E.invalid_group_id))
            else:
                self._submit(shard.delete_group(gid, token=fut, now=self.clock()))
            futs.append(fut)
        return [(gid, await f) for gid, f in zip(group_ids, futs)]

    async def delete_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        err, shard = self._shard(group_id)
        if shard is None:
            return err, {}
        return await self._run(shard.delete_offsets, group_id, topics)

    # =================================================================== metrics
    def metrics_snapshot(self) -> tuple[dict[str, int], int] | None:
        """({state: groups}, members) for the metrics scrape thread: a read-only pass over copies
        of the shards' groups, retried when the event loop changed a dict meanwhile. Every
        state is reported, 0 included, so the series always exist."""
        for _ in range(3):
            try:
                groups = [g for shard in list(self.shards.values()) for g in list(shard.groups.values())]
                break
            except RuntimeError:  # dictionary changed size during iteration
                continue
        else:
            return None
        counts = dict.fromkeys(_GROUP_STATES, 0)
        members = 0
        for g in groups:
            st = str(g.state)
            counts[st] = counts.get(st, 0) + 1
            members += len(g.members)
        return counts, members


def _answer_waiting(shard: GroupCoordinatorState, code: int) -> None:
    """Complete the joins and syncs waiting on a shard that is going away."""
    for group in shard.groups.values():
        for m in group.members.values():
            if m.join_token is not None and not m.join_token.done():
                m.join_token.set_result(JoinResult(int(code), m.member_id))
            if m.sync_token is not None and not m.sync_token.done():
                m.sync_token.set_result(SyncResult(int(code)))
