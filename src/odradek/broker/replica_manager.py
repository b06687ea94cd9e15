"""Hosted partitions: appends with acks, reads for Fetch, and the fetch purgatory.

Handlers call this layer with domain values (topic, partition, bytes) and get
domain results with Kafka error codes; storage exceptions are translated here and
nowhere else. In single-node mode this broker leads every partition and the high
watermark follows the log end offset; cluster mode (cluster/replication.py) adds
followers, the ISR and the delayed-produce purgatory for acks=all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from odradek.broker.purgatory import Purgatory
from odradek.protocol.errors import ErrorCode, error_class
from odradek.storage import errors as serr

log = logging.getLogger("odradek.broker.replica_manager")

_STORAGE_ERRORS: tuple[tuple[type, ErrorCode], ...] = tuple(
    (cls, code)
    for name, code in (
        ("OffsetOutOfRangeError", ErrorCode.offset_out_of_range),
        ("CorruptRecordError", ErrorCode.corrupt_message),
        ("InvalidRecordError", ErrorCode.invalid_record),
        ("InvalidTimestampError", ErrorCode.invalid_timestamp),
        ("RecordTooLargeError", ErrorCode.message_too_large),
        ("OutOfOrderSequenceError", ErrorCode.out_of_order_sequence_number),
        ("InvalidProducerEpochError", ErrorCode.invalid_producer_epoch),
        ("KafkaStorageError", ErrorCode.kafka_storage_error),
        ("StorageError", ErrorCode.kafka_storage_error),
    )
    if (cls := getattr(serr, name, None)) is not None
)


def error_for(exc: BaseException) -> ErrorCode:
    for cls, code in _STORAGE_ERRORS:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(slots=True)
class ReadResult:
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    regions: list[Any] | None = None
    size: int = 0
    first_offset: int = -1  # base offset of the first batch returned
    next_offset: int = -1  # the offset after the batches returned

    @property
    def offsets_returned(self) -> int:
        """How many offsets the batches returned span, from the storage read's offsets (no
        batch decoded): the records a fetcher gets, compaction gaps and transaction markers
        counted as offsets count them."""
        return self.next_offset - self.first_offset if self.first_offset >= 0 else 0


class ReplicaManager:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.fetch_purgatory = Purgatory("fetch")

    @property
    def logs(self):
        return self.broker.log_manager

    def get_log(self, topic: str, partition: int):
        return self.logs.get_log(topic, partition)

    # ----------------------------------------------------------------- append
    async def append(self, topic: str, partition: int, data: bytes, *, acks: int = -1) -> ProduceResult:
        log_ = self.get_log(topic, partition)
        if log_ is None:
            return ProduceResult(ErrorCode.unknown_topic_or_partition)
        try:
            info = log_.append(
                data, leader_epoch=self.broker.leader_epoch(topic, partition), now_ms=int(time.time() * 1000)
            )
        except Exception as e:  # storage raises its documented errors only; anything else is a bug we report as a code
            code = error_for(e)
            if code == ErrorCode.unknown_server_error:
                log.exception("append to %s-%d failed", topic, partition)
            return ProduceResult(code, error_message=str(e) or None)
        if not info.duplicate:
            log_.high_watermark = log_.log_end_offset
            self.fetch_purgatory.notify((topic, partition), len(data))
            metrics = getattr(self.broker, "metrics", None)
            if metrics is not None:
                metrics.bytes_in(topic, len(data), info.record_count)
        if info.needs_flush:
            try:
                await self.logs.flush_log(log_)
            except Exception as e:
                return ProduceResult(error_for(e), error_message=str(e) or None)
        return ProduceResult(0, info.first_offset, info.log_append_time_ms, info.log_start_offset)

    async def append_internal(self, topic: str, partition: int, batch: bytes) -> int:
        """Append a batch built by a coordinator; returns its base offset once durable."""
        result = await self.append(topic, partition, batch, acks=-1)
        if result.error_code:
            raise error_class(result.error_code)(result.error_message or f"append to {topic}-{partition} failed")
        return result.base_offset

    # ------------------------------------------------------------------- read
    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool,
        replica: bool = False,
        committed: bool = False,
    ) -> ReadResult:
        """Read for a consumer (up to the high watermark; with `committed`, read_committed
        isolation, up to the last stable offset) or a follower (`replica`: up to the log end)."""
        log_ = self.get_log(topic, partition)
        if log_ is None:
            return ReadResult(ErrorCode.unknown_topic_or_partition)
        hw = log_.high_watermark
        lso = log_.last_stable_offset
        start = log_.log_start_offset
        result = ReadResult(0, hw, lso, start)
        limit = log_.log_end_offset if replica else lso if committed else hw
        if offset < start or offset > log_.log_end_offset:
            result.error_code = ErrorCode.offset_out_of_range
            return result
        if offset >= limit:  # nothing visible to this reader yet
            result.regions = []
            return result
        try:
            rr = log_.read(offset, max_bytes, max_offset=limit, min_one_batch=min_one)
        except Exception as e:
            code = error_for(e)
            if code == ErrorCode.unknown_server_error:
                log.exception("read of %s-%d at %d failed", topic, partition, offset)
            result.error_code = code
            return result
        result.regions = rr.regions
        result.size = rr.size
        result.first_offset = rr.first_offset
        result.next_offset = rr.next_offset
        return result
