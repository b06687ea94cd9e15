"""Storage: one Log per partition in Kafka's on-disk format. See docs/storage.md."""

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    KafkaStorageError,
    StorageError,
    StorageInconsistentTopicIdError,
    StorageInvalidProducerEpochError,
    StorageOffsetOutOfRangeError,
    StorageOutOfOrderSequenceError,
    StorageRecordTooLargeError,
)
from .fs import FaultyFileSystem, FileSystem, OSFileSystem
from .log import AppendInfo, AppendOrigin, FileRegion, Log, ReadResult
from .log_dir import LogDirInUseError, LogDirLocks
from .manager import LogManager

__all__ = [
    "LogManager",
    "LogDirLocks",
    "LogDirInUseError",
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
    "StorageOffsetOutOfRangeError",
    "CorruptRecordError",
    "KafkaStorageError",
    "StorageOutOfOrderSequenceError",
    "StorageInvalidProducerEpochError",
    "StorageRecordTooLargeError",
    "StorageInconsistentTopicIdError",
]
