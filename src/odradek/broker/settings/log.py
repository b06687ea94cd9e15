"""The settings of logs and reading them: segments, retention, cleaning, flushing, replicas'
lag, compression, message bounds (each with its per-topic name), and Fetch's caps;
Kafka's ServerLogConfigs and LogConfig."""

from __future__ import annotations

from odradek.broker.settings.setting import LONG_MAX, Setting, at_least, between, one_of

S = Setting


def _cleanup(v: list[str]) -> str | None:
    bad = [p for p in v if p not in ("delete", "compact")]
    return f"unknown cleanup policy {bad}" if bad or not v else None


# logs
LOG: tuple[Setting, ...] = (
    S(
        "log.segment.bytes",
        "int",
        1073741824,
        "Segment size before rolling.",
        validate=at_least(14),
        topic_name="segment.bytes",
        dynamic=True,
    ),
    S(
        "log.roll.ms",
        "long",
        604800000,
        "Time before a segment rolls (log.roll.hours is the coarse alias).",
        validate=at_least(1),
        topic_name="segment.ms",
        dynamic=True,
    ),
    S("log.roll.hours", "int", 168, "Hours before a segment rolls, when log.roll.ms is not set.", validate=at_least(1)),
    S(
        "log.roll.jitter.ms",
        "long",
        0,
        "Random jitter subtracted from the roll time.",
        validate=at_least(0),
        topic_name="segment.jitter.ms",
        dynamic=True,
    ),
    S(
        "log.index.size.max.bytes",
        "int",
        10485760,
        "Maximum size of an offset index.",
        validate=at_least(4),
        topic_name="segment.index.bytes",
        dynamic=True,
    ),
    S(
        "log.index.interval.bytes",
        "int",
        4096,
        "Bytes between offset index entries.",
        validate=at_least(0),
        topic_name="index.interval.bytes",
        dynamic=True,
    ),
    S(
        "log.retention.ms",
        "long",
        -1,
        "Time retention; -1 (default) falls back to log.retention.minutes/hours.",
        topic_name="retention.ms",
        dynamic=True,
    ),
    S("log.retention.minutes", "int", -1, "Time retention in minutes, when log.retention.ms is not set."),
    S("log.retention.hours", "int", 168, "Time retention in hours, when neither log.retention.ms nor .minutes is set."),
    S(
        "log.retention.bytes",
        "long",
        -1,
        "Size retention per partition; -1 means unlimited.",
        topic_name="retention.bytes",
        dynamic=True,
    ),
    S("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", validate=at_least(1)),
    S(
        "log.cleanup.policy",
        "list",
        ["delete"],
        "delete, compact, or both.",
        validate=_cleanup,
        topic_name="cleanup.policy",
        dynamic=True,
    ),
    S("log.cleaner.enable", "bool", True, "Run the log cleaner for compacted topics."),
    S(
        "log.cleaner.backoff.ms",
        "long",
        15000,
        "Sleep of the cleaner when nothing is cleanable.",
        validate=at_least(0),
        dynamic=True,
    ),
    S(
        "log.cleaner.dedupe.buffer.size",
        "long",
        134217728,
        "Memory budget of the cleaner's key map (24 bytes per key, as Kafka counts); "
        "dirty segments beyond it are cleaned in later passes.",
        validate=at_least(1),
        dynamic=True,
    ),
    S(
        "log.cleaner.io.buffer.load.factor",
        "double",
        0.9,
        "Fill factor of the cleaner's key map.",
        validate=between(0.01, 1),
        dynamic=True,
    ),
    S(
        "log.cleaner.delete.retention.ms",
        "long",
        86400000,
        "How long tombstones are kept.",
        validate=at_least(0),
        topic_name="delete.retention.ms",
        dynamic=True,
    ),
    S(
        "log.cleaner.min.cleanable.ratio",
        "double",
        0.5,
        "Dirty ratio needed to clean a log.",
        validate=between(0, 1),
        topic_name="min.cleanable.dirty.ratio",
        dynamic=True,
    ),
    S(
        "log.cleaner.min.compaction.lag.ms",
        "long",
        0,
        "Minimum age of a record before compaction.",
        validate=at_least(0),
        topic_name="min.compaction.lag.ms",
        dynamic=True,
    ),
    S(
        "log.cleaner.max.compaction.lag.ms",
        "long",
        LONG_MAX,
        "Maximum age before a record must be compactable.",
        validate=at_least(1),
        topic_name="max.compaction.lag.ms",
        dynamic=True,
    ),
    S(
        "log.flush.interval.messages",
        "long",
        LONG_MAX,
        "fsync after this many messages (topic: flush.messages).",
        validate=at_least(1),
        topic_name="flush.messages",
        dynamic=True,
    ),
    S(
        "log.flush.interval.ms",
        "long",
        -1,
        "fsync after this long (topic: flush.ms); -1 uses log.flush.scheduler.interval.ms.",
        topic_name="flush.ms",
        dynamic=True,
    ),
    S("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often the flusher checks logs."),
    S(
        "log.flush.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often recovery points are checkpointed.",
        validate=at_least(0),
    ),
    S(
        "log.flush.start.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often log start offsets are checkpointed.",
        validate=at_least(0),
        planned="its own schedule; log start offsets are checkpointed as soon as they change",
    ),
    S(
        "log.segment.delete.delay.ms",
        "long",
        60000,
        "Delay before a deleted segment's files are removed.",
        validate=at_least(0),
        topic_name="file.delete.delay.ms",
        dynamic=True,
    ),
    S(
        "log.message.timestamp.type",
        "string",
        "CreateTime",
        "CreateTime or LogAppendTime.",
        validate=one_of("CreateTime", "LogAppendTime"),
        topic_name="message.timestamp.type",
        dynamic=True,
    ),
    S(
        "log.message.timestamp.before.max.ms",
        "long",
        LONG_MAX,
        "Reject records older than this relative to the broker clock.",
        validate=at_least(0),
        topic_name="message.timestamp.before.max.ms",
        dynamic=True,
    ),
    S(
        "log.message.timestamp.after.max.ms",
        "long",
        3600000,
        "Reject records further in the future than this.",
        validate=at_least(0),
        topic_name="message.timestamp.after.max.ms",
        dynamic=True,
    ),
    S(
        "log.preallocate",
        "bool",
        False,
        "Preallocate segment files.",
        topic_name="preallocate",
        dynamic=True,
        planned="segment file preallocation",
    ),
    S("num.recovery.threads.per.data.dir", "int", 1, "Threads recovering logs at startup.", validate=at_least(1)),
    S(
        "log.open.segments.max",
        "int",
        -1,
        "Most segments whose .log file stays open at once (not a Kafka setting: Kafka keeps every one open): "
        "colder ones are closed and reopened as readers and writers need them; indexes hold no descriptor. "
        "-1 (default): half the broker's open-file limit (RLIMIT_NOFILE, whose soft limit the broker raises "
        "to the hard one at start), the other half left to connections and short-lived files.",
        validate=lambda v: None if v == -1 or v >= 1 else "must be -1 or at least 1",
    ),
)

# fetch
FETCH: tuple[Setting, ...] = (
    S("fetch.max.bytes", "int", 57671680, "Cap on the bytes a Fetch response carries.", validate=at_least(0)),
    S("max.incremental.fetch.session.cache.slots", "int", 1000, "Fetch sessions kept (KIP-227).", validate=at_least(0)),
)
