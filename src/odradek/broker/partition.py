"""One hosted partition: its role, leader epoch, ISR, high watermark and followers (Kafka's Partition).

The replica manager holds one `Partition` per partition this broker has a replica of and
is the only way from a request handler to it; the partition is the only way to its log for
anything that depends on replication state:
- the **role** (leader or follower) and **leader epoch** come from the metadata (`update`);
  requests naming a leader epoch are fenced here (`check_leader_epoch`);
- the **high watermark** is written only here (`_maybe_advance_high_watermark`): the lowest
  log end offset among the in-sync replicas, so with the ISR being this broker alone (a
  single node, or a replication factor of 1) it follows the log end after every append,
  through the same code path that followers' fetch positions will drive;
- **follower state** (each follower's log end offset and when it last caught up) is kept
  from their fetches (`record_follower_fetch`) for the ISR and high-watermark rules;
- **min.insync.replicas**: an acks=all append with fewer in-sync replicas than that is
  refused before it is written (NOT_ENOUGH_REPLICAS), as Kafka does.

Every advance of the high watermark is reported to the replica manager (`on_advance`), which
wakes the delayed fetches and produces watching this partition.

Everything here runs on the broker's event loop.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.cluster.metadata import PartitionInfo
from odradek.protocol.errors import ErrorCode
from odradek.storage.log import AppendOrigin

if TYPE_CHECKING:
    from odradek.storage import Log
    from odradek.storage.log import AppendInfo


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


class Isolation(enum.Enum):
    """How far a reader may read (Kafka's FetchIsolation)."""

    LOG_END = 0  # a follower replica: everything written
    HIGH_WATERMARK = 1  # read_uncommitted consumers: what the ISR has
    TXN_COMMITTED = 2  # read_committed consumers: up to the last stable offset


class PartitionError(Exception):
    """A request this partition refuses, with the Kafka error code to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class FollowerState:
    replica_id: int
    log_end_offset: int = -1  # unknown until its first fetch
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    # the leader's log end offset when this follower last fetched: a follower that fetches
    # from at least there has caught up to where the leader was then (Kafka's rule)
    last_fetch_leader_leo: int = -1


OnAdvance = Callable[["Partition", int], None]
OnIsrChange = Callable[["Partition", tuple[int, ...], tuple[int, ...]], None]

# ListOffsets' special timestamps
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5


class Partition:
    __slots__ = (
        "topic",
        "partition",
        "key",
        "log",
        "node_id",
        "role",
        "leader_id",
        "leader_epoch",
        "partition_epoch",
        "replicas",
        "isr",
        "min_insync_replicas",
        "followers",
        "_solo",
        "_on_advance",
        "_appended_bytes",
        "_committed_bytes",
        "_uncommitted",
        "pending_isr",
        "_leader_epoch_start",
        "_on_isr_change",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        log: Log,
        node_id: int,
        on_advance: OnAdvance,
        on_isr_change: OnIsrChange | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.log = log
        self.node_id = node_id
        self.role = Role.FOLLOWER
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.min_insync_replicas = 1
        self.followers: dict[int, FollowerState] = {}
        self._solo = False  # the ISR is this broker alone: the high watermark is the log end
        self._on_advance = on_advance
        # Bytes appended as leader and not yet below the high watermark, as (end offset,
        # bytes appended up to it): how much became visible when the high watermark moves.
        self._appended_bytes = 0
        self._committed_bytes = 0
        self._uncommitted: deque[tuple[int, int]] = deque()
        # An ISR change sent to the controller and not yet confirmed: while it is pending the
        # high watermark and acks=all count the larger of the two sets (Kafka's maximal ISR).
        self.pending_isr: tuple[int, ...] | None = None
        self._leader_epoch_start = 0  # the log end offset when this leader epoch began
        self._on_isr_change = on_isr_change

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition} {self.role.value} epoch {self.leader_epoch} isr {self.isr})"

    # ------------------------------------------------------------------ state
    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def update(self, info: PartitionInfo, now_ms: int) -> bool:
        """Take the partition's state from the metadata: become leader or follower. True when
        the role or the leader epoch changed (what coordinators' load/unload hooks follow)."""
        was = (self.role, self.leader_epoch)
        self.replicas = info.replicas
        self._set_isr(info.isr)
        if self.pending_isr is not None and (info.isr == self.pending_isr or info.leader_epoch != self.leader_epoch):
            self.pending_isr = None
        self.leader_id = info.leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        if info.leader == self.node_id:
            self._make_leader(now_ms, changed=was != (Role.LEADER, info.leader_epoch))
        else:
            self.role = Role.FOLLOWER
            self.followers.clear()
            self._solo = False
            self._uncommitted.clear()
        return was != (self.role, self.leader_epoch)

    def _make_leader(self, now_ms: int, *, changed: bool) -> None:
        self.role = Role.LEADER
        # A new leader knows nothing of its followers' positions until they fetch (Kafka
        # resets them); the same leader keeps what it learnt when only the ISR changed.
        known = self.followers if not changed else {}
        self.followers = {
            r: known.get(r) or FollowerState(r, last_caught_up_ms=now_ms) for r in self.replicas if r != self.node_id
        }
        if changed:
            self.pending_isr = None
            self._leader_epoch_start = self.log.log_end_offset
        self._solo = self.isr == (self.node_id,) and self.pending_isr is None
        self._uncommitted.clear()
        self._appended_bytes = self._committed_bytes = 0
        self._maybe_advance_high_watermark()

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a request made for another leader epoch (-1: the client names none)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch > self.leader_epoch:
            raise PartitionError(
                ErrorCode.unknown_leader_epoch,
                f"leader epoch {current_leader_epoch} is newer than this broker's {self.leader_epoch}",
            )
        raise PartitionError(
            ErrorCode.fenced_leader_epoch,
            f"leader epoch {current_leader_epoch} is older than the current {self.leader_epoch}",
        )

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        self.check_leader_epoch(current_leader_epoch)
        if self.role is not Role.LEADER:
            raise PartitionError(
                ErrorCode.not_leader_or_follower, f"this broker is not the leader of {self.topic}-{self.partition}"
            )

    # ----------------------------------------------------------------- writes
    def append_as_leader(
        self,
        records: bytes | memoryview,
        now_ms: int,
        required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Validate and append a producer's batches (storage raises its errors), then let the
        high watermark follow what the ISR has. ``origin``: who wrote them (only a
        coordinator may append transaction markers)."""
        if self.role is not Role.LEADER:
            raise PartitionError(
                ErrorCode.not_leader_or_follower, f"this broker is not the leader of {self.topic}-{self.partition}"
            )
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the min.isr requirement "
                f"of {self.min_insync_replicas} for partition {self.topic}-{self.partition}",
            )
        info = self.log.append(records, leader_epoch=self.leader_epoch, now_ms=now_ms, origin=origin)
        if not info.duplicate:
            self._appended_bytes += len(records)
            if self._solo:
                self._advance_to(self.log.log_end_offset, len(records))
            else:
                self._uncommitted.append((info.last_offset + 1, self._appended_bytes))
                self._maybe_advance_high_watermark()
        return info

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`: it has everything below it. False when the
        replica is not one of this partition's followers."""
        st = self.followers.get(replica_id)
        if st is None or self.role is not Role.LEADER:
            return False
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            st.last_caught_up_ms = now_ms
        elif fetch_offset >= st.last_fetch_leader_leo >= 0:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.log_end_offset = fetch_offset
        st.last_fetch_ms = now_ms
        st.last_fetch_leader_leo = leo
        self._maybe_advance_high_watermark()
        return True

    # -------------------------------------------------------------- ISR changes
    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR counting a pending change: its members and the pending ones."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def isr_to_expand(self) -> tuple[int, ...] | None:
        """The ISR with every follower that has caught up (fetched at or past the high watermark
        and past the start of this leader epoch) added, or None when there is none."""
        if self.role is not Role.LEADER or self.pending_isr is not None:
            return None
        hw = self.log.high_watermark
        joining = [
            r
            for r, st in self.followers.items()
            if r not in self.isr and st.log_end_offset >= max(hw, self._leader_epoch_start)
        ]
        return self.isr + tuple(joining) if joining else None

    def isr_to_shrink(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers that have not caught up for `max_lag_ms`, or None."""
        if self.role is not Role.LEADER or self.pending_isr is not None:
            return None
        lagging = [
            r
            for r in self.isr
            if r != self.node_id
            and (st := self.followers.get(r)) is not None
            and now_ms - st.last_caught_up_ms > max_lag_ms
        ]
        return tuple(r for r in self.isr if r not in lagging) if lagging else None

    def isr_changed(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The controller accepted an ISR change (AlterPartition's answer). The proposal ends
        either way; when the metadata already brought a newer state, that state stands."""
        self.pending_isr = None
        if partition_epoch < self.partition_epoch:
            self.refresh_solo()
            return
        self._set_isr(isr)
        self.partition_epoch = partition_epoch
        self.refresh_solo()
        self._maybe_advance_high_watermark()

    def _set_isr(self, isr: tuple[int, ...]) -> None:
        old, self.isr = self.isr, isr
        if old != isr and old and self.role is Role.LEADER and self._on_isr_change is not None:
            self._on_isr_change(self, old, isr)

    def refresh_solo(self) -> None:
        self._solo = self.role is Role.LEADER and self.isr == (self.node_id,) and self.pending_isr is None

    # ------------------------------------------------------------------ follower
    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """Leader side of KIP-320: where a fetcher's log diverges from this one. The epoch and end
        offset here of its last fetched epoch when that epoch is unknown here or ends before
        its fetch offset; None when the fetch can go on from `fetch_offset`."""
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0:
            return (-1, -1)
        if epoch < last_fetched_epoch or end < fetch_offset:
            return (epoch, end)
        return None

    def append_as_follower(self, records: bytes | memoryview, leader_hw: int, leader_log_start: int) -> None:
        """Append what the leader sent, offsets and epochs as they are; then take the leader's
        high watermark (as far as this log reaches) and log start offset."""
        if records:
            self.log.append(records, validate=True, assign_offsets=False, origin=AppendOrigin.REPLICATION)
        self.follow_leader_offsets(leader_hw, leader_log_start)

    def follow_leader_offsets(self, leader_hw: int, leader_log_start: int) -> None:
        log = self.log
        if leader_hw >= 0:
            log.high_watermark = min(leader_hw, log.log_end_offset)
        if log.log_start_offset < leader_log_start <= log.high_watermark:
            log.delete_records(leader_log_start)

    def truncate_to(self, offset: int) -> None:
        """Drop this replica's records at and above `offset` (divergence from the leader)."""
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)

    def acks_satisfied(self, required_offset: int) -> ErrorCode | None:
        """For a delayed acks=all produce: None while waiting, 0 once the high watermark passed
        `required_offset`, an error code when it never can (leadership lost, ISR shrank
        below min.insync.replicas)."""
        if self.role is not Role.LEADER:
            return ErrorCode.not_leader_or_follower
        if self.log.high_watermark >= required_offset:
            if len(self.isr) < self.min_insync_replicas:
                return ErrorCode.not_enough_replicas_after_append
            return ErrorCode.none
        return None

    # ------------------------------------------------------------------ reads
    def read_limit(self, isolation: Isolation) -> int:
        """The offset a reader of this isolation may not read at or beyond."""
        if isolation is Isolation.LOG_END:
            return self.log.log_end_offset
        if isolation is Isolation.TXN_COMMITTED:
            return self.log.last_stable_offset
        return self.log.high_watermark

    def offset_for_timestamp(self, timestamp: int, isolation: Isolation) -> tuple[int, int]:
        """ListOffsets: (timestamp, offset) for a timestamp or one of the special ones
        (-1 latest visible, -2 earliest, -3 max timestamp, -4 earliest local, -5 earliest
        pending upload: none here). (-1, -1) when no record qualifies."""
        log = self.log
        if timestamp == LATEST:
            return -1, self.read_limit(isolation)
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return -1, log.log_start_offset
        if timestamp == EARLIEST_PENDING_UPLOAD:
            return -1, -1
        if timestamp == MAX_TIMESTAMP:
            offset, ts = log.max_timestamp_offset()
            return ts, offset
        if timestamp < 0:
            raise PartitionError(ErrorCode.invalid_request, f"unknown special timestamp {timestamp}")
        found = log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= self.read_limit(isolation):
            return -1, -1
        offset, ts = found
        return ts, offset

    def last_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (the largest epoch <= `epoch`, the end offset of it)."""
        return self.log.end_offset_for_epoch(epoch)

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (-1: the high watermark), at
        most to the high watermark; returns the new log start offset (the low watermark)."""
        log = self.log
        hw = log.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise PartitionError(
                ErrorCode.offset_out_of_range,
                f"cannot delete records of {self.topic}-{self.partition} before {target}: high watermark is {hw}",
            )
        return log.delete_records(target) if target > log.log_start_offset else log.log_start_offset

    # ------------------------------------------------------------ high watermark
    def _maybe_advance_high_watermark(self) -> None:
        if self.role is not Role.LEADER:
            return
        target = self.log.log_end_offset
        for r in self.maximal_isr:
            if r != self.node_id:
                st = self.followers.get(r)
                target = min(target, st.log_end_offset if st is not None else -1)
        if target <= self.log.high_watermark:
            return
        committed = self._committed_bytes
        pending = self._uncommitted
        while pending and pending[0][0] <= target:
            committed = pending.popleft()[1]
        self._advance_to(target, committed - self._committed_bytes)

    def _advance_to(self, offset: int, visible_bytes: int) -> None:
        log = self.log
        before = log.high_watermark
        log.high_watermark = offset
        if log.high_watermark > before:
            self._committed_bytes += visible_bytes
            self._on_advance(self, visible_bytes)
