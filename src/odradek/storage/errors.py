"""Storage exceptions. The broker maps each to a Kafka error code."""

from odradek.protocol.records import CorruptRecordError, InvalidRecordError

__all__ = [
    "StorageError",
    "OffsetOutOfRangeError",
    "CorruptRecordError",
    "InvalidRecordError",
    "KafkaStorageError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "RecordTooLargeError",
    "InvalidTimestampError",
    "InconsistentTopicIdError",
    "TransactionCoordinatorFencedError",
]


class StorageError(Exception):
    """Base class of storage errors (CorruptRecordError/InvalidRecordError are ValueErrors)."""


class OffsetOutOfRangeError(StorageError):
    """OFFSET_OUT_OF_RANGE (1): below the log start offset or above the log end offset."""


class KafkaStorageError(StorageError):
    """KAFKA_STORAGE_ERROR (56): the log directory holding this log is offline."""


class OutOfOrderSequenceError(StorageError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45)."""


class InvalidProducerEpochError(StorageError):
    """INVALID_PRODUCER_EPOCH (47): the producer epoch is older than the known one."""


class TransactionCoordinatorFencedError(StorageError):
    """TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator epoch than the
    producer's last marker (a zombie coordinator)."""


class RecordTooLargeError(StorageError):
    """MESSAGE_TOO_LARGE (10): a batch is larger than max.message.bytes."""


class InvalidTimestampError(StorageError):
    """INVALID_TIMESTAMP (32): outside message.timestamp.before/after.max.ms. ``record_errors``:
    (index in the batch, message) of each record out of range, as on InvalidRecordError."""

    record_errors: tuple[tuple[int, str], ...] = ()


class InconsistentTopicIdError(StorageError):
    """INCONSISTENT_TOPIC_ID (103): the partition directory's partition.metadata names another topic id."""
