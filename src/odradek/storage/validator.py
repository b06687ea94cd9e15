"""Validation of an incoming append, and offset assignment: what a log writes, decided from the
bytes received and the topic's settings alone (Kafka's ``UnifiedLog.analyzeAndValidateRecords``
and ``LogValidator``).

A pure layer: nothing here touches files, the segment list, producer state or the leader-epoch
cache. `BatchValidator.validate` checks a buffer of concatenated batches and returns them as
`ValidatedBatches`; its `assign_offsets` (producer appends) or `keep_offsets` (replicated
batches) returns a `WritePlan`: the buffers one ``pwritev`` writes and, per batch, what the
segment indexes. The log then checks producer state, writes the plan and records it.

Checks, in this order (the first failure raises; nothing is written):

1. every batch: framing (length within the buffer), magic 2, non-negative counts, CRC32C
   (``protocol.records.validate_batch``); for producer appends also record count ==
   lastOffsetDelta + 1 (replicated batches may hold fewer, as compaction leaves them). An
   empty buffer is an InvalidRecordError.
2. then per batch of a producer's append, in order: size against ``max.message.bytes``
   (StorageRecordTooLargeError); then per record, as Kafka's LogValidator: on compacted topics a key
   (InvalidRecordError), and with ``message.timestamp.type=CreateTime`` the timestamp within
   ``message.timestamp.before.max.ms`` / ``after.max.ms`` of now (StorageInvalidTimestampError when every
   bad record is a timestamp). The error's ``record_errors`` name the bad records by index
   (Produce v8+ answers them, so a client fails only those). The records are decoded only when
   they must be: on compacted topics, with ``before.max.ms`` set, or when the batch's max
   timestamp is already too far ahead. Control batches and records without a timestamp are not
   checked. ``check=False`` skips the CRC and all of 2.

A follower's append of what its leader sent (``assign_offsets=False``) gets check 1 only
(framing, magic, counts, CRC32C) and offsets that never go back (`keep_offsets`): the leader
accepted those batches, under the settings and the clock it had then, and a follower that
re-checked them against its own (a lowered ``max.message.bytes``, timestamp bounds, a clock
hours off, ``cleanup.policy`` changed to compact over keyless records) would refuse to copy
the log it must hold, as Kafka's ``UnifiedLog.appendAsFollower`` never does (it passes
``ignoreRecordSize`` and skips LogValidator).

Offset assignment rewrites only what lies outside the CRC when it can: each batch becomes a
new 16-byte prefix (base offset, batch length, partition leader epoch) followed by the
untouched rest of the received bytes, so the record bytes are never copied. With
``message.timestamp.type=LogAppendTime`` the 61-byte header is copied and patched instead
(timestamp-type bit, max timestamp = now, CRC recomputed over the patched header and the
untouched body).

Broker-side compression (``compression.type`` other than ``producer``): a producer's batch whose
codec is not the topic's is rewritten at offset assignment with the topic's codec and level
(``protocol.records.recompress_batch``: its records section decompressed and compressed again;
every other header field kept, the CRC recomputed), as Kafka's LogValidator rebuilds it; the new
size is checked against ``max.message.bytes`` again (StorageRecordTooLargeError). A batch already in the
topic's codec is written as received, and so is an uncompressed control batch (Kafka compresses
control records only when they came compressed). Replicated batches keep the leader's bytes.
The producer state and the leader-epoch cache read the received headers: recompression changes
none of the fields they use.

Legacy formats. Only v2 RecordBatches are accepted: a v0/v1 MessageSet fails check 1
(magic). Up-conversion belongs here and is **not implemented**: `validate` would recognise
magic 0/1, decode the message set (``protocol.records.decode_message_set``), rebuild its
records as v2 batches (``build_batch``) and validate those; the plan would then write the new
bytes instead of the received ones (Kafka's ``convertAndAssignOffsetsNonCompressed``), and the
record timestamps would follow ``message.timestamp.type``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.errors import InvalidRecordError
from odradek.protocol.records import (
    CODEC_NAMES,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NONE,
    BatchHeader,
    decode_records,
    iter_batches,
    patch_batch,
    recompress_batch,
    validate_batch,
)

from .config import LONG_MAX, LogConfig
from .errors import StorageInvalidTimestampError, StorageRecordTooLargeError

__all__ = ["BatchValidator", "ValidatedBatches", "WritePlan"]

_PREFIX = struct.Struct(">qii")  # base offset, batch length, partition leader epoch: outside the CRC
_PREFIX_SIZE = _PREFIX.size


@dataclass(slots=True)
class WritePlan:
    """What one append writes, with offsets assigned."""

    buffers: list  # written in order by one pwritev: header copies and untouched received bytes
    batches: list[tuple[int, int, int, int]]  # per batch: (position in this write, last offset, max timestamp, size)
    size: int  # bytes in ``buffers``
    first_offset: int
    next_offset: int  # last offset + 1
    record_count: int


@dataclass(slots=True)
class ValidatedBatches:
    """The batches of one append, checked; offsets not yet assigned."""

    buffer: memoryview  # the received bytes
    headers: list[BatchHeader]  # one per batch; ``position`` indexes ``buffer``
    log_append_time: int  # the timestamp LogAppendTime stamps on these batches; -1: keep theirs
    has_producer_ids: bool  # any idempotent, transactional or control batch (producer state to check)
    # compression.type: (codec, level) producer batches are stored with; None keeps the producer's
    target_compression: tuple[int, int] | None = None
    max_message_bytes: int = 0  # the size limit a recompressed batch is checked against again

    def assign_offsets(self, next_offset: int, leader_epoch: int) -> WritePlan:
        """Number the batches from ``next_offset`` (the log end offset) and stamp
        ``leader_epoch`` (and the log append time) on them; with a ``target_compression``,
        a batch in another codec is rewritten in it first (a new buffer holding the whole batch;
        an uncompressed control batch stays as it is, as in Kafka)."""
        mv = self.buffer
        lat = self.log_append_time
        target = self.target_compression
        codec, level = target if target is not None else (NONE, -1)
        lvl = None if level == -1 else level  # -1: the codec's default (or none: snappy, uncompressed)
        first = next_off = next_offset
        bufs: list = []
        infos: list[tuple[int, int, int, int]] = []
        rel = 0
        count = 0
        for h in self.headers:
            p = h.position
            size = h.batch_length + LOG_OVERHEAD
            last = next_off + h.last_offset_delta
            if target is not None and h.compression != codec and not (h.is_control and h.compression == NONE):
                batch = recompress_batch(mv, p, codec=codec, level=lvl)
                size = len(batch)
                if size > self.max_message_bytes:
                    raise StorageRecordTooLargeError(
                        f"batch of {size} bytes after recompression with {CODEC_NAMES[codec]} exceeds "
                        f"max.message.bytes {self.max_message_bytes}"
                    )
                patch_batch(
                    batch,
                    base_offset=next_off,
                    partition_leader_epoch=leader_epoch,
                    log_append_time=lat if lat >= 0 else None,
                )
                bufs.append(batch)
                infos.append((rel, last, lat if lat >= 0 else h.max_timestamp, size))
            elif lat >= 0:  # LogAppendTime: timestamp type, max timestamp and CRC change too
                hdr = bytearray(mv[p : p + HEADER_SIZE])
                body = mv[p + HEADER_SIZE : p + size]
                patch_batch(
                    hdr, base_offset=next_off, partition_leader_epoch=leader_epoch, log_append_time=lat, body=body
                )
                bufs.append(hdr)
                bufs.append(body)
                infos.append((rel, last, lat, size))
            else:  # base offset and leader epoch lie outside the CRC
                bufs.append(_PREFIX.pack(next_off, h.batch_length, leader_epoch))
                bufs.append(mv[p + _PREFIX_SIZE : p + size])
                infos.append((rel, last, h.max_timestamp, size))
            rel += size
            count += h.record_count
            next_off = last + 1
        return WritePlan(bufs, infos, rel, first, next_off, count)

    def keep_offsets(self, log_end_offset: int) -> WritePlan:
        """Replicated batches keep their offsets and leader epochs; each must start at or after
        the end of what precedes it (InvalidRecordError otherwise)."""
        first = self.headers[0].base_offset
        next_off = log_end_offset
        infos: list[tuple[int, int, int, int]] = []
        rel = 0
        count = 0
        for h in self.headers:
            if h.base_offset < next_off:
                raise InvalidRecordError(f"batch offset {h.base_offset} below log end offset {next_off}")
            size = h.batch_length + LOG_OVERHEAD
            infos.append((rel, h.last_offset, h.max_timestamp, size))
            rel += size
            count += h.record_count
            next_off = h.last_offset + 1
        return WritePlan([self.buffer], infos, rel, first, next_off, count)  # contiguous: one buffer


class BatchValidator:
    """The checks one topic's settings ask for. Built from a `LogConfig` (the log builds a new
    one when its config object changes); `validate` keeps no state between calls."""

    __slots__ = (
        "config",
        "topic_partition",
        "_max_batch_length",
        "_log_append_time",
        "_compacted",
        "_before_max_ms",
        "_after_max_ms",
        "_check_timestamps",
        "_target_compression",
    )

    def __init__(self, config: LogConfig, topic_partition: str) -> None:
        self.config = config
        self.topic_partition = topic_partition  # named in error messages, e.g. "orders-3"
        self._max_batch_length = config.max_message_bytes - LOG_OVERHEAD
        self._log_append_time = config.log_append_time
        self._compacted = config.compact
        self._before_max_ms = config.message_timestamp_before_max_ms
        self._after_max_ms = config.message_timestamp_after_max_ms
        self._check_timestamps = self._before_max_ms < LONG_MAX or self._after_max_ms < LONG_MAX
        self._target_compression = config.target_compression

    def validate(self, batches, now_ms: int, *, check: bool = True, assign_offsets: bool = True) -> ValidatedBatches:
        """Check ``batches`` (bytes-like: concatenated v2 batches) received at ``now_ms``.

        ``assign_offsets`` says who sent them: True for a producer (strict record counts; the
        log append time applies; size, timestamps and keys checked), False for a leader's
        replicated batches (framing and CRC only). ``check=False`` verifies framing only."""
        mv = batches if isinstance(batches, memoryview) else memoryview(batches)
        if check:  # iter_batches(mv, validate=True) without a generator: this runs for every produce
            headers = []
            strict = assign_offsets
            pos = 0
            end = len(mv)
            while pos < end:
                h = validate_batch(mv, pos, strict=strict)
                headers.append(h)
                pos += LOG_OVERHEAD + h.batch_length
        else:
            headers = list(iter_batches(mv, validate=False))
        if not headers:
            raise InvalidRecordError("append of an empty record set")
        lat = now_ms if (self._log_append_time and assign_offsets) else -1
        leader_checks = check and assign_offsets  # a follower takes what its leader accepted
        max_length = self._max_batch_length if leader_checks else None
        check_ts = leader_checks and lat < 0 and self._check_timestamps
        check_keys = leader_checks and self._compacted
        with_pids = False
        for h in headers:
            if max_length is not None and h.batch_length > max_length:
                raise StorageRecordTooLargeError(
                    f"batch of {h.size} bytes exceeds max.message.bytes {self.config.max_message_bytes}"
                )
            if not h.is_control and (
                check_keys or (check_ts and h.max_timestamp >= 0 and self._timestamps_need_records(h, now_ms))
            ):
                self._check_records(mv, h, now_ms, check_keys, check_ts)
            if h.producer_id >= 0 or h.attributes & CONTROL_MASK:
                with_pids = True
        if self._target_compression is not None and assign_offsets:
            return ValidatedBatches(
                mv, headers, lat, with_pids, self._target_compression, self.config.max_message_bytes
            )
        return ValidatedBatches(mv, headers, lat, with_pids)

    def _timestamps_need_records(self, h, now_ms: int) -> bool:
        """Whether the batch's records must be read to check their timestamps: always when
        ``before.max.ms`` is set (any record may be too old), else only when the batch's largest
        timestamp is too far ahead (then the records say which)."""
        return self._before_max_ms < LONG_MAX or h.max_timestamp - now_ms > self._after_max_ms

    def _check_records(self, mv, h, now_ms: int, keys: bool, timestamps: bool) -> None:
        """Per record, as Kafka's LogValidator: a key on a compacted topic, then the timestamp.
        Raises with ``record_errors`` naming the bad records by their index in the batch:
        StorageInvalidTimestampError when every error is a timestamp, InvalidRecordError otherwise."""
        errors: list[tuple[int, str]] = []
        only_timestamps = True
        lo, hi = now_ms - self._before_max_ms, now_ms + self._after_max_ms
        for i, r in enumerate(decode_records(mv, h.position)):
            if keys and r.key is None:
                # Compaction keeps the latest record per key: a keyless record has no place (Kafka rejects it too).
                errors.append(
                    (i, f"Compacted topic cannot accept message without key in topic partition {self.topic_partition}")
                )
                only_timestamps = False
            elif timestamps and r.timestamp >= 0 and not lo <= r.timestamp <= hi:
                errors.append(
                    (
                        i,
                        f"Timestamp {r.timestamp} of message with offset {i} is out of range. "
                        f"The timestamp should be within [{lo}, {hi}]",
                    )
                )
        if not errors:
            return
        if only_timestamps:
            exc: Exception = StorageInvalidTimestampError(
                "One or more records have been rejected due to invalid timestamp"
            )
        else:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            exc = InvalidRecordError(
                f"One or more records have been rejected due to {len(errors)} record errors in total, "
                f"and only showing the first three errors at most: [{shown}]"
            )
        # (index in the batch, message) of each bad record: Kafka's RecordValidationException,
        # answered record by record by Produce v8+ (ReplicaManager reads it)
        exc.record_errors = tuple(errors)  # type: ignore[attr-defined]
        raise exc
