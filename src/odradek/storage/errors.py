"""Storage exceptions. The broker maps each to a Kafka error code (broker/replica_manager.py).

Names: ``Storage`` + the name of the Kafka error each stands for, so that none is spelled like a
class of ``protocol/errors.py`` (an ``except`` naming the protocol class around a storage call
would silently miss the storage one). `KafkaStorageError` is storage's own failure (Kafka's
KafkaStorageException); `CorruptRecordError` (protocol.records) and `InvalidRecordError`
(protocol.errors' class of INVALID_RECORD) are the protocol's classes, re-exported."""

from odradek.protocol.errors import InvalidRecordError
from odradek.protocol.records import CorruptRecordError

__all__ = [
    "StorageError",
    "StorageOffsetOutOfRangeError",
    "CorruptRecordError",
    "InvalidRecordError",
    "KafkaStorageError",
    "StorageOutOfOrderSequenceError",
    "StorageInvalidProducerEpochError",
    "StorageRecordTooLargeError",
    "StorageInvalidTimestampError",
    "StorageInconsistentTopicIdError",
    "StorageTransactionCoordinatorFencedError",
]


class StorageError(Exception):
    """Base class of storage errors (not of CorruptRecordError, a ValueError, nor of
    InvalidRecordError, a KafkaError)."""


class StorageOffsetOutOfRangeError(StorageError):
    """OFFSET_OUT_OF_RANGE (1): below the log start offset or above the log end offset."""


class KafkaStorageError(StorageError):
    """KAFKA_STORAGE_ERROR (56): the log directory holding this log is offline."""


class StorageOutOfOrderSequenceError(StorageError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45)."""


class StorageInvalidProducerEpochError(StorageError):
    """INVALID_PRODUCER_EPOCH (47): the producer epoch is older than the known one."""


class StorageTransactionCoordinatorFencedError(StorageError):
    """TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator epoch than the
    producer's last marker (a zombie coordinator)."""


class StorageRecordTooLargeError(StorageError):
    """MESSAGE_TOO_LARGE (10): a batch is larger than max.message.bytes."""


class StorageInvalidTimestampError(StorageError):
    """INVALID_TIMESTAMP (32): outside message.timestamp.before/after.max.ms. ``record_errors``:
    (index in the batch, message) of each record out of range, as on InvalidRecordError."""

    record_errors: tuple[tuple[int, str], ...] = ()


class StorageInconsistentTopicIdError(StorageError):
    """INCONSISTENT_TOPIC_ID (103): the partition directory's partition.metadata names another topic id."""
