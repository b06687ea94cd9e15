"""Hosted partitions: appends with acks, reads for Fetch, offsets, and the purgatories.

The replica manager is the only way from a request handler (or a coordinator) to a
partition's log. Handlers call it with domain values (topic, partition, bytes, offsets)
and get domain results with Kafka error codes; storage and partition exceptions are
translated here and nowhere else (by class, `error_for`).

It follows the metadata (`on_metadata`, a metadata-store listener): a partition with a
replica on this broker gets a `Partition` and a log (created if missing), takes its role
and leader epoch from the metadata, and is dropped (its log deleted) when its topic is
deleted. Leadership changes go to the registered `LeadershipListener`s (the group
coordinator loads and unloads its shards of `__consumer_offsets` from them).

Produce: every partition of a request is appended first, then one `DelayedProduce` waits
for acks=all (completed at once while the ISR is this broker). A coordinator's write is the
same two steps taken apart (coordinator/partitions.py): `append_as_leader` appends at once,
`wait_for_commit` waits in the produce purgatory, so that the writes of a partition follow
each other into the log without waiting for each other's replication. Fetch waits in the
fetch purgatory, which a partition's high-watermark advance wakes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from odradek.broker.partition import Isolation, LogReadInfo, Partition, PartitionError, Role
from odradek.broker.purgatory import DelayedProduce, ProduceWait, Purgatory
from odradek.cluster.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.protocol.errors import ErrorCode, InvalidRecordError, KafkaError, error_class
from odradek.protocol.produce_codec import PartitionProduceResult
from odradek.protocol.records import CorruptRecordError, build_control_batch
from odradek.storage import errors as serr
from odradek.storage.log import AppendInfo, AppendOrigin

if TYPE_CHECKING:
    from odradek.broker.metrics import BrokerMetrics
    from odradek.broker.replication.alter_partition import AlterPartitionSender
    from odradek.broker.replication.fetcher import ReplicaFetcherManager
    from odradek.broker.topic_configs import TopicConfigs
    from odradek.storage import Log, LogManager
    from odradek.storage.producer_state import ProducerEntry

log = logging.getLogger("odradek.broker.replica_manager")

# Most specific first: CorruptRecordError is a ValueError, InvalidRecordError a KafkaError, the
# others StorageErrors.
_ERROR_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (serr.StorageOffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (CorruptRecordError, ErrorCode.corrupt_message),
    (InvalidRecordError, ErrorCode.invalid_record),
    (serr.StorageInvalidTimestampError, ErrorCode.invalid_timestamp),
    (serr.StorageRecordTooLargeError, ErrorCode.message_too_large),
    (serr.StorageOutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (serr.StorageInvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (serr.StorageTransactionCoordinatorFencedError, ErrorCode.transaction_coordinator_fenced),
    (serr.KafkaStorageError, ErrorCode.kafka_storage_error),
    (serr.StorageError, ErrorCode.kafka_storage_error),
)


def error_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code for a partition or storage exception (UNKNOWN_SERVER_ERROR for a bug)."""
    if isinstance(exc, PartitionError):
        return exc.code
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error


class LeadershipListener(Protocol):
    """Told when this broker starts or stops leading a partition (Kafka's onElection / onResignation)."""

    def on_elected(self, topic: str, partition: int, leader_epoch: int) -> None: ...

    def on_resigned(self, topic: str, partition: int, leader_epoch: int) -> None: ...


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    last_offset: int = -1  # of the last record appended: acks=all waits for the high watermark to pass it
    record_errors: tuple[tuple[int, str], ...] = ()  # (index in the batch, message) of each rejected record

    def answer(self, partition: int) -> PartitionProduceResult:
        """This result as partition `partition` of a Produce response."""
        return PartitionProduceResult(
            partition,
            self.error_code,
            self.base_offset,
            self.log_append_time,
            self.log_start_offset,
            self.error_message,
            self.record_errors,
        )


@dataclass(slots=True)
class LogDirDescription:
    path: str
    offline: bool
    partitions: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, size in bytes)
    total_bytes: int = -1
    usable_bytes: int = -1


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        topic_configs: TopicConfigs,
        metrics: BrokerMetrics | None = None,
        *,
        log_dirs: Sequence[str] = (),
        fetchers: ReplicaFetcherManager | None = None,
        alter_isr: AlterPartitionSender | None = None,
        replica_lag_max_ms: int = 30000,
    ) -> None:
        self.node_id = node_id
        self.logs = log_manager
        self.topic_configs = topic_configs
        self.metrics = metrics
        self.log_dirs = list(log_dirs)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.snapshot = EMPTY_SNAPSHOT  # the metadata last applied
        self.fetch_purgatory = Purgatory("fetch")
        # followers' fetches wait for appends, not for the high watermark (which their fetches move)
        self.follower_fetch_purgatory = Purgatory("follower fetch")
        self.produce_purgatory = Purgatory("produce")
        self._leadership_listeners: list[LeadershipListener] = []
        self.fetchers = fetchers
        self.alter_isr = alter_isr
        self.replica_lag_max_ms = replica_lag_max_ms
        self._isr_task: asyncio.Task[None] | None = None
        # KIP-890 verifications in flight with a remote coordinator: guard -> whether a marker
        # for that producer was appended to that partition meanwhile (see txn_verification.py)
        self._verifications: dict[int, tuple[tuple[str, int, int], bool]] = {}
        self._verification_ids = 0
        # flushes that coordinator writes wait for, by (topic, partition, last offset of the write)
        self._coordinator_flushes: dict[tuple[str, int, int], asyncio.Future[None]] = {}

    async def start(self) -> None:
        """Cluster mode: check the ISR of the partitions led here every half replica.lag.time.max.ms."""
        if self.alter_isr is not None:
            self._isr_task = asyncio.ensure_future(self._isr_maintenance())

    async def stop(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
            await asyncio.gather(self._isr_task, return_exceptions=True)
        if self.fetchers is not None:
            await self.fetchers.stop()
        if self.alter_isr is not None:
            await self.alter_isr.stop()

    async def _isr_maintenance(self) -> None:
        interval = max(self.replica_lag_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = int(time.time() * 1000)
            for part in list(self.partitions.values()):
                if part.is_leader and part.followers:
                    part.maybe_shrink_isr(now, self.replica_lag_max_ms)

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._leadership_listeners.append(listener)

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def missing(self, topic: str, partition: int) -> ErrorCode:
        """The error for a partition with no replica here: NOT_LEADER_OR_FOLLOWER when the
        metadata has it (on another broker), else UNKNOWN_TOPIC_OR_PARTITION."""
        if self.snapshot.partition(topic, partition) is not None:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_topic_or_partition

    def broker_epoch(self, broker_id: int) -> int:
        """A broker's epoch (its registration's session) in the metadata; -1 when unknown."""
        info = self.snapshot.broker(broker_id)
        return info.epoch if info is not None else -1

    def _on_isr_change(self, partition: Partition, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        if self.metrics is not None:
            self.metrics.isr_changed(shrunk=len(new) < len(old))

    def _on_high_watermark(self, partition: Partition, visible_bytes: int) -> None:
        self.fetch_purgatory.notify(partition.key, visible_bytes)
        self.produce_purgatory.notify(partition.key)

    # ---------------------------------------------------------------- metadata
    async def on_metadata(self, delta: MetadataDelta) -> None:
        """Create, update or drop hosted partitions to match the new metadata."""
        now = int(time.time() * 1000)
        failure: BaseException | None = None
        self.snapshot = delta.after
        for topic in delta.deleted_topics():
            for p in topic.partitions:
                self._stop_replica(topic.name, p.partition, delete_log=True)
        changed = list(delta.changed_partitions())
        registered = self._own_epoch(delta.before) != self._own_epoch(delta.after)
        if registered:
            # registered (again): a state naming this broker leader may be for this registration
            # now (Partition.update leads only a state whose ISR admitted its current one)
            seen = {(t.name, i.partition) for t, i in changed}
            changed += [
                (t, i)
                for t in delta.after.topics.values()
                for i in t.partitions
                if i.leader == self.node_id and (t.name, i.partition) not in seen
            ]
        for topic, info in changed:
            try:
                if self.node_id in info.replicas:
                    self._apply_partition(topic, info, now)
                else:
                    self._stop_replica(topic.name, info.partition, delete_log=True)
            except Exception as e:  # a log that cannot be created: the partition stays offline here
                log.exception("cannot host %s-%d", topic.name, info.partition)
                failure = failure or e
        for topic in delta.changed_configs():
            self._reconfigure(topic)
        if self.fetchers is not None:
            # A partition's role and leader change only with its state (Partition.update): the
            # changed ones follow their leader, every one when a broker (an endpoint) changed
            every = registered or delta.brokers_changed
            self._assign_fetchers(delta.after, None if every else [(t.name, i.partition) for t, i in changed])
        if failure is not None:
            raise failure

    def _own_epoch(self, snap: ClusterSnapshot) -> int:
        me = snap.broker(self.node_id)
        return me.epoch if me is not None else -1

    def _assign_fetchers(self, snap: ClusterSnapshot, keys: Iterable[tuple[str, int]] | None = None) -> None:
        """Every follower (of `keys`; None: every hosted partition) fetches from its current
        leader (a leader's new endpoint, too); a leader, or a follower of no known leader, not."""
        fetchers = self.fetchers
        assert fetchers is not None
        for key in self.partitions if keys is None else keys:
            part = self.partitions.get(key)
            leader = snap.broker(part.leader_id) if part is not None and part.role is Role.FOLLOWER else None
            if leader is None:
                fetchers.unfollow(key)
            else:
                assert part is not None
                fetchers.follow(part, leader)

    def _apply_partition(self, topic: TopicInfo, info: PartitionInfo, now_ms: int) -> None:
        key = (topic.name, info.partition)
        part = self.partitions.get(key)
        if part is None:
            cfg = self.topic_configs.log_config(topic.configs)
            lg = self.logs.get_log(topic.name, info.partition)
            if lg is None:
                lg = self.logs.create_log(topic.name, info.partition, cfg)
            elif lg.config != cfg:
                lg.update_config(cfg)  # loaded before the metadata said what its topic's configs are
            lg.assign_topic_id(topic.topic_id)  # partition.metadata, as Kafka keeps it
            part = Partition(
                topic.name,
                info.partition,
                lg,
                self.node_id,
                self._on_high_watermark,
                self._on_isr_change,
                alter_isr=self.alter_isr,
                broker_epoch=self.broker_epoch,
            )
            part.min_insync_replicas = self.topic_configs.min_insync_replicas(topic.configs)
            self.partitions[key] = part
        was_leader = part.is_leader
        old_epoch = part.leader_epoch
        if not part.update(info, now_ms):
            return
        # acks=all waits on this partition may now be satisfied or impossible
        self.produce_purgatory.notify(key)
        for listener in self._leadership_listeners:
            if was_leader:
                listener.on_resigned(topic.name, info.partition, old_epoch)
            if part.is_leader:
                listener.on_elected(topic.name, info.partition, part.leader_epoch)

    def _stop_replica(self, topic: str, partition: int, *, delete_log: bool) -> None:
        part = self.partitions.pop((topic, partition), None)
        if part is None:
            return
        if self.fetchers is not None:
            self.fetchers.unfollow(part.key)
        if part.is_leader:
            for listener in self._leadership_listeners:
                listener.on_resigned(topic, partition, part.leader_epoch)
        # waiting fetches answer now (UNKNOWN_TOPIC_OR_PARTITION on their re-read), produces fail
        self.fetch_purgatory.notify(part.key, 1 << 62)
        part.role = part.role.FOLLOWER
        self.produce_purgatory.notify(part.key)
        if delete_log:
            self.logs.delete_log(topic, partition)

    def _reconfigure(self, topic: TopicInfo) -> None:
        cfg = self.topic_configs.log_config(topic.configs)
        min_isr = self.topic_configs.min_insync_replicas(topic.configs)
        for p in topic.partitions:
            part = self.partitions.get((topic.name, p.partition))
            if part is not None:
                part.log.update_config(cfg)
                part.min_insync_replicas = min_isr

    def reconfigure_all(self, topics: Iterable[TopicInfo]) -> None:
        """Broker-level defaults changed: every hosted log takes its effective config again."""
        for topic in topics:
            self._reconfigure(topic)

    # ------------------------------------------------------------------ append
    async def append_records(
        self,
        entries: Sequence[tuple[str, int, bytes | memoryview]],
        required_acks: int,
        timeout_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> list[ProduceResult]:
        """Append each (topic, partition, batches) as leader, then, for acks=all, wait until
        the ISR has them all (or `timeout_ms` passes: REQUEST_TIMED_OUT). ``origin``
        COORDINATOR: batches a coordinator wrote (transaction markers are allowed; a
        client's are refused with INVALID_RECORD, as Kafka)."""
        now = int(time.time() * 1000)
        results: list[ProduceResult] = []
        waits: list[ProduceWait] = []
        for topic, partition, data in entries:
            part = self.partitions.get((topic, partition))
            if part is None:
                results.append(ProduceResult(self.missing(topic, partition)))
                continue
            result, info = self.append_now(part, data, now, required_acks, origin)
            if info is not None and info.needs_flush:
                result = await self.flush_appended(part, result)
            results.append(result)
            if required_acks == -1 and not result.error_code:
                waits.append(ProduceWait(part, result.last_offset + 1))
        if waits:
            await DelayedProduce(self.produce_purgatory, waits).complete(timeout_ms / 1000)
            by_result = iter(waits)
            for result in results:
                if not result.error_code:
                    w = next(by_result)
                    if w.error_code:
                        result.error_code = w.error_code
        return results

    async def flush_appended(self, part: Partition, result: ProduceResult) -> ProduceResult:
        """An append the flush policy (flush.messages) says to flush before acknowledging it."""
        try:
            await self.logs.flush_log(part.log)
        except Exception as e:
            return ProduceResult(error_for(e), error_message=str(e) or None)
        return result

    def append_now(
        self, part: Partition, data: bytes | memoryview, now_ms: int, acks: int, origin: AppendOrigin
    ) -> tuple[ProduceResult, AppendInfo | None]:
        """Append to the local log (no waiting): the result, and what the log says of the
        append (None when refused; `needs_flush`: the caller flushes before acknowledging,
        `flush_appended`). One partition's step of `append_records`, which the leader's fast
        path for Produce (broker/fast_produce.py) takes alone."""
        try:
            info = part.append_as_leader(data, now_ms, acks, origin)
        except Exception as e:  # storage and the partition raise their documented errors; anything else is a bug
            code = error_for(e)
            if code == ErrorCode.unknown_server_error:
                log.exception("append to %s-%d failed", part.topic, part.partition)
            record_errors = getattr(e, "record_errors", ())
            if record_errors:  # some records rejected: Kafka answers them one by one, with the log start offset
                return ProduceResult(
                    code, log_start_offset=part.log_start_offset, error_message=str(e), record_errors=record_errors
                ), None
            return ProduceResult(code, error_message=str(e) or None), None
        if not info.duplicate:
            self.follower_fetch_purgatory.notify(part.key, len(data))
            if self.metrics is not None:
                self.metrics.bytes_in(part.topic, len(data), info.record_count)
        return ProduceResult(
            0, info.first_offset, info.log_append_time_ms, info.log_start_offset, last_offset=info.last_offset
        ), info

    # -------------------------------------------------------------------- read
    def read(
        self,
        topic: str,
        partition: int,
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
        """Read one partition for Fetch (`Partition.fetch_records`: a consumer up to what its
        isolation lets it see, a follower, `replica_id` >= 0, up to the log end, its position
        recorded unless `update_fetch_state` is False). A refusal comes back as the error code
        alone, as Kafka answers it (no high watermark or log start offset: the client asks
        ListOffsets)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return LogReadInfo(self.missing(topic, partition))
        try:
            return part.fetch_records(
                offset,
                max_bytes,
                min_one=min_one,
                isolation=isolation,
                replica_id=replica_id,
                replica_epoch=replica_epoch,
                current_leader_epoch=current_leader_epoch,
                last_fetched_epoch=last_fetched_epoch,
                now_ms=now_ms or int(time.time() * 1000),
                update_fetch_state=update_fetch_state,
            )
        except Exception as e:
            return LogReadInfo(self._failed(e, f"read at {offset}", part))

    # ----------------------------------------------------------------- offsets
    def list_offset(
        self, topic: str, partition: int, timestamp: int, isolation: Isolation, current_leader_epoch: int = -1
    ) -> tuple[int, int, int, int]:
        """ListOffsets: (error code, timestamp, offset, leader epoch)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return self.missing(topic, partition), -1, -1, -1
        try:
            part.check_leader(current_leader_epoch)
            ts, offset = part.offset_for_timestamp(timestamp, isolation)
        except Exception as e:
            return self._failed(e, "offset lookup", part), -1, -1, -1
        if offset < 0:  # nothing found (an empty log, a timestamp past the last record): no epoch either
            return 0, ts, offset, -1
        return 0, ts, offset, part.leader_epoch

    def last_offset_for_leader_epoch(
        self, topic: str, partition: int, epoch: int, current_leader_epoch: int = -1
    ) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch: (error code, epoch, end offset)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return self.missing(topic, partition), -1, -1
        try:
            part.check_leader(current_leader_epoch)
            found_epoch, end = part.last_offset_for_leader_epoch(epoch)
        except Exception as e:
            return self._failed(e, "epoch lookup", part), -1, -1
        return 0, found_epoch, end

    def delete_records(self, topic: str, partition: int, offset: int) -> tuple[int, int]:
        """DeleteRecords: (error code, the new low watermark)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return self.missing(topic, partition), -1
        try:
            part.check_leader()
            return 0, part.delete_records(offset)
        except Exception as e:
            return self._failed(e, "delete records", part), -1

    def describe_producers(self, topic: str, partition: int) -> tuple[int, list[ProducerEntry]]:
        """DescribeProducers: (error code, the producers the partition's log knows), from any
        hosted replica, as Kafka's Partition.activeProducerState."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return self.missing(topic, partition), []
        return 0, list(part.log.producer_state.producers.values())

    @staticmethod
    def _failed(e: BaseException, what: str, part: Partition) -> int:
        code = error_for(e)
        if code == ErrorCode.unknown_server_error:
            log.exception("%s on %s-%d failed", what, part.topic, part.partition)
        return int(code)

    def describe_log_dirs(self, wanted: dict[str, set[int]] | None) -> list[LogDirDescription]:
        """DescribeLogDirs: each log directory, the partitions in it (all, or those `wanted`)."""
        offline = self.logs.offline_dirs
        out = []
        for d in self.log_dirs:
            desc = LogDirDescription(os.path.abspath(d), d in offline)
            if not desc.offline:
                for part in self.partitions.values():
                    lg: Log = part.log
                    if os.path.dirname(os.path.normpath(lg.dir)) != os.path.normpath(d):
                        continue
                    if wanted is not None and part.partition not in wanted.get(part.topic, ()):
                        continue
                    desc.partitions.append((part.topic, part.partition, lg.size_bytes))
                desc.partitions.sort()
            try:
                st = os.statvfs(d)
                desc.total_bytes, desc.usable_bytes = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                pass
            out.append(desc)
        return out

    # ----------------------------------------------------------- transaction markers
    async def write_txn_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        timeout_ms: int,
    ) -> ErrorCode:
        """Append a transaction marker (a control batch: COMMIT or ABORT of the producer's
        transaction on this partition) as leader, written by the transaction coordinator
        (clients may not write control batches: the Produce handler refuses them), and
        return once the high watermark passed it (acks=all)."""
        batch = build_control_batch(
            1 if commit else 0,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp=int(time.time() * 1000),
            coordinator_epoch=coordinator_epoch,
        )
        for guard, (key, _seen) in self._verifications.items():
            if key == (topic, partition, producer_id):
                self._verifications[guard] = (key, True)
        (result,) = await self.append_records(
            [(topic, partition, batch)], -1, timeout_ms, origin=AppendOrigin.COORDINATOR
        )
        if result.error_code:
            log.info(
                "marker for producer %d epoch %d on %s-%d failed: %s",
                producer_id,
                producer_epoch,
                topic,
                partition,
                result.error_message or ErrorCode(result.error_code).name,
            )
        return ErrorCode(result.error_code)

    def start_verification(self, topic: str, partition: int, producer_id: int) -> int:
        """A verification guard (Kafka's VerificationGuard): `end_verification` says whether a
        marker for the producer was written to the partition since."""
        self._verification_ids += 1
        self._verifications[self._verification_ids] = ((topic, partition, producer_id), False)
        return self._verification_ids

    def end_verification(self, guard: int) -> bool:
        entry = self._verifications.pop(guard, None)
        return entry is not None and entry[1]

    # ----------------------------------------------------- coordinators' writer
    def append_as_leader(self, topic: str, partition: int, leader_epoch: int, batch: bytes) -> tuple[int, int]:
        """Append a batch built by a coordinator to the local log now, as leader at
        `leader_epoch` with acks=all (refused while the ISR is below min.insync.replicas):
        (first offset, last offset). Raises the KafkaError of the code when it is not
        appended. The commit is `wait_for_commit`'s (coordinator/partitions.py)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            raise error_class(self.missing(topic, partition))(f"{topic}-{partition} is not hosted here")
        try:
            part.check_leader_epoch(leader_epoch)
        except PartitionError as e:
            raise error_class(e.code)(str(e)) from None
        result, info = self.append_now(part, batch, int(time.time() * 1000), -1, AppendOrigin.COORDINATOR)
        if info is None:
            raise error_class(result.error_code)(result.error_message or f"append to {topic}-{partition} failed")
        if info.needs_flush:  # the write counts as committed once flushed too, as a Produce's acks do
            flush = asyncio.ensure_future(self.logs.flush_log(part.log))
            key = (topic, partition, info.last_offset)
            self._coordinator_flushes[key] = flush
            flush.add_done_callback(lambda f: self._flushed(key, f))
        return info.first_offset, info.last_offset

    def _flushed(self, key: tuple[str, int, int], flush: asyncio.Future[None]) -> None:
        # a failed flush stays for its write's wait_for_commit to report
        if flush.cancelled() or flush.exception() is None:
            self._coordinator_flushes.pop(key, None)

    async def wait_for_commit(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None:
        """Return once the high watermark passed `offset` (acks=all: a `DelayedProduce`,
        completed by high-watermark advances and leadership changes, or REQUEST_TIMED_OUT
        after `timeout_ms`), and its log flushed it if its append asked for a flush. Raises
        the KafkaError of the code otherwise (as `acks_satisfied` says)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            raise error_class(self.missing(topic, partition))(f"{topic}-{partition} is not hosted here")
        flush = self._coordinator_flushes.pop((topic, partition, offset), None)
        if flush is not None:
            try:
                await asyncio.shield(flush)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                raise error_class(error_for(e))(str(e) or f"flush of {topic}-{partition} failed") from None
        wait = ProduceWait(part, offset + 1)
        await DelayedProduce(self.produce_purgatory, (wait,)).complete(timeout_ms / 1000)
        if wait.error_code:
            raise error_class(wait.error_code)(f"offset {offset} of {topic}-{partition} is not committed")

    def read_log_bytes(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Batches from `offset` below the log end offset (a coordinator loading its state, as
        Kafka's loaders read with FetchIsolation.LOG_END): (bytes, the log end offset). Raises
        KafkaError when this broker does not lead it."""
        part = self.partitions.get((topic, partition))
        if part is None or not part.is_leader:
            raise error_class(ErrorCode.not_leader_or_follower)(f"not the leader of {topic}-{partition}")
        end = part.log_end_offset
        start = max(offset, part.log_start_offset)
        if start >= end:
            return b"", end
        return part.log.read_bytes(start, max_bytes, max_offset=end), end

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self._hosted(topic, partition).log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self._hosted(topic, partition).log_end_offset

    def high_watermark(self, topic: str, partition: int) -> int:
        return self._hosted(topic, partition).high_watermark

    def _hosted(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            raise KafkaError(f"{topic}-{partition} is not hosted here")
        return part
