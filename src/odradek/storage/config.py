"""Per-topic log configuration, with Kafka's topic-level names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["LogConfig", "LONG_MAX", "TOPIC_CONFIG_NAMES"]

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

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

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
}
TOPIC_CONFIG_NAMES = tuple(_SPECS)
assert {f for f, _, _ in _SPECS.values()} == {f.name for f in fields(LogConfig)}
