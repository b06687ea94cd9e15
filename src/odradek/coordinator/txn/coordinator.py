"""The transaction coordinator (Kafka's TransactionCoordinator): the transaction operations
the handlers call, each on the shard of the transactional id's partition of
`__transaction_state` (shard.py) on the coordinator runtime (coordinator/runtime.py), which
owns leadership, loading, the pipelined writes and epoch validity. The leader epoch a shard was
elected at is the coordinator epoch written into the markers; once a shard is loaded and
what it loaded is committed, the transactions it finds in PrepareCommit / PrepareAbort get
their markers sent again. Until then (a leader elected with records of the old one above its
high watermark, which the next leader may not have) every request gets
COORDINATOR_LOAD_IN_PROGRESS and no transaction is timed out, expired or completed from
that state (runtime.py, "Reads of committed state").

A request is checked against the id's metadata and prepares a transition (state.py);
the transition's record is appended with acks=all and the reply is given only once it
is committed; then the transition completes. While it is pending, other requests of the
same id get CONCURRENT_TRANSACTIONS. EndTxn answers once PrepareCommit / PrepareAbort is
committed; the markers are then written to every partition of the transaction by the
`MarkerWriter` (the broker's marker channel: local partitions directly, others with
WriteTxnMarkers to their leader, retried until written), and CompleteCommit /
CompleteAbort is written after them.

Background work, on the broker's event loop: every
`transaction.abort.timed.out.transaction.cleanup.interval.ms` transactions Ongoing for
longer than their timeout are aborted (their producer fenced: the epoch is bumped, as
Kafka does); every `transaction.remove.expired.transaction.cleanup.interval.ms` ids idle
for `transactional.id.expiration.ms` are removed (a tombstone). No request handler
sleeps: they await the commit of their record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from odradek.coordinator.partitions import CoordinatorPartitions
from odradek.coordinator.runtime import CoordinatorRuntime, Settings, ShardContext, ShardState
from odradek.coordinator.txn.records import TXN_STATE_TOPIC, TxnRecord, serialize_record
from odradek.coordinator.txn.shard import TxnShard
from odradek.coordinator.txn.state import (
    COMPLETED,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Transit,
    TxnMetadata,
    TxnState,
    epoch_exhausted,
)
from odradek.protocol.errors import ErrorCode as E

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
Partitions = frozenset[tuple[str, int]]

# Errors of the append of a coordinator record, as Kafka's TransactionStateManager answers them.
_APPEND_ERRORS = {
    int(E.unknown_topic_or_partition): int(E.coordinator_not_available),
    int(E.not_enough_replicas): int(E.coordinator_not_available),
    int(E.not_enough_replicas_after_append): int(E.coordinator_not_available),
    int(E.request_timed_out): int(E.coordinator_not_available),
    int(E.not_leader_or_follower): int(E.not_coordinator),
    int(E.kafka_storage_error): int(E.not_coordinator),
    int(E.not_coordinator): int(E.not_coordinator),  # the runtime's: the shard moved
}


@dataclass(frozen=True)
class TxnConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_interval_ms: int = 10000
    remove_expired_interval_ms: int = 3600000
    commit_timeout_ms: int = 5000

    @classmethod
    def from_broker(cls, config: Settings) -> TxnConfig:
        return cls(
            num_partitions=config["transaction.state.log.num.partitions"],
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
            commit_timeout_ms=config["offsets.commit.timeout.ms"],
        )


class MarkerWriter(Protocol):
    """The broker's marker channel (Kafka's TransactionMarkerChannelManager)."""

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Partitions,
        still_valid: Callable[[], bool],
    ) -> bool:
        """Write the marker to every partition (retrying what cannot be written yet): True
        when all are written; False when it gave up (`still_valid()` turned false: the shard
        moved; or the coordinator is fenced)."""
        ...


@dataclass(frozen=True, slots=True)
class TxnDescription:
    transactional_id: str
    error_code: int
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_ms: int = -1
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


class TransactionCoordinator:
    """`await start()`, leadership hooks, the transaction operations, `await stop()`."""

    def __init__(
        self,
        config: TxnConfig,
        partitions: CoordinatorPartitions,
        ensure_topic: Callable[[], Awaitable[None]],
        next_producer_id: Callable[[], Awaitable[int]],
        markers: MarkerWriter,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self._ensure_topic = ensure_topic
        self._next_producer_id = next_producer_id
        self.markers = markers
        self.runtime: CoordinatorRuntime[TxnShard, TxnRecord] = CoordinatorRuntime(
            TXN_STATE_TOPIC,
            config.num_partitions,
            partitions,
            TxnShard,
            serialize_record,
            commit_timeout_ms=config.commit_timeout_ms,
            clock=clock,
            on_loaded=self._resume_ending,
        )
        self.clock = self.runtime.clock

    # =================================================================== lifecycle
    async def start(self) -> None:
        await self.runtime.start()
        self.runtime.every(self.config.abort_interval_ms, self.abort_timed_out)
        self.runtime.every(self.config.remove_expired_interval_ms, self.remove_expired)

    async def stop(self) -> None:
        await self.runtime.stop()

    @property
    def active(self) -> bool:
        return self.runtime.active

    @property
    def fenced(self) -> str | None:
        """Why this broker does not act as coordinator now (cut from ZooKeeper), or None."""
        return self.runtime.fenced

    async def ensure_topic(self) -> None:
        await self._ensure_topic()

    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    def txn_error(self, transactional_id: str) -> int:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, or 0."""
        return self.runtime.lookup_for_read(transactional_id)[0]

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

    def _resume_ending(self, ctx: ShardContext[TxnShard]) -> None:
        """A shard is loaded: transactions that were ending when its last coordinator stopped
        get their markers and completion written again."""
        for md in ctx.shard.ending():
            self.runtime.spawn(self._complete(ctx.partition, ctx.epoch, md, md.prepare_complete(self.clock())))

    def _valid(self, partition: int, epoch: int) -> Callable[[], bool]:
        return lambda: self.active and self.runtime.epoch(partition) == epoch

    # =================================================================== writing
    async def _write(self, partition: int, epoch: int, txn_id: str, t: Transit) -> int:
        """Append the transit's record; 0 once committed (and the shard still ours), else the error."""
        value = None if t.state == TxnState.DEAD else t.log_value()
        err = await self.runtime.append(partition, epoch, [(txn_id, value)])
        return _APPEND_ERRORS.get(err, int(E.unknown_server_error)) if err else 0

    async def _transition(self, partition: int, epoch: int, md: TxnMetadata, t: Transit) -> int:
        err = await self._write(partition, epoch, md.transactional_id, t)
        if err:
            md.abort_pending()
        else:
            md.complete(t)
        return err

    def _lookup(self, txn_id: str) -> tuple[int, int, int, TxnShard]:
        """(error, partition, coordinator epoch, shard). Every operation reads the id's state
        and may act on it (answer, write markers): COORDINATOR_LOAD_IN_PROGRESS while what the
        shard loaded is not all committed."""
        err, ctx = self.runtime.lookup_for_read(txn_id)
        if ctx is None:
            return err, -1, -1, TxnShard()
        return 0, ctx.partition, ctx.epoch, ctx.shard

    # =================================================================== InitProducerId
    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a transactional producer (k22)."""
        fail = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not txn_id:
            return int(E.invalid_request), *fail
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return int(E.invalid_transaction_timeout), *fail
        err, p, cepoch, shard = self._lookup(txn_id)
        if err:
            return err, *fail
        md = shard.get(txn_id)
        if md is None:
            try:
                pid = await self._next_producer_id()
            except Exception:
                log.exception("cannot allocate a producer id")
                return int(E.coordinator_not_available), *fail
            err, p, cepoch, shard = self._lookup(txn_id)
            if err:
                return err, *fail
            md = shard.transactions.setdefault(txn_id, TxnMetadata.new(txn_id, pid, timeout_ms, self.clock()))
        expected = (expected_pid, expected_epoch) if expected_pid >= 0 else None
        if md.pending is not None:
            return int(E.concurrent_transactions), *fail
        if expected is not None and not (
            md.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == md.producer_id
            or (expected[0] == md.last_producer_id and epoch_exhausted(expected[1]))
        ):
            return int(E.producer_fenced), *fail
        now = self.clock()
        if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return int(E.concurrent_transactions), *fail
        if md.state == TxnState.ONGOING:
            # Abort the previous producer's transaction with a bumped epoch (it is fenced), and
            # have this producer retry: its retry bumps the epoch again.
            fence = md.prepare_fence_epoch()
            err, _pid, _epoch = await self._end(txn_id, fence.producer_id, fence.producer_epoch, False, False)
            return err or int(E.concurrent_transactions), *fail
        if md.state not in COMPLETED:
            log.error("transactional id %s is in state %s", txn_id, md.state.kafka_name)
            return int(E.unknown_server_error), *fail
        t: Transit | int
        if md.epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
            try:
                new_pid = await self._next_producer_id()
            except Exception:
                log.exception("cannot allocate a producer id")
                return int(E.coordinator_not_available), *fail
            if md.pending is not None or shard.get(txn_id) is not md:
                return int(E.concurrent_transactions), *fail
            t = md.prepare_rotate_producer_id(new_pid, timeout_ms, now, expected is not None)
        else:
            t = md.prepare_increment_epoch(timeout_ms, expected[1] if expected else None, now)
        if isinstance(t, int):
            return t, *fail
        err = await self._transition(p, cepoch, md, t)
        if err:
            return err, *fail
        log.info(
            "initialized transactional id %s with producer id %d epoch %d on %s-%d",
            txn_id,
            md.producer_id,
            md.producer_epoch,
            TXN_STATE_TOPIC,
            p,
        )
        return 0, md.producer_id, md.producer_epoch

    # =================================================================== AddPartitionsToTxn
    async def add_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> int:
        """One error for the whole request (k24 v0-3, k25)."""
        if not txn_id:
            return int(E.invalid_request)
        err, p, cepoch, shard = self._lookup(txn_id)
        if err:
            return err
        md = shard.get(txn_id)
        wanted = set(partitions)
        if md is None or md.producer_id != producer_id:
            return int(E.invalid_producer_id_mapping)
        if md.producer_epoch != epoch:
            return int(E.producer_fenced)
        if md.pending is not None or md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return int(E.concurrent_transactions)
        if md.state == TxnState.ONGOING and wanted <= md.partitions:
            return 0
        return await self._transition(p, cepoch, md, md.prepare_add_partitions(wanted, self.clock()))

    def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """KIP-890: whether each partition is part of the producer's ongoing transaction
        (0), TRANSACTION_ABORTABLE when not, or one error for all."""
        parts = list(partitions)
        if not txn_id:
            return dict.fromkeys(parts, int(E.invalid_request))
        err, _p, _e, shard = self._lookup(txn_id)
        md = shard.get(txn_id) if not err else None
        if not err:
            if md is None or md.producer_id != producer_id:
                err = int(E.invalid_producer_id_mapping)
            elif md.producer_epoch != epoch:
                err = int(E.producer_fenced)
            elif md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                err = int(E.concurrent_transactions)
        if err or md is None:
            return dict.fromkeys(parts, err)
        return {tp: 0 if tp in md.partitions else int(E.transaction_abortable) for tp in parts}

    # =================================================================== EndTxn
    async def end_txn(self, txn_id: str, producer_id: int, epoch: int, commit: bool) -> tuple[int, int, int]:
        """(error, producer id, epoch) (k26)."""
        return await self._end(txn_id, producer_id, epoch, commit, True)

    async def _end(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, from_client: bool
    ) -> tuple[int, int, int]:
        """EndTxn from a client, or (`from_client` false) the abort that follows an epoch fence
        (InitProducerId on an Ongoing transaction, a timeout), which carries the fenced epoch."""
        fail = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not txn_id:
            return int(E.invalid_request), *fail
        err, p, cepoch, shard = self._lookup(txn_id)
        md = shard.get(txn_id) if not err else None
        fencing = md is not None and md.pending == TxnState.PREPARE_EPOCH_FENCE and not from_client
        t: Transit | None = None
        if err:
            pass
        elif md is None or md.producer_id != producer_id:
            err = int(E.invalid_producer_id_mapping)
        elif not ((not from_client or epoch == md.producer_epoch) and epoch >= md.producer_epoch):
            err = int(E.producer_fenced)
        elif md.pending is not None and not fencing:
            err = int(E.concurrent_transactions)  # (a client's EndTxn while a fence is pending, too)
        elif md.state == TxnState.ONGOING:
            now = self.clock()
            t = md.prepare_abort_after_fence(epoch, now) if fencing else md.prepare_end(commit, now)
        elif md.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return 0, md.producer_id, md.producer_epoch  # a retry of an EndTxn that completed
        elif md.state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            err = int(E.concurrent_transactions)
        else:
            err = int(E.invalid_txn_state)
        if t is None or md is None:
            if fencing and md is not None:
                md.abort_pending()
            return err or int(E.unknown_server_error), *fail
        err = await self._write(p, cepoch, txn_id, t)
        if err:
            if fencing:
                md.failed_epoch_fence = True  # the bumped epoch was not given out: the next fence reuses it
            md.abort_pending()
            return err, *fail
        md.complete(t)
        self.runtime.spawn(self._complete(p, cepoch, md, md.prepare_complete(self.clock())))
        return 0, md.producer_id, md.producer_epoch

    async def _complete(self, partition: int, cepoch: int, md: TxnMetadata, t: Transit) -> None:
        """Write the markers of a PrepareCommit / PrepareAbort, then CompleteCommit / CompleteAbort."""
        valid = self._valid(partition, cepoch)
        commit = md.state == TxnState.PREPARE_COMMIT
        written = await self.markers.write_markers(
            md.producer_id, md.producer_epoch, cepoch, commit, frozenset(md.partitions), valid
        )
        while written and valid():
            err = await self._write(partition, cepoch, md.transactional_id, t)
            if not err:
                md.complete(t)
                log.debug("%s: %s", md.transactional_id, md.state.kafka_name)
                return
            if err == int(E.not_coordinator):
                break
            await asyncio.sleep(RETRY_BACKOFF_S)
        md.abort_pending()  # the shard moved: its next coordinator completes the transaction

    # =================================================================== timeouts and expiry
    def abort_timed_out(self) -> None:
        """Abort every transaction Ongoing for longer than its timeout (the producer is fenced)."""
        now = self.clock()
        for ctx in self.runtime.loaded_contexts():
            if not ctx.serves_reads:
                continue
            for md in list(ctx.shard.transactions.values()):
                if md.state == TxnState.ONGOING and md.pending is None and md.start_ms + md.timeout_ms < now:
                    log.info(
                        "aborting transaction of %s (producer %d epoch %d): ongoing for more than %d ms",
                        md.transactional_id,
                        md.producer_id,
                        md.producer_epoch,
                        md.timeout_ms,
                    )
                    fence = md.prepare_fence_epoch()
                    self.runtime.spawn(
                        self._end(md.transactional_id, fence.producer_id, fence.producer_epoch, False, False)
                    )

    def remove_expired(self) -> None:
        """Remove ids idle for transactional.id.expiration.ms (a tombstone each)."""
        now = self.clock()
        for ctx in self.runtime.loaded_contexts():
            if not ctx.serves_reads:
                continue
            for md in list(ctx.shard.transactions.values()):
                if (
                    md.state in COMPLETED
                    and md.pending is None
                    and md.last_update_ms + self.config.id_expiration_ms <= now
                ):
                    self.runtime.spawn(self._expire(ctx.partition, ctx.epoch, ctx.shard, md))

    async def _expire(self, partition: int, cepoch: int, shard: TxnShard, md: TxnMetadata) -> None:
        t = md.prepare_dead()
        err = await self._write(partition, cepoch, md.transactional_id, t)
        if err:
            md.abort_pending()
            return
        md.complete(t)
        if shard.get(md.transactional_id) is md:
            del shard.transactions[md.transactional_id]
            log.info("transactional id %s expired", md.transactional_id)

    # =================================================================== describe / list
    def describe(self, txn_id: str) -> TxnDescription:
        if not self.active:
            return TxnDescription(txn_id, int(E.coordinator_not_available))
        if not txn_id:
            return TxnDescription(txn_id, int(E.invalid_request))
        err, _p, _e, shard = self._lookup(txn_id)
        if err:
            return TxnDescription(txn_id, err)
        md = shard.get(txn_id)
        if md is None or md.state == TxnState.DEAD:
            return TxnDescription(txn_id, int(E.transactional_id_not_found))
        return TxnDescription(
            txn_id,
            0,
            md.state.kafka_name,
            md.producer_id,
            md.producer_epoch,
            md.timeout_ms,
            md.start_ms,
            tuple(sorted(md.partitions)),
        )

    def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), min_duration_ms: int = -1
    ) -> tuple[int, list[str], list[TxnListing]]:
        """(error, unknown state filters, the matching transactions) of the shards here (as
        Kafka: nothing but COORDINATOR_LOAD_IN_PROGRESS while one is loading)."""
        if not self.active:
            return int(E.coordinator_not_available), [], []
        wanted_states = set()
        unknown = []
        for name in states:
            st = TxnState.by_name(name)
            if st is None:
                unknown.append(name)
            else:
                wanted_states.add(st)
        pids = set(producer_ids)
        if any(ctx.state is not ShardState.FAILED and not ctx.serves_reads for ctx in self.runtime.contexts()):
            return int(E.coordinator_load_in_progress), [], []
        filtering_states = bool(unknown or wanted_states)
        now = self.clock()
        out = []
        for ctx in self.runtime.loaded_contexts():
            for md in ctx.shard.transactions.values():
                if md.state == TxnState.DEAD:
                    continue
                if filtering_states and md.state not in wanted_states:
                    continue
                if pids and md.producer_id not in pids:
                    continue
                if min_duration_ms >= 0 and now - md.start_ms <= min_duration_ms:
                    continue  # (as Kafka: an Empty one, start -1, passes any duration)
                out.append(TxnListing(md.transactional_id, md.producer_id, md.state.kafka_name))
        return 0, unknown, out
