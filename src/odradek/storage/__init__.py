"""Storage: one Log per partition in Kafka's on-disk format. See docs/storage.md."""

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    InconsistentTopicIdError,
    InvalidProducerEpochError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
)
from .fs import FaultyFileSystem, FileSystem, OSFileSystem
from .log import AppendInfo, AppendOrigin, FileRegion, Log, ReadResult
from .manager import LogManager

__all__ = [
    "LogManager",
    "Log",
    "LogConfig",
    "FileRegion",
    "AppendInfo",
    "AppendOrigin",
    "ReadResult",
    "FileSystem",
    "OSFileSystem",
    "FaultyFileSystem",
    "StorageError",
    "OffsetOutOfRangeError",
    "CorruptRecordError",
    "KafkaStorageError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "RecordTooLargeError",
    "InconsistentTopicIdError",
]
