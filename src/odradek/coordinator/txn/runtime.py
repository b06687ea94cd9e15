"""The transaction coordinator: one shard per partition of `__transaction_state` this broker leads.

Shards follow leadership, as the group coordinator's (coordinator/group/runtime.py): the
broker calls `on_elected(topic, partition, epoch)` when it becomes leader of a partition
of `__transaction_state` (the shard is loaded by replaying its log to the end;
requests for its ids get COORDINATOR_LOAD_IN_PROGRESS meanwhile, and transactions found
in PrepareCommit / PrepareAbort get their markers sent again) and `on_resigned(...)`
when it stops (the shard is dropped; NOT_COORDINATOR). The leader epoch of the partition
is the coordinator epoch written into the markers.

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
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.coordinator.partitions import CoordinatorPartitions
from odradek.coordinator.txn.records import (
    TXN_STATE_TOPIC,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
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
from odradek.protocol.errors import KafkaError
from odradek.protocol.records import Record, build_batch, decode_records, iter_batches

log = logging.getLogger(__name__)

LOAD_READ_BYTES = 1 << 20
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
}


class Settings(Protocol):
    def __getitem__(self, name: str) -> Any: ...


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
        self.num_partitions = config.num_partitions
        self.partitions = partitions
        self._ensure_topic = ensure_topic
        self._next_producer_id = next_producer_id
        self.markers = markers
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.shards: dict[int, dict[str, TxnMetadata]] = {}
        self.epochs: dict[int, int] = {}
        self.loading: set[int] = set()
        self.active = False
        self._tasks: set[asyncio.Task] = set()

    # =================================================================== lifecycle
    async def start(self) -> None:
        self.active = True
        self._spawn(self._periodic(self.config.abort_interval_ms, self.abort_timed_out))
        self._spawn(self._periodic(self.config.remove_expired_interval_ms, self.remove_expired))

    async def stop(self) -> None:
        self.active = False
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction coordinator task failed", exc_info=task.exception())

    async def _periodic(self, interval_ms: int, fn: Callable[[], None]) -> None:
        while self.active:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except Exception:
                log.exception("transaction coordinator background check failed")

    async def ensure_topic(self) -> None:
        await self._ensure_topic()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def txn_error(self, transactional_id: str) -> int:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, or 0."""
        if not self.active:
            return int(E.coordinator_not_available)
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return int(E.coordinator_load_in_progress)
        if p not in self.shards:
            return int(E.not_coordinator)
        return 0

    # =================================================================== leadership
    def on_elected(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != TXN_STATE_TOPIC or not self.active:
            return
        if self.epochs.get(partition) == leader_epoch and partition in self.shards:
            return
        self.shards.pop(partition, None)
        self.shards[partition] = {}
        self.epochs[partition] = leader_epoch
        try:
            empty = self.partitions.log_start_offset(topic, partition) >= self.partitions.log_end_offset(
                topic, partition
            )
        except KafkaError:
            empty = False
        if not empty:  # (a new partition has nothing to replay: served at once)
            self.loading.add(partition)
            self._spawn(self._load(partition, leader_epoch))

    def on_resigned(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != TXN_STATE_TOPIC:
            return
        shard = self.shards.pop(partition, None)
        self.epochs.pop(partition, None)
        self.loading.discard(partition)
        if shard is not None:
            log.info("unloaded %s-%d (%d transactional ids)", TXN_STATE_TOPIC, partition, len(shard))

    def _valid(self, partition: int, epoch: int) -> Callable[[], bool]:
        return lambda: self.active and self.epochs.get(partition) == epoch

    async def _load(self, partition: int, epoch: int) -> None:
        shard = self.shards[partition]
        started = time.monotonic()
        count = 0
        offset = 0
        try:
            offset = self.partitions.log_start_offset(TXN_STATE_TOPIC, partition)
            while True:
                data, end = await asyncio.to_thread(
                    self.partitions.read_log_bytes, TXN_STATE_TOPIC, partition, offset, LOAD_READ_BYTES
                )
                if not data or self.epochs.get(partition) != epoch:
                    break
                for h in iter_batches(data):
                    if not h.is_control:
                        for rec in decode_records(data, h.position):
                            if rec.offset >= offset and rec.key is not None:
                                self._replay(shard, rec.key, rec.value)
                                count += 1
                    offset = max(offset, h.next_offset)
                if offset >= end:
                    break
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed at offset %d", TXN_STATE_TOPIC, partition, offset)
        if self.epochs.get(partition) != epoch:
            return
        self.loading.discard(partition)
        log.info(
            "loaded %d records of %s-%d (%d transactional ids) in %.0f ms",
            count,
            TXN_STATE_TOPIC,
            partition,
            len(shard),
            (time.monotonic() - started) * 1000,
        )
        # Transactions that were ending when the last coordinator stopped: their markers again.
        for md in list(shard.values()):
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and md.pending is None:
                self._spawn(self._complete(partition, epoch, md, md.prepare_complete(self.clock())))

    @staticmethod
    def _replay(shard: dict[str, TxnMetadata], key: bytes, value: bytes | None) -> None:
        try:
            txn_id = decode_key(key)
            v = decode_value(value)
        except RecordFormatError as e:
            log.warning("skipping unreadable %s record: %s", TXN_STATE_TOPIC, e)
            return
        if v is None:
            shard.pop(txn_id, None)
        else:
            shard[txn_id] = TxnMetadata.from_log(txn_id, v)

    # =================================================================== writing
    async def _write(self, partition: int, epoch: int, txn_id: str, t: Transit) -> int:
        """Append the transit's record; 0 once committed (and the shard still ours), else the error."""
        value = None if t.state == TxnState.DEAD else encode_value(t.log_value())
        batch = build_batch([Record(0, self.clock(), encode_key(txn_id), value, ())], base_offset=0)
        try:
            await self.partitions.append_committed(TXN_STATE_TOPIC, partition, batch, self.config.commit_timeout_ms)
        except KafkaError as e:
            log.warning("append to %s-%d failed: %s", TXN_STATE_TOPIC, partition, e)
            return _APPEND_ERRORS.get(e.code, int(E.unknown_server_error))
        except Exception:
            log.exception("append to %s-%d failed", TXN_STATE_TOPIC, partition)
            return int(E.unknown_server_error)
        if self.epochs.get(partition) != epoch:
            return int(E.not_coordinator)
        return 0

    async def _transition(self, partition: int, epoch: int, md: TxnMetadata, t: Transit) -> int:
        err = await self._write(partition, epoch, md.transactional_id, t)
        if err:
            md.abort_pending()
        else:
            md.complete(t)
        return err

    def _lookup(self, txn_id: str) -> tuple[int, int, int, dict[str, TxnMetadata]]:
        """(error, partition, coordinator epoch, shard)."""
        err = self.txn_error(txn_id)
        if err:
            return err, -1, -1, {}
        p = self.partition_for(txn_id)
        return 0, p, self.epochs[p], self.shards[p]

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
            md = shard.setdefault(txn_id, TxnMetadata.new(txn_id, pid, timeout_ms, self.clock()))
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
        self._spawn(self._complete(p, cepoch, md, md.prepare_complete(self.clock())))
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
        for p, shard in list(self.shards.items()):
            if p in self.loading:
                continue
            for md in list(shard.values()):
                if md.state == TxnState.ONGOING and md.pending is None and md.start_ms + md.timeout_ms < now:
                    log.info(
                        "aborting transaction of %s (producer %d epoch %d): ongoing for more than %d ms",
                        md.transactional_id,
                        md.producer_id,
                        md.producer_epoch,
                        md.timeout_ms,
                    )
                    fence = md.prepare_fence_epoch()
                    self._spawn(self._end(md.transactional_id, fence.producer_id, fence.producer_epoch, False, False))

    def remove_expired(self) -> None:
        """Remove ids idle for transactional.id.expiration.ms (a tombstone each)."""
        now = self.clock()
        for p, shard in list(self.shards.items()):
            if p in self.loading:
                continue
            for md in list(shard.values()):
                if (
                    md.state in COMPLETED
                    and md.pending is None
                    and md.last_update_ms + self.config.id_expiration_ms <= now
                ):
                    self._spawn(self._expire(p, self.epochs[p], shard, md))

    async def _expire(self, partition: int, cepoch: int, shard: dict[str, TxnMetadata], md: TxnMetadata) -> None:
        t = md.prepare_dead()
        err = await self._write(partition, cepoch, md.transactional_id, t)
        if err:
            md.abort_pending()
            return
        md.complete(t)
        if shard.get(md.transactional_id) is md:
            del shard[md.transactional_id]
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
        if self.loading:
            return int(E.coordinator_load_in_progress), [], []
        filtering_states = bool(unknown or wanted_states)
        now = self.clock()
        out = []
        for shard in list(self.shards.values()):
            for md in shard.values():
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
