"""One hosted partition: its role, leader epoch, ISR, high watermark and followers (Kafka's Partition).

The replica manager holds one `Partition` per partition this broker has a replica of and
is the only way from a request handler to it; the partition is the only way to its log for
anything that depends on replication state:
- the **role** (leader or follower) and **leader epoch** come from the metadata (`update`),
  never from a state older than the one it has (a smaller partition epoch: a late watch);
  requests naming a leader epoch are fenced here (`check_leader_epoch`); a state naming this
  broker leader with another broker epoch than its registration's (written before it
  restarted) is not led: it waits for the controller's next state (docs/cluster.md);
- a **new leader records its epoch** and log end offset in the leader-epoch cache at
  election (KIP-279), so a follower holding records of a later epoch than any in this log
  still finds where it diverges;
- the **read path** is here (`fetch_records`, Kafka's fetchRecords): fencing, the follower's
  divergence check (KIP-320), the offset range, the read up to what the reader may see, and
  for a follower, once the read succeeded, its fetch state;
- the **high watermark** is written only here (`_maybe_advance_high_watermark`): the lowest
  log end offset among the in-sync replicas, so with the ISR being this broker alone (a
  single node, or a replication factor of 1) it follows the log end after every append;
- **follower state** (each follower's log end offset, when it last caught up, its broker
  epoch) comes from its fetches; it is reset when the follower leaves the ISR or fetches
  with a new broker epoch (it restarted), so nothing it had before counts again;
- **ISR changes** are proposed here (`maybe_expand_isr` for the follower that just fetched,
  `maybe_shrink_isr`) and sent by the AlterPartition channel with each member's broker epoch
  (KIP-903); while one is pending the high watermark counts the larger set (Kafka's maximal
  ISR), and it stays pending until the controller answers or newer metadata supersedes it;
- **min.insync.replicas**: an acks=all append with fewer in-sync replicas than that is
  refused before it is written (NOT_ENOUGH_REPLICAS), as Kafka does;
- **ListOffsets** answers OFFSET_NOT_AVAILABLE for the latest offset while a new leader's high
  watermark is below the start of its epoch (KIP-207), so end offsets never go backwards.

Every advance of the high watermark is reported to the replica manager (`on_advance`), which
wakes the delayed fetches and produces watching this partition.

Everything here runs on the broker's event loop.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.follower_state import FollowerState, IdleFollower
from odradek.cluster.metadata import PartitionInfo
from odradek.protocol.errors import ErrorCode
from odradek.storage.log import AppendOrigin

log = logging.getLogger("odradek.broker.partition")

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


@dataclass(slots=True, eq=False)
class IsrProposal:
    """An ISR change sent to the controller (Kafka's PendingPartitionChange): the new ISR with
    each member's broker epoch (KIP-903; -1 where unknown), from the state it was based on."""

    isr: tuple[int, ...]
    isr_epochs: tuple[tuple[int, int], ...]  # (broker id, broker epoch)
    leader_epoch: int
    partition_epoch: int


class IsrChannel(Protocol):
    """Where ISR proposals go (the AlterPartition sender); it answers each through
    `Partition.on_alter_partition_response`."""

    def submit(self, partition: Partition, proposal: IsrProposal) -> None: ...


@dataclass(slots=True)
class LogReadInfo:
    """What a fetch of one partition read (Kafka's LogReadInfo), or the error refusing it."""

    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    regions: list[Any] | None = None
    size: int = 0
    first_offset: int = -1  # base offset of the first batch returned
    next_offset: int = -1  # the offset after the batches returned
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset): a follower must truncate
    # read_committed only (None otherwise): (producer id, first offset) of the aborted
    # transactions overlapping the batches returned (empty when there are none)
    aborted_transactions: list[tuple[int, int]] | None = None
    log_end_offset: int = -1  # the leader's, when the read began
    # a follower's read that found it caught up, in the ISR, with nothing to send: the state it
    # was read in, for an incremental session to answer the same fetch without a read
    idle_follower: IdleFollower | None = None

    @property
    def offsets_returned(self) -> int:
        """How many offsets the batches returned span, from the storage read's offsets (no
        batch decoded): the records a fetcher gets, compaction gaps and transaction markers
        counted as offsets count them."""
        return self.next_offset - self.first_offset if self.first_offset >= 0 else 0


OnAdvance = Callable[["Partition", int], None]
OnIsrChange = Callable[["Partition", tuple[int, ...], tuple[int, ...]], None]

# ListOffsets' special timestamps
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5

# AlterPartition errors after which a proposal is known not applied: back to the committed ISR
_NOT_APPLIED = frozenset({ErrorCode.ineligible_replica, ErrorCode.operation_not_attempted})
# errors that mean the controller has a newer state than ours: the proposal stays pending
# (it may have been applied by an earlier attempt) until the metadata brings that state
_AWAIT_METADATA = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.invalid_update_version,
        ErrorCode.invalid_request,
        ErrorCode.new_leader_elected,
        ErrorCode.not_leader_or_follower,
    }
)


def _no_epoch(_broker_id: int) -> int:
    return -1


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
        "pending",
        "_solo",
        "_on_advance",
        "_appended_bytes",
        "_committed_bytes",
        "_uncommitted",
        "_leader_epoch_start",
        "_on_isr_change",
        "_alter_isr",
        "_broker_epoch",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        log: Log,
        node_id: int,
        on_advance: OnAdvance,
        on_isr_change: OnIsrChange | None = None,
        *,
        alter_isr: IsrChannel | None = None,
        broker_epoch: Callable[[int], int] = _no_epoch,
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
        # An ISR change sent to the controller and not yet confirmed: while it is pending the
        # high watermark and acks=all count the larger of the two sets (Kafka's maximal ISR).
        self.pending: IsrProposal | None = None
        self._solo = False  # the ISR is this broker alone: the high watermark is the log end
        self._on_advance = on_advance
        # Bytes appended as leader and not yet below the high watermark, as (end offset,
        # bytes appended up to it): how much became visible when the high watermark moves.
        self._appended_bytes = 0
        self._committed_bytes = 0
        self._uncommitted: deque[tuple[int, int]] = deque()
        self._leader_epoch_start = 0  # the log end offset when this leader epoch began
        self._on_isr_change = on_isr_change
        self._alter_isr = alter_isr  # None: ISR changes are not this broker's to propose (single node)
        self._broker_epoch = broker_epoch  # a broker's epoch in the metadata (-1: unknown)

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition} {self.role.value} epoch {self.leader_epoch} isr {self.isr})"

    # ------------------------------------------------------------------ state
    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def topic_id(self) -> uuid.UUID | None:
        return self.log.topic_id

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

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in this replica's log (-1: none)."""
        return self.log.latest_epoch

    def fetch_position(self) -> tuple[int, int, int]:
        """What a follower's next Fetch asks from: (log end offset, latest epoch, log start
        offset), in one call (a fetcher builds it for every partition it follows, each Fetch)."""
        log = self.log
        return log.log_end_offset, log.epoch_cache.latest_epoch, log.log_start_offset

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        return self.pending.isr if self.pending is not None else None

    def update(self, info: PartitionInfo, now_ms: int) -> bool:
        """Take the partition's state from the metadata: become leader or follower. True when
        the role or the leader epoch changed (what coordinators' load/unload hooks follow).
        A state older than the one this partition has (a smaller partition epoch: a watch
        delivered after the controller answered this leader's newer ISR change) is ignored."""
        if info.partition_epoch < self.partition_epoch:
            return False
        was = (self.role, self.leader_epoch)
        old_isr = self.isr
        p = self.pending
        if p is not None and (info.leader_epoch != self.leader_epoch or info.partition_epoch > p.partition_epoch):
            self.pending = None  # superseded: the controller wrote a newer state than it was based on
        self.replicas = info.replicas
        self._set_isr(info.isr)
        self.leader_id = info.leader if info.leader != self.node_id or self._admitted(info) else -1
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        if self.leader_id == self.node_id:
            self._make_leader(now_ms, changed=was != (Role.LEADER, info.leader_epoch), old_isr=old_isr)
        else:
            self.role = Role.FOLLOWER
            self.followers.clear()
            self.pending = None
            self._solo = False
            self._uncommitted.clear()
        return was != (self.role, self.leader_epoch)

    def _admitted(self, info: PartitionInfo) -> bool:
        """Whether this broker may lead the state `info`: its ISR admitted this registration of
        it, or records no epoch. A broker restarted (after a power cut its log may have lost its
        unflushed tail) while no controller saw it go finds itself leader in a state written
        for its previous registration: leading it, followers would truncate to its log. It
        leads nothing until the controller, seeing the stale epoch, writes a new state."""
        admitted = info.admitted_epoch(self.node_id)
        if admitted == -1 or admitted == self._broker_epoch(self.node_id):
            return True
        if info.partition_epoch != self.partition_epoch:  # once per state
            log.warning(
                "%s-%d: not leading epoch %d: it was given to this broker's previous registration (epoch %d, now %d)",
                self.topic,
                self.partition,
                info.leader_epoch,
                admitted,
                self._broker_epoch(self.node_id),
            )
        return False

    def _make_leader(self, now_ms: int, *, changed: bool, old_isr: tuple[int, ...]) -> None:
        self.role = Role.LEADER
        if changed:
            # A new leader knows nothing of its followers' positions until they fetch (Kafka
            # resets them), and records its epoch's start in the leader-epoch cache now: a
            # follower with records of a later epoch than any in this log then truncates to
            # where they diverge instead of to this log's end (KIP-279, KAFKA-7415).
            self.followers = {r: FollowerState(r, last_caught_up_ms=now_ms) for r in self.replicas if r != self.node_id}
            self.pending = None
            self._leader_epoch_start = self.log.log_end_offset
            self.log.assign_epoch_start_offset(self.leader_epoch, self._leader_epoch_start)
        else:
            # The same leader keeps what it learnt when only the ISR changed, except of the
            # followers that left the ISR: what they fetched before does not bring them back.
            known = self.followers
            self.followers = {
                r: known.get(r) or FollowerState(r, last_caught_up_ms=now_ms)
                for r in self.replicas
                if r != self.node_id
            }
            self._forget_leaving(old_isr, self.isr)
        self.refresh_solo()
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

    # ------------------------------------------------------------------- reads
    def fetch_records(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool,
        isolation: Isolation = Isolation.HIGH_WATERMARK,
        replica_id: int = -1,
        replica_epoch: int = -1,
        current_leader_epoch: int = -1,
        last_fetched_epoch: int = -1,
        now_ms: int = 0,
        update_fetch_state: bool = True,
    ) -> LogReadInfo:
        """Fetch (Kafka's fetchRecords): for a consumer up to the high watermark (with
        TXN_COMMITTED the last stable offset, and the aborted transactions overlapping what
        is returned); for a follower (`replica_id` >= 0, its broker epoch `replica_epoch`) up
        to the log end, and, once the read succeeded without a diverging epoch, its fetch
        offset recorded as its position, unless `update_fetch_state` is False (as Kafka, the
        read of a Fetch woken from the purgatory: its position was recorded on arrival).
        Raises PartitionError (or a storage error) when it refuses: fencing, not the leader,
        an unknown or stale replica, OFFSET_OUT_OF_RANGE."""
        self.check_leader(current_leader_epoch)
        follower = None
        if replica_id >= 0:
            follower = self._follower_or_raise(replica_id, replica_epoch, current_leader_epoch)
            isolation = Isolation.LOG_END
        info = self._read(offset, max_bytes, min_one, isolation, last_fetched_epoch)
        if follower is not None and update_fetch_state and info.diverging_epoch is None:
            self._record_fetch(follower, offset, info.log_end_offset, replica_epoch, now_ms)
            info.high_watermark = self.log.high_watermark  # what this fetch let it reach
            if offset == info.log_end_offset and replica_id in self.isr and follower.broker_epoch == replica_epoch:
                info.idle_follower = IdleFollower(self, follower, self.log, self.leader_epoch, offset)
        return info

    def _follower_or_raise(self, replica_id: int, replica_epoch: int, current_leader_epoch: int) -> FollowerState:
        st = self.followers.get(replica_id)
        if st is None:
            # Kafka: with a leader epoch in the request the pair (replica, epoch) is not known
            # yet (a reassignment this leader has not seen): the follower retries
            code = ErrorCode.unknown_leader_epoch if current_leader_epoch >= 0 else ErrorCode.not_leader_or_follower
            raise PartitionError(
                code,
                f"replica {replica_id} is not a replica of {self.topic}-{self.partition} in epoch {self.leader_epoch}",
            )
        known = max(st.broker_epoch, self._broker_epoch(replica_id))
        if 0 <= replica_epoch < known:
            raise PartitionError(
                ErrorCode.not_leader_or_follower,
                f"stale fetch from replica {replica_id}: broker epoch {replica_epoch}, current {known}",
            )
        return st

    def _read(
        self, offset: int, max_bytes: int, min_one: bool, isolation: Isolation, last_fetched_epoch: int
    ) -> LogReadInfo:
        log = self.log
        start, leo, hw, lso = log.log_start_offset, log.log_end_offset, log.high_watermark, log.last_stable_offset
        info = LogReadInfo(0, hw, lso, start, log_end_offset=leo)
        if last_fetched_epoch >= 0:  # KIP-320: does the follower's log still agree with this one?
            epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < 0 or end < 0:
                raise PartitionError(
                    ErrorCode.offset_out_of_range,
                    f"no end offset for the last fetched epoch {last_fetched_epoch} in {self.topic}-{self.partition}",
                )
            if offset >= start and (epoch < last_fetched_epoch or end < offset):
                info.diverging_epoch = (epoch, end)
                info.regions = []
                return info
        if offset < start or offset > leo:
            raise PartitionError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside {self.topic}-{self.partition}'s log [{start}, {leo}]",
            )
        committed = isolation is Isolation.TXN_COMMITTED
        # read_limit(isolation), from the offsets just read
        limit = leo if isolation is Isolation.LOG_END else lso if committed else hw
        if offset >= limit:  # nothing visible to this reader yet
            info.regions = []
            if committed:
                info.aborted_transactions = []
            return info
        rr = log.read(offset, max_bytes, max_offset=limit, min_one_batch=min_one)
        info.regions = rr.regions
        info.size = rr.size
        info.first_offset = rr.first_offset
        info.next_offset = rr.next_offset
        if committed:
            # Kafka's bound: the offset after the batches returned
            info.aborted_transactions = (
                log.collect_aborted_transactions(offset, rr.next_offset) if rr.next_offset >= 0 else []
            )
        return info

    # --------------------------------------------------------- follower state
    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int, *, broker_epoch: int = -1) -> bool:
        """A follower fetched from `fetch_offset`: it has everything below it (Kafka's
        updateFollowerFetchState). False when the replica is not one of this partition's
        followers. `fetch_records` calls this once its read succeeded."""
        st = self.followers.get(replica_id)
        if st is None or self.role is not Role.LEADER:
            return False
        self._record_fetch(st, fetch_offset, self.log.log_end_offset, broker_epoch, now_ms)
        return True

    def _record_fetch(
        self, st: FollowerState, fetch_offset: int, leader_leo: int, broker_epoch: int, now_ms: int
    ) -> None:
        if broker_epoch >= 0 and broker_epoch != st.broker_epoch:
            if st.broker_epoch >= 0:  # a newer session of that broker: it restarted
                st.forget_position()
            st.broker_epoch = broker_epoch
        if fetch_offset >= leader_leo:
            st.last_caught_up_ms = max(st.last_caught_up_ms, now_ms)
        elif fetch_offset >= st.last_fetch_leader_leo >= 0:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.log_end_offset = fetch_offset
        st.last_fetch_ms = now_ms
        st.last_fetch_leader_leo = leader_leo
        if st.replica_id not in self.isr:  # (a member's fetch, the common one, has nothing to propose)
            self.maybe_expand_isr(st.replica_id)
        self._maybe_advance_high_watermark()

    def _forget_leaving(self, old_isr: tuple[int, ...], new_isr: tuple[int, ...]) -> None:
        for r in old_isr:
            st = self.followers.get(r)
            if st is not None and r not in new_isr:
                st.forget_position()
                st.broker_epoch = -1

    # -------------------------------------------------------------- ISR changes
    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR counting a pending change: its members and the pending ones."""
        if self.pending is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending.isr if r not in self.isr)

    def maybe_expand_isr(self, replica_id: int) -> bool:
        """Propose `replica_id` for the ISR when it has caught up: fetched at or past the high
        watermark and past the start of this leader epoch (Kafka's maybeExpandIsr, which
        looks only at the follower that just fetched), and is eligible (`isr_eligible`). True
        when proposed."""
        st = self.followers.get(replica_id)
        if (
            self._alter_isr is None
            or self.role is not Role.LEADER
            or self.pending is not None
            or st is None
            or replica_id in self.isr
            or st.log_end_offset < max(self.log.high_watermark, self._leader_epoch_start)
            or not self.isr_eligible(st)
        ):
            return False
        self._propose(self.isr + (replica_id,))
        return True

    def isr_eligible(self, st: FollowerState) -> bool:
        """Whether this leader may propose the follower for the ISR (Kafka's
        Partition.isReplicaIsrEligible, KIP-903): this broker's metadata shows it registered,
        under the broker epoch it fetched with (or its fetches named none). The controller
        refuses anything else (INELIGIBLE_REPLICA); a leader that proposed it anyway would do
        so again at every fetch until its metadata caught up."""
        registered = self._broker_epoch(st.replica_id)
        return registered >= 0 and st.broker_epoch in (-1, registered)

    def isr_to_shrink(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers that have not caught up for `max_lag_ms`, or None."""
        if self.role is not Role.LEADER or self.pending is not None:
            return None
        lagging = [
            r
            for r in self.isr
            if r != self.node_id
            and (st := self.followers.get(r)) is not None
            and now_ms - st.last_caught_up_ms > max_lag_ms
        ]
        return tuple(r for r in self.isr if r not in lagging) if lagging else None

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int) -> bool:
        """Propose the ISR without its lagging followers. True when proposed."""
        shrunk = self.isr_to_shrink(now_ms, max_lag_ms) if self._alter_isr is not None else None
        if shrunk is None:
            return False
        self._propose(shrunk)
        return True

    def _propose(self, isr: tuple[int, ...]) -> None:
        def epoch(b: int) -> int:  # a follower's from its last fetch (KIP-903): never the metadata's
            if b == self.node_id:
                return self._broker_epoch(b)
            st = self.followers.get(b)
            return st.broker_epoch if st is not None else -1

        epochs = tuple((b, epoch(b)) for b in isr)
        proposal = self.pending = IsrProposal(isr, epochs, self.leader_epoch, self.partition_epoch)
        self.refresh_solo()
        assert self._alter_isr is not None
        self._alter_isr.submit(self, proposal)

    def on_alter_partition_response(
        self, proposal: IsrProposal, error: int, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int
    ) -> bool:
        """The controller's answer to `proposal` (Kafka's handleAlterPartitionUpdate/Error).
        True when it should be sent again (an error the controller may not say twice). An
        answer to a proposal no longer pending (new metadata, a new leadership) is ignored."""
        if self.pending is not proposal:
            return False
        if error == ErrorCode.none:
            if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
                return False  # stays pending until the metadata says what holds
            old = self.isr
            self.pending = None
            self._set_isr(isr)
            self.partition_epoch = partition_epoch
            self._forget_leaving(old, isr)
            self.refresh_solo()
            self._maybe_advance_high_watermark()
            return False
        if error in _NOT_APPLIED:
            self.pending = None
            self.refresh_solo()
            return False
        return error not in _AWAIT_METADATA

    def _set_isr(self, isr: tuple[int, ...]) -> None:
        old, self.isr = self.isr, isr
        if old != isr and old and self.role is Role.LEADER and self._on_isr_change is not None:
            self._on_isr_change(self, old, isr)

    def refresh_solo(self) -> None:
        self._solo = self.role is Role.LEADER and self.isr == (self.node_id,) and self.pending is None

    # ------------------------------------------------------------------ follower
    def append_as_follower(self, records: bytes | memoryview, leader_hw: int, leader_log_start: int) -> None:
        """Append what the leader sent, offsets and epochs as they are, checked for framing and
        CRC only (the leader accepted them: storage/validator.py); then take the leader's high
        watermark (as far as this log reaches) and log start offset."""
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

    # ----------------------------------------------------------------- offsets
    def read_limit(self, isolation: Isolation) -> int:
        """The offset a reader of this isolation may not read at or beyond."""
        if isolation is Isolation.LOG_END:
            return self.log.log_end_offset
        if isolation is Isolation.TXN_COMMITTED:
            return self.log.last_stable_offset
        return self.log.high_watermark

    def offset_for_timestamp(self, timestamp: int, isolation: Isolation) -> tuple[int, int]:
        """ListOffsets (Kafka's fetchOffsetForTimestamp): (timestamp, offset) for a timestamp
        or one of the special ones (-1 latest visible, -2 earliest, -3 max timestamp, -4
        earliest local, -5 earliest pending upload: none here); (-1, -1) when no record the
        reader may see qualifies. KIP-207: while a new leader's high watermark is below the
        start of its epoch, a client (not LOG_END) asking for the latest offset, or for one
        that is not found below what it may read, gets OFFSET_NOT_AVAILABLE: the old leader
        may have answered more, and end offsets must not go backwards."""
        log = self.log
        limit = self.read_limit(isolation)
        lagging = (
            isolation is not Isolation.LOG_END
            and self.role is Role.LEADER
            and self._leader_epoch_start > log.high_watermark
        )
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return -1, log.log_start_offset
        if timestamp == LATEST:
            found: tuple[int, int] | None = (limit, -1)
        elif timestamp == EARLIEST_PENDING_UPLOAD:
            found = None
        elif timestamp == MAX_TIMESTAMP:
            found = log.max_timestamp_offset()
            found = found if found[0] >= 0 else None
        elif timestamp < 0:
            raise PartitionError(ErrorCode.invalid_request, f"unknown special timestamp {timestamp}")
        else:
            found = log.offset_for_timestamp(timestamp)
        if lagging and (found is None or found[0] >= limit):
            raise PartitionError(
                ErrorCode.offset_not_available,
                f"the high watermark {log.high_watermark} of {self.topic}-{self.partition} is below the start "
                f"{self._leader_epoch_start} of leader epoch {self.leader_epoch}",
            )
        if timestamp == LATEST:
            return -1, limit
        if found is None or found[0] >= limit:
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
        log = self.log
        target = log.log_end_offset
        followers, node_id = self.followers, self.node_id
        for r in self.isr if self.pending is None else self.maximal_isr:
            if r != node_id:
                st = followers.get(r)
                leo = st.log_end_offset if st is not None else -1
                if leo < target:
                    target = leo
        if target <= log.high_watermark:
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
