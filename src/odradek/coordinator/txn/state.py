"""The state of one transactional id and its transitions (Kafka's TransactionMetadata).

A transition is prepared (`prepare_*` returns the `Transit`, the metadata to be, and marks
it pending), written to `__transaction_state`, and then completed (`complete`) or, when
the write failed, dropped (`abort_pending`). While a transition is pending, other
requests of the same transactional id get CONCURRENT_TRANSACTIONS, so the records of one
id are written one after another. Pure: no I/O, no clock (times are passed in).

States, as Kafka's TransactionState (the id is the byte in the log):

    Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit / PrepareAbort
    PrepareCommit --markers written--> CompleteCommit ; PrepareAbort --> CompleteAbort
    Empty / CompleteCommit / CompleteAbort --InitProducerId--> Empty (epoch bumped)
    Ongoing --InitProducerId or timeout--> PrepareEpochFence (pending only, never written)
        --> PrepareAbort with the bumped epoch (the old producer is fenced)
    Empty / CompleteCommit / CompleteAbort --expired--> Dead (a tombstone)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from odradek.coordinator.txn.records import TxnLogValue
from odradek.protocol.errors import ErrorCode as E

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's DescribeTransactions / ListTransactions use."""
        return _NAMES[self]

    @classmethod
    def by_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

# What each state may be followed by (Kafka's TransactionState.validPreviousStates, turned around).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

COMPLETED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


class TransitionError(Exception):
    """A transition the state machine does not allow (a bug: handlers check before preparing)."""


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch (Short.MaxValue) for fencing: a producer never gets it."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class Transit:
    """The metadata after a transition: what is written to the log."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    last_update_ms: int

    def log_value(self) -> TxnLogValue:
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            () if self.state == TxnState.EMPTY else tuple(sorted(self.partitions)),
            self.last_update_ms,
            self.start_ms,
        )


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int  # the id before the last rotation (KIP-360 retries)
    producer_epoch: int
    last_producer_epoch: int  # the epoch before the last bump (a retried InitProducerId gets the same answer)
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None
    failed_epoch_fence: bool = False

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TxnMetadata:
        return cls(
            transactional_id,
            producer_id,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_PRODUCER_EPOCH,
            timeout_ms,
            TxnState.EMPTY,
            set(),
            -1,
            now_ms,
        )

    @classmethod
    def from_log(cls, transactional_id: str, v: TxnLogValue) -> TxnMetadata:
        return cls(
            transactional_id,
            v.producer_id,
            v.previous_producer_id,
            v.producer_epoch,
            NO_PRODUCER_EPOCH,
            v.timeout_ms,
            TxnState(v.state),
            set(v.partitions),
            v.start_ms,
            v.last_update_ms,
        )

    # ------------------------------------------------------------ queries
    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    # ---------------------------------------------------------- prepares
    def _transit(
        self,
        state: TxnState,
        *,
        producer_id: int | None = None,
        epoch: int | None = None,
        last_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: frozenset[tuple[str, int]] | None = None,
        start_ms: int | None = None,
        now_ms: int | None = None,
    ) -> Transit:
        if self.pending is not None:
            raise TransitionError(f"{self.transactional_id}: {self.pending.kafka_name} is pending already")
        if self.state not in VALID_PREVIOUS[state]:
            raise TransitionError(f"{self.transactional_id}: {self.state.kafka_name} cannot become {state.kafka_name}")
        self.pending = state
        return Transit(
            self.producer_id if producer_id is None else producer_id,
            self.last_producer_id,
            self.producer_epoch if epoch is None else epoch,
            self.last_producer_epoch if last_epoch is None else last_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms,
            state,
            frozenset(self.partitions) if partitions is None else partitions,
            self.start_ms if start_ms is None else start_ms,
            self.last_update_ms if now_ms is None else now_ms,
        )

    def prepare_fence_epoch(self) -> Transit:
        """An Ongoing transaction whose producer is replaced or timed out: bump the epoch (not
        again after a failed fence: that epoch was never given out), to abort with it."""
        if self.producer_epoch == MAX_EPOCH:
            raise TransitionError(f"{self.transactional_id}: cannot fence epoch {MAX_EPOCH}")
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._transit(TxnState.PREPARE_EPOCH_FENCE, epoch=epoch, last_epoch=NO_PRODUCER_EPOCH)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> Transit | int:
        """InitProducerId on a completed transaction: the epoch bumped (or, for a retry of a
        bump that succeeded, the same answer again). An error code when the producer is fenced."""
        if self.epoch_exhausted:
            raise TransitionError(f"{self.transactional_id}: producer {self.producer_id}'s epochs are exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return int(E.producer_fenced)
        return self._transit(
            TxnState.EMPTY,
            epoch=epoch,
            last_epoch=last,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            now_ms=now_ms,
        )

    def prepare_rotate_producer_id(self, new_pid: int, timeout_ms: int, now_ms: int, record_last: bool) -> Transit:
        """The epochs of the current producer id are exhausted: a new id at epoch 0."""
        t = self._transit(
            TxnState.EMPTY,
            producer_id=new_pid,
            epoch=0,
            last_epoch=self.producer_epoch if record_last else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            now_ms=now_ms,
        )
        return Transit(
            t.producer_id,
            self.producer_id,
            t.producer_epoch,
            t.last_producer_epoch,
            t.timeout_ms,
            t.state,
            t.partitions,
            t.start_ms,
            t.last_update_ms,
        )

    def prepare_add_partitions(self, added: set[tuple[str, int]], now_ms: int) -> Transit:
        start = now_ms if self.state in COMPLETED else self.start_ms
        return self._transit(
            TxnState.ONGOING, partitions=frozenset(self.partitions | added), start_ms=start, now_ms=now_ms
        )

    def prepare_end(self, commit: bool, now_ms: int) -> Transit:
        """Ongoing -> PrepareCommit / PrepareAbort. After an epoch fence (pending
        PrepareEpochFence) the abort carries the fenced epoch: the pending fence is replaced."""
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if self.pending == TxnState.PREPARE_EPOCH_FENCE:
            raise TransitionError("use prepare_abort_after_fence")
        return self._transit(state, now_ms=now_ms)

    def prepare_abort_after_fence(self, fenced_epoch: int, now_ms: int) -> Transit:
        if self.pending != TxnState.PREPARE_EPOCH_FENCE:
            raise TransitionError(f"{self.transactional_id}: no epoch fence is pending")
        self.pending = None
        self.producer_epoch = fenced_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        return self._transit(TxnState.PREPARE_ABORT, now_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> Transit:
        """PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort (the markers are written)."""
        state = TxnState.COMPLETE_COMMIT if self.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        self.failed_epoch_fence = False
        return self._transit(state, last_epoch=self.producer_epoch, partitions=frozenset(), now_ms=now_ms)

    def prepare_dead(self) -> Transit:
        return self._transit(TxnState.DEAD, partitions=frozenset())

    # ---------------------------------------------------------- outcomes
    def complete(self, t: Transit) -> None:
        """The transit is in the log: it becomes the state."""
        if self.pending != t.state:
            raise TransitionError(
                f"{self.transactional_id}: completing {t.state.kafka_name} but "
                f"{self.pending.kafka_name if self.pending else 'nothing'} is pending"
            )
        self.pending = None
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.timeout_ms = t.timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.start_ms = t.start_ms
        self.last_update_ms = t.last_update_ms

    def abort_pending(self) -> None:
        """The write of the pending transit failed: nothing changes."""
        self.pending = None
