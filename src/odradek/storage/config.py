"""Per-topic log configuration, with Kafka's topic-level names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

from odradek.protocol.records import GZIP, LZ4, NONE, SNAPPY, ZSTD

__all__ = [
    "LogConfig",
    "LogManagerConfig",
    "LONG_MAX",
    "TOPIC_CONFIG_NAMES",
    "COMPRESSION_TYPES",
    "GZIP_LEVELS",
    "LZ4_LEVELS",
    "ZSTD_LEVELS",
]

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    segment_jitter_ms: int = 0
    preallocate: bool = False
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def target_compression(self) -> tuple[int, int] | None:
        """(codec, level) the log stores producer batches with, None for ``producer`` (each batch
        keeps its producer's codec). The level is the one of the target codec
        (``compression.<codec>.level``; -1 for snappy and uncompressed, which have none)."""
        codec = _CODECS.get(self.compression_type)
        if codec is None:
            return None
        if codec == GZIP:
            return codec, self.compression_gzip_level
        if codec == LZ4:
            return codec, self.compression_lz4_level
        if codec == ZSTD:
            return codec, self.compression_zstd_level
        return codec, -1

    @classmethod
    def from_props(cls, props: dict[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Build from Kafka topic-level properties; unknown keys are ignored (other layers own them).

        Raises ValueError naming the key when a value does not parse or is out of range.
        """
        base = defaults or cls()
        changes: dict[str, Any] = {}  # field name -> value, of that field's type
        for key, raw in props.items():
            spec = _SPECS.get(key)
            if spec is None:
                continue
            fname, kind, check = spec
            s = str(raw).strip()
            value: bool | int | float | str
            try:
                if kind is bool:
                    if s.lower() not in ("true", "false"):
                        raise ValueError
                    value = s.lower() == "true"
                elif kind is int:
                    value = int(s)
                elif kind is float:
                    value = float(s)
                else:
                    value = s
            except ValueError:
                raise ValueError(f"invalid value {raw!r} for {key}") from None
            if check is not None and not check(value):
                raise ValueError(f"invalid value {raw!r} for {key}")
            changes[fname] = value
        if key_policy := changes.get("cleanup_policy"):
            changes["cleanup_policy"] = ",".join(p.strip() for p in key_policy.split(","))
        return dataclasses.replace(base, **changes)

    def to_props(self) -> dict[str, str]:
        out = {}
        for key, (fname, kind, _) in _SPECS.items():
            v = getattr(self, fname)
            out[key] = ("true" if v else "false") if kind is bool else str(v)
        return out


#: compression.type values other than ``producer``, and the codec each stores batches with
_CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # Kafka's order
#: compression levels Kafka accepts (KIP-390): gzip -1 (zlib's default, 6) or 1-9, lz4 1-17, zstd -131072-22
GZIP_LEVELS = (1, 9)
LZ4_LEVELS = (1, 17)
ZSTD_LEVELS = (-131072, 22)


def _policy_ok(v: str) -> bool:
    parts = [p.strip() for p in v.split(",") if p.strip()]
    return bool(parts) and all(p in ("delete", "compact") for p in parts)


# topic config name -> (LogConfig field, its type, a check of the parsed value or None)
_SPECS: dict[str, tuple[str, type, Callable[[Any], bool] | None]] = {
    "segment.bytes": ("segment_bytes", int, lambda v: 14 <= v <= 2**31 - 1),
    "segment.ms": ("segment_ms", int, lambda v: v >= 1),
    "segment.index.bytes": ("segment_index_bytes", int, lambda v: 8 <= v <= 2**31 - 1),
    "index.interval.bytes": ("index_interval_bytes", int, lambda v: 0 <= v <= 2**31 - 1),
    "retention.ms": ("retention_ms", int, lambda v: v >= -1),
    "retention.bytes": ("retention_bytes", int, None),
    "flush.messages": ("flush_messages", int, lambda v: v >= 1),
    "flush.ms": ("flush_ms", int, lambda v: v >= 0),
    "cleanup.policy": ("cleanup_policy", str, _policy_ok),
    "message.timestamp.type": ("message_timestamp_type", str, lambda v: v in ("CreateTime", "LogAppendTime")),
    "max.message.bytes": ("max_message_bytes", int, lambda v: 0 <= v <= 2**31 - 1),
    "delete.retention.ms": ("delete_retention_ms", int, lambda v: v >= 0),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float, lambda v: 0.0 <= v <= 1.0),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", int, lambda v: v >= 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", int, lambda v: v >= 1),
    "file.delete.delay.ms": ("file_delete_delay_ms", int, lambda v: v >= 0),
    "segment.jitter.ms": ("segment_jitter_ms", int, lambda v: v >= 0),
    "preallocate": ("preallocate", bool, None),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", int, lambda v: v >= 0),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", int, lambda v: v >= 0),
    "compression.type": ("compression_type", str, lambda v: v in COMPRESSION_TYPES),
    "compression.gzip.level": (
        "compression_gzip_level",
        int,
        lambda v: v == -1 or GZIP_LEVELS[0] <= v <= GZIP_LEVELS[1],
    ),
    "compression.lz4.level": ("compression_lz4_level", int, lambda v: LZ4_LEVELS[0] <= v <= LZ4_LEVELS[1]),
    "compression.zstd.level": ("compression_zstd_level", int, lambda v: ZSTD_LEVELS[0] <= v <= ZSTD_LEVELS[1]),
}
TOPIC_CONFIG_NAMES = tuple(_SPECS)
assert {f for f, _, _ in _SPECS.values()} == {f.name for f in fields(LogConfig)}


class Settings(Protocol):
    """Settings by Kafka name (the broker's BrokerConfig)."""

    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """The log manager's broker-level settings (`LogManager.reconfigure`); the three cleaner
    sizes and its backoff are dynamic broker settings, applied again when they change."""

    retention_check_interval_ms: int = 300000  # log.retention.check.interval.ms
    checkpoint_interval_ms: int = 60000  # log.flush.offset.checkpoint.interval.ms
    cleaner_enabled: bool = True  # log.cleaner.enable
    cleaner_backoff_ms: int = 15000  # log.cleaner.backoff.ms
    # log.cleaner.dedupe.buffer.size and log.cleaner.io.buffer.load.factor: the key map holds at
    # most size * factor / 24 keys (Kafka's entry: 16-byte MD5 of the key + 8-byte offset)
    cleaner_dedupe_buffer_size: int = 134217728
    cleaner_io_buffer_load_factor: float = 0.9
    producer_id_expiration_ms: int = 86400000  # producer.id.expiration.ms
    high_watermark_checkpoint_interval_ms: int = 5000  # replica.high.watermark.checkpoint.interval.ms
    open_segments_max: int = -1  # log.open.segments.max (-1: half the open-file limit, see file_cache.py)

    @classmethod
    def from_broker(cls, config: Settings) -> LogManagerConfig:
        return cls(
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            checkpoint_interval_ms=config["log.flush.offset.checkpoint.interval.ms"],
            cleaner_enabled=config["log.cleaner.enable"],
            cleaner_backoff_ms=config["log.cleaner.backoff.ms"],
            cleaner_dedupe_buffer_size=config["log.cleaner.dedupe.buffer.size"],
            cleaner_io_buffer_load_factor=config["log.cleaner.io.buffer.load.factor"],
            producer_id_expiration_ms=config["producer.id.expiration.ms"],
            high_watermark_checkpoint_interval_ms=config["replica.high.watermark.checkpoint.interval.ms"],
            open_segments_max=config["log.open.segments.max"],
        )
