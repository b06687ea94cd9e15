"""The asyncio runtime around the group state machine.

Owns: the GroupCoordinatorState, one event-loop timer armed for its earliest deadline,
the periodic offset-expiry check, one writer task per __consumer_offsets partition, and
the loading of partitions at start.

Concurrency: everything runs on the broker's event loop. A state-machine operation
runs synchronously to completion; its records are queued, in operation order, on the
writer of the group's partition, so the log order is the order of the transitions.
Replies (futures the handlers await) are completed only after the records are durable
(`replica_manager.append_internal` returns), then the operation's continuation runs.
No handler sleeps: JoinGroup and SyncGroup await futures that later transitions complete.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any

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
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.errors import KafkaError

log = logging.getLogger(__name__)

LOAD_READ_BYTES = 1 << 20


class GroupCoordinator:
    """The broker's group coordinator: `GroupCoordinator(broker)`, `await start()`, `await stop()`."""

    def __init__(self, broker: Any, *, clock: Callable[[], int] | None = None) -> None:
        self.broker = broker
        cfg = broker.config
        self.num_partitions: int = cfg["offsets.topic.num.partitions"]
        self.state = GroupCoordinatorState(CoordinatorConfig.from_broker(cfg))
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.loading: set[int] = set()
        self.active = False
        self._topic_ready = False
        self._topic_lock = asyncio.Lock()
        self._queues: dict[int, collections.deque[Result]] = {}
        self._writers: dict[int, asyncio.Task] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._retention_timer: asyncio.TimerHandle | None = None
        self._load_task: asyncio.Task | None = None

    # =================================================================== lifecycle
    async def start(self) -> None:
        self.active = True
        if self._offsets_log(0) is not None:
            self._topic_ready = True
            self.loading = set(range(self.num_partitions))
            self._load_task = asyncio.ensure_future(self._load_all())
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
        for group in self.state.groups.values():
            for m in group.members.values():
                if m.join_token is not None and not m.join_token.done():
                    m.join_token.set_result(JoinResult(int(E.not_coordinator), m.member_id))
                if m.sync_token is not None and not m.sync_token.done():
                    m.sync_token.set_result(SyncResult(int(E.not_coordinator)))

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def group_error(self, group_id: str) -> int:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS, or 0 if we can serve the group."""
        if not self.active:
            return int(E.coordinator_not_available)
        if self.partition_for(group_id) in self.loading:
            return int(E.coordinator_load_in_progress)
        return 0

    async def ensure_topic(self) -> None:
        if self._topic_ready:
            return
        async with self._topic_lock:
            if self._topic_ready:
                return
            cfg = self.broker.config
            await self.broker.ensure_internal_topic(
                OFFSETS_TOPIC,
                self.num_partitions,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(cfg["offsets.topic.segment.bytes"]),
                    "compression.type": "producer",
                },
            )
            self._topic_ready = True

    # =================================================================== loading
    def _offsets_log(self, partition: int) -> Any:
        try:
            return self.broker.log_manager.get_log(OFFSETS_TOPIC, partition)
        except (KeyError, LookupError):
            return None

    async def _load_all(self) -> None:
        from odradek.protocol.records import decode_records, iter_batches

        for p in sorted(self.loading):
            started = time.monotonic()
            count = 0
            try:
                log_ = self._offsets_log(p)
                offset = log_.log_start_offset if log_ is not None else 0
                end = log_.log_end_offset if log_ is not None else 0
                while log_ is not None and offset < end:
                    data = await asyncio.to_thread(log_.read_bytes, offset, LOAD_READ_BYTES)
                    if not data:
                        break
                    for h in iter_batches(data):
                        if not h.is_control:
                            for rec in decode_records(data, h.position):
                                if rec.offset >= offset and rec.key is not None:
                                    self._replay_bytes(rec.key, rec.value)
                                    count += 1
                        offset = max(offset, h.next_offset)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed at offset %d", OFFSETS_TOPIC, p, offset)
            self.state.loaded([g for g in self.state.groups if self.partition_for(g) == p], self.clock())
            self.loading.discard(p)
            if count:
                log.info(
                    "loaded %d records of %s-%d in %.0f ms",
                    count,
                    OFFSETS_TOPIC,
                    p,
                    (time.monotonic() - started) * 1000,
                )
            await asyncio.sleep(0)
        self._rearm()

    def _replay_bytes(self, key: bytes, value: bytes | None) -> None:
        try:
            k = decode_key(key)
            v = decode_value(k, value)
        except RecordFormatError as e:
            log.warning("skipping unreadable %s record: %s", OFFSETS_TOPIC, e)
            return
        self.state.replay(k, v)

    # =================================================================== writing
    def _submit(self, res: Result) -> None:
        """Queue a Result's records on its partition's writer; deliver replies when durable."""
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
        from odradek.protocol.records import Record, build_batch

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
        try:
            await self.ensure_topic()
            await self.broker.replica_manager.append_internal(
                OFFSETS_TOPIC, partition, build_batch(records, base_offset=0)
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
    def _rearm(self) -> None:
        if not self.active:
            return
        at = self.state.next_deadline()
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
        for res in self.state.expire(self.clock()):
            self._submit(res)
        self._rearm()

    def _schedule_retention(self) -> None:
        if not self.active:
            return
        interval = self.broker.config["offsets.retention.check.interval.ms"] / 1000
        self._retention_timer = asyncio.get_running_loop().call_later(interval, self._on_retention)

    def _on_retention(self) -> None:
        try:
            if not self.loading:  # never expire from a half-loaded state
                for res in self.state.expire_offsets(self.clock()):
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
        err = self.group_error(group_id)
        if err:
            return JoinResult(err, member_id)
        return await self._run(
            self.state.join,
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
        err = self.group_error(group_id)
        if err:
            return SyncResult(err)
        return await self._run(
            self.state.sync,
            group_id,
            generation,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            assignments,
        )

    async def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> int:
        err = self.group_error(group_id)
        if err:
            return err
        return await self._run(self.state.heartbeat, group_id, member_id, group_instance_id, generation)

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveResult:
        err = self.group_error(group_id)
        if err:
            return LeaveResult(err)
        return await self._run(self.state.leave, group_id, members)

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: list[tuple[str, int, int, int, str | None]],
        retention_ms: int = -1,
    ) -> dict[tuple[str, int], int]:
        err = self.group_error(group_id)
        if err:
            return {(t, p): err for t, p, *_ in offsets}
        return await self._run(
            self.state.commit_offsets,
            group_id,
            member_id,
            group_instance_id,
            generation,
            offsets,
            retention_ms=retention_ms,
        )

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> tuple[int, list]:
        err = self.group_error(group_id)
        if err:
            return err, []
        return 0, self.state.fetch_offsets(group_id, topics)

    def describe_group(self, group_id: str) -> GroupDescription:
        err = self.group_error(group_id)
        if err:
            return GroupDescription(group_id, err, "", "", "", [])
        return self.state.describe_group(group_id)

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> tuple[int, list[tuple[str, str, str]]]:
        if not self.active:
            return int(E.coordinator_not_available), []
        err = int(E.coordinator_load_in_progress) if self.loading else 0
        return err, self.state.list_groups(states, types)

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        futs = []
        for gid in group_ids:
            err = self.group_error(gid) if gid else 0
            if err:
                fut = asyncio.get_running_loop().create_future()
                fut.set_result(err)
            else:
                fut = asyncio.get_running_loop().create_future()
                self._submit(self.state.delete_group(gid, token=fut, now=self.clock()))
            futs.append(fut)
        return [(gid, await f) for gid, f in zip(group_ids, futs)]

    async def delete_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        err = self.group_error(group_id)
        if err:
            return err, {}
        return await self._run(self.state.delete_offsets, group_id, topics)
