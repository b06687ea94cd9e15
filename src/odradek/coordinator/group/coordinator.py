"""The broker's group coordinator (Kafka's GroupCoordinatorService): the group operations the
handlers call, each routed to the shard of the group's partition of `__consumer_offsets`
(shard.py) on the coordinator runtime (coordinator/runtime.py), which owns leadership,
loading, the pipelined writes and the timers.

An operation answers at once (COORDINATOR_NOT_AVAILABLE while the coordinator is not up,
COORDINATOR_LOAD_IN_PROGRESS while the partition loads, NOT_COORDINATOR when this broker does
not lead it), or runs on the shard and answers once its records are committed. Reads
(OffsetFetch, DescribeGroups) show only committed state: COORDINATOR_LOAD_IN_PROGRESS too
while the partition's high watermark is below what its load replayed (runtime.py, "Reads of
committed state"). An operation that writes nothing (a heartbeat, a SyncGroup of a stable
group) answers once the shard's last written offset is committed (runtime.py, "Answers that
write nothing wait too"). No handler
sleeps: JoinGroup and SyncGroup await futures that later transitions complete. Offsets are
checked for expiry every `offsets.retention.check.interval.ms`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from odradek.coordinator.group.classic_groups import store_error
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.records import OFFSETS_TOPIC, GroupRecord, serialize_record
from odradek.coordinator.group.requests import (
    GroupDescription,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    OffsetCommitRequest,
    SyncRequest,
    SyncResult,
    TopicPartition,
)
from odradek.coordinator.group.shard import GroupShard
from odradek.coordinator.partitions import CoordinatorPartitions
from odradek.coordinator.runtime import CoordinatorRuntime, ShardState
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.errors import KafkaError

log = logging.getLogger(__name__)

_GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


class GroupCoordinator:
    """`await start()`, the leadership hooks, the group operations, `await stop()`."""

    def __init__(
        self,
        config: GroupConfig,
        partitions: CoordinatorPartitions,
        ensure_topic: Callable[[], Awaitable[None]],
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self._ensure_topic = ensure_topic
        self.runtime: CoordinatorRuntime[GroupShard, GroupRecord] = CoordinatorRuntime(
            OFFSETS_TOPIC,
            config.num_partitions,
            partitions,
            lambda: GroupShard(config),
            serialize_record,
            commit_timeout_ms=config.commit_timeout_ms,
            clock=clock,
        )

    async def start(self) -> None:
        await self.runtime.start()
        self.runtime.every(self.config.retention_check_interval_ms, self._expire_offsets)

    async def stop(self) -> None:
        await self.runtime.stop()

    # the replica manager's LeadershipListener
    def on_elected(self, topic: str, partition: int, leader_epoch: int) -> None:
        self.runtime.on_elected(topic, partition, leader_epoch)

    def on_resigned(self, topic: str, partition: int, leader_epoch: int) -> None:
        self.runtime.on_resigned(topic, partition, leader_epoch)

    # the broker's ZooKeeper session guard (broker/coordinator_fence.py)
    def fence(self, why: str) -> None:
        self.runtime.fence(why)

    def unfence(self) -> None:
        self.runtime.unfence()

    @property
    def active(self) -> bool:
        return self.runtime.active

    @property
    def fenced(self) -> str | None:
        """Why this broker does not act as coordinator now (cut from ZooKeeper), or None."""
        return self.runtime.fenced

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def group_error(self, group_id: str) -> int:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, or 0 if we serve the group."""
        return self.runtime.error(self.partition_for(group_id))

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (on the first FindCoordinator)."""
        await self._ensure_topic()

    def _expire_offsets(self) -> None:
        now = self.runtime.clock()
        for ctx in self.runtime.loaded_contexts():  # never expire from a half-loaded state
            for res in ctx.shard.expire_offsets(now):
                self.runtime.submit(ctx, res)

    # =================================================================== operations
    async def join(self, req: JoinRequest) -> JoinResult:
        err, ctx = self.runtime.lookup(req.group_id)
        if ctx is None:
            return JoinResult(err, req.member_id)
        return await self.runtime.run(
            ctx,
            lambda token, now: ctx.shard.join(req, token=token, now=now),
            lambda code: JoinResult(store_error(code), req.member_id),
        )

    async def sync(self, req: SyncRequest) -> SyncResult:
        err, ctx = self.runtime.lookup(req.group_id)
        if ctx is None:
            return SyncResult(err)
        return await self.runtime.run(
            ctx,
            lambda token, now: ctx.shard.sync(req, token=token, now=now),
            lambda code: SyncResult(store_error(code)),
        )

    async def heartbeat(self, req: HeartbeatRequest) -> int:
        err, ctx = self.runtime.lookup(req.group_id)
        if ctx is None:
            return err
        return await self.runtime.run(
            ctx, lambda token, now: ctx.shard.heartbeat(req, token=token, now=now), store_error
        )

    async def leave(self, req: LeaveRequest) -> LeaveResult:
        err, ctx = self.runtime.lookup(req.group_id)
        if ctx is None:
            return LeaveResult(err)
        return await self.runtime.run(
            ctx,
            lambda token, now: ctx.shard.leave(req, token=token, now=now),
            lambda code: LeaveResult(store_error(code)),
        )

    async def commit_offsets(self, req: OffsetCommitRequest) -> dict[TopicPartition, int]:
        """OffsetCommit, and TxnOffsetCommit (`req.transactional`: the offsets are pending in
        the producer's transaction once committed)."""
        err, ctx = self.runtime.lookup(req.group_id)
        if ctx is None:
            return {(o.topic, o.partition): err for o in req.offsets}
        return await self.runtime.run(
            ctx,
            lambda token, now: ctx.shard.commit_offsets(req, token=token, now=now),
            lambda code: {(o.topic, o.partition): store_error(code) for o in req.offsets},
        )

    def complete_transaction(self, offsets_partition: int, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """A COMMIT (`commit`) or ABORT marker of the producer was appended to this partition of
        __consumer_offsets and is committed (WriteTxnMarkers): its pending offsets become
        visible, or are dropped. A partition this broker does not lead has nothing to do (its
        leader loads the marker from the log)."""
        if not self.runtime.complete_transaction(offsets_partition, producer_id, commit):
            log.info(
                "transaction of producer %d (epoch %d) completed on %s-%d, which is not loaded here",
                producer_id,
                producer_epoch,
                OFFSETS_TOPIC,
                offsets_partition,
            )

    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None, *, require_stable: bool = False
    ) -> tuple[int, list]:
        err, ctx = self.runtime.lookup_for_read(group_id)
        if ctx is None:
            return err, []
        return 0, ctx.shard.fetch_offsets(group_id, topics, require_stable=require_stable)

    def describe_group(self, group_id: str) -> GroupDescription:
        err, ctx = self.runtime.lookup_for_read(group_id)
        if ctx is None:
            return GroupDescription(group_id, err, "", "", "", [])
        return ctx.shard.describe_group(group_id)

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> tuple[int, list[tuple[str, str, str]]]:
        """The groups of every shard here that serves reads; COORDINATOR_LOAD_IN_PROGRESS (with
        the groups of those) while one loads or what it loaded is not all committed: a group
        only in an uncommitted tail is not listed, as Kafka lists at the last committed offset."""
        if not self.active:
            return int(E.coordinator_not_available), []
        err = 0
        out = []
        for ctx in self.runtime.contexts():
            if ctx.serves_reads:
                out.extend(ctx.shard.list_groups(states, types))
            elif ctx.state is not ShardState.FAILED:
                err = int(E.coordinator_load_in_progress)
        return err, out

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        futs = []
        for gid in group_ids:
            fut = asyncio.get_running_loop().create_future()
            err, ctx = self.runtime.lookup(gid) if gid else (0, None)
            if ctx is None:
                fut.set_result(err if gid else int(E.invalid_group_id))
            else:
                self.runtime.submit(ctx, ctx.shard.delete_group(gid, token=fut, now=self.runtime.clock()))
            futs.append(fut)
        out = []
        for gid, f in zip(group_ids, futs):
            try:
                out.append((gid, await f))
            except KafkaError as e:  # answered from state that was not committed: not sent
                out.append((gid, store_error(e.code)))
        return out

    async def delete_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]]
    ) -> tuple[int, dict[TopicPartition, int]]:
        err, ctx = self.runtime.lookup(group_id)
        if ctx is None:
            return err, {}
        return await self.runtime.run(
            ctx,
            lambda token, now: ctx.shard.delete_offsets(group_id, topics, token=token, now=now),
            lambda code: (store_error(code), {}),
        )

    # =================================================================== metrics
    def metrics_snapshot(self) -> tuple[dict[str, int], int] | None:
        """({state: groups}, members) for the metrics scrape thread: a read-only pass over copies
        of the shards' groups, retried when the event loop changed a dict meanwhile. Every
        state is reported, 0 included, so the series always exist."""
        for _ in range(3):
            try:
                groups = [g for ctx in self.runtime.contexts() for g in list(ctx.shard.groups.values())]
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
