"""Readers: batch (`DataSourceReader`) and streaming (`DataSourceStreamReader`).

Planning runs on the driver (`Planner`); each `RangePartition` is one Spark task that
reads ``[start, end)`` of one topic-partition with its own group-less odradek `Consumer`
and yields Arrow record batches. Everything a task needs travels in the partition, because
tasks run on a pickled copy of the reader made before planning.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import SourceOptions
from .planner import DataLossError, OffsetRange, Planner, data_loss_message, rate_limit, split_ranges

log = logging.getLogger("odradek.spark")

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class RangePartition(InputPartition):
    """One task: records ``[start, end)`` of one topic-partition (plus what reading needs)."""

    def __init__(self, r: OffsetRange, opts: SourceOptions) -> None:
        self.topic, self.partition, self.start, self.end = r.topic, r.partition, r.start, r.end
        self.consumer_config = opts.consumer_config
        self.include_headers = opts.include_headers
        self.fail_on_data_loss = opts.fail_on_data_loss
        self.poll_timeout_s = opts.poll_timeout_s
        self.value = (r.topic, r.partition, r.start, r.end)


# ---------------------------------------------------------------------- task side
_ARROW_SCHEMAS: dict[bool, Any] = {}

READ_DEFAULTS = {
    "max.poll.records": 20000,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "fetch.max.wait.ms": 100,
}


def arrow_schema(include_headers: bool):
    s = _ARROW_SCHEMAS.get(include_headers)
    if s is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        s = _ARROW_SCHEMAS[include_headers] = to_arrow_schema(source_schema(include_headers), timezone="UTC")
    return s


_G = {i: __import__("operator").itemgetter(i) for i in range(8)}


def records_to_arrow(recs: list, include_headers: bool):
    """ConsumerRecord tuples (all of one topic-partition) -> one pyarrow.RecordBatch in the
    source schema. Columns are gathered with itemgetter maps (much cheaper than zip(*recs))."""
    import pyarrow as pa

    schema = arrow_schema(include_headers)
    n = len(recs)
    g = _G
    first = recs[0]
    arrays = [
        pa.array(list(map(g[5], recs)), pa.binary()),
        pa.array(list(map(g[6], recs)), pa.binary()),
        pa.repeat(pa.scalar(first[0], pa.string()), n),
        pa.repeat(pa.scalar(first[1], pa.int32()), n),
        pa.array(list(map(g[2], recs)), pa.int64()),
        pa.array(list(map(g[3], recs)), pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        pa.array(list(map(g[4], recs)), pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array([h if h else None for h in map(g[7], recs)], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def columns_to_arrow(cols, count: int):
    """The first `count` records of a client `RecordColumns` -> one pyarrow.RecordBatch in the
    source schema (without headers). The buffers the C decoder filled become the arrays
    as they are (pa.Array.from_buffers): no Python object per record."""
    import pyarrow as pa

    schema = arrow_schema(False)
    n = cols.count

    def binary(validity, offsets, data):
        return pa.Array.from_buffers(
            pa.binary(),
            n,
            [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)],
        )

    arrays = [
        binary(cols.key_validity, cols.key_offsets, cols.key_data),
        binary(cols.value_validity, cols.value_offsets, cols.value_data),
        pa.repeat(pa.scalar(cols.topic, pa.string()), n),
        pa.repeat(pa.scalar(cols.partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets)]),
        pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n, [None, pa.py_buffer(cols.timestamps)]).cast(
            pa.timestamp("us", tz="UTC")
        ),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.timestamp_types)]),
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return batch if count >= n else batch.slice(0, count)


def read_range(p: RangePartition) -> Iterator:
    """Yield Arrow batches with every record of ``[p.start, p.end)`` of one partition."""
    if p.end <= p.start:
        return
    from odradek.client import Consumer, TopicPartition
    from odradek.client import errors as E

    cfg = dict(READ_DEFAULTS)
    cfg.update(p.consumer_config)
    cfg["allow.auto.create.topics"] = False
    cfg["auto.offset.reset"] = "none"
    cfg.pop("group.id", None)
    cfg["enable.auto.commit"] = False
    tp = TopicPartition(p.topic, p.partition)
    c = Consumer(config=cfg)
    try:
        c.assign([tp])
        c.seek(tp, p.start)
        pos = p.start
        end = p.end
        idle_since = time.monotonic()
        columnar = not p.include_headers  # headers need the per-record path
        while pos < end:
            try:
                recs = c.poll_columns(0.5) if columnar else c.poll(0.5)
            except E.OffsetOutOfRangeError:
                lo = c.beginning_offsets([tp])[tp]
                msg = data_loss_message(
                    f"{p.topic}-{p.partition}: offset {pos} is out of range "
                    f"(log start offset is now {lo}) while reading {p.start}..{end - 1}"
                )
                if p.fail_on_data_loss or lo <= pos:
                    raise DataLossError(msg) from None
                log.warning(msg)
                pos = lo
                c.seek(tp, pos)
                continue
            if not recs:
                if time.monotonic() - idle_since > p.poll_timeout_s:
                    msg = data_loss_message(
                        f"{p.topic}-{p.partition}: no records after offset {pos} within "
                        f"kafkaConsumer.pollTimeoutMs while reading up to {end - 1}"
                    )
                    if p.fail_on_data_loss:
                        raise DataLossError(msg)
                    log.warning(msg)
                    return
                # compacted gaps and transaction markers: the position moves without records
                pos = max(pos, c.position(tp))
                continue
            idle_since = time.monotonic()
            # a gap before the first record (compaction, transaction markers) is legal; only
            # the log start moving past `pos` is loss, reported above
            if columnar:
                for cols in recs:
                    offsets = cols.offset_list()
                    if offsets[-1] >= end:
                        k = bisect.bisect_left(offsets, end)
                        if k:
                            yield columns_to_arrow(cols, k)
                        pos = end
                        break
                    pos = offsets[-1] + 1
                    yield columns_to_arrow(cols, cols.count)
                continue
            if recs[-1].offset >= end:
                lo_i, hi_i = 0, len(recs)
                while lo_i < hi_i:
                    mid = (lo_i + hi_i) // 2
                    if recs[mid].offset < end:
                        lo_i = mid + 1
                    else:
                        hi_i = mid
                recs = recs[:lo_i]
                pos = end
            else:
                pos = recs[-1].offset + 1
            if recs:
                yield records_to_arrow(recs, p.include_headers)
    finally:
        c.close(autocommit=False)


# ---------------------------------------------------------------------- batch
class OdradekBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self):
        planner = Planner(self.opts)
        try:
            tps = planner.topic_partitions()
            missing = planner.expected_missing(tps)
            if missing:
                raise ValueError(
                    "assign names partitions that do not exist: " + ", ".join(f"{t}-{p}" for t, p in missing)
                )
            start = planner.starting_offsets(tps, streaming=False)
            end = planner.ending_offsets(tps)
            for tp in end:
                if tp not in start:
                    start[tp] = planner.earliest([tp])[tp]
            start = planner.check_ranges(start, end, "batch query")
            ranges = [OffsetRange(t, p, start[(t, p)], end[(t, p)]) for (t, p) in sorted(end)]
        finally:
            planner.close()
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        parts = [RangePartition(r, self.opts) for r in ranges]
        if not parts:  # Spark needs at least one partition
            parts = [RangePartition(OffsetRange("", 0, 0, 0), self.opts)]
        return parts

    def read(self, partition):
        return read_range(partition)


# ---------------------------------------------------------------------- streaming
def to_json_offsets(offsets: dict) -> dict:
    """{(t, p): off} -> {"t": {"p": off}} (Spark's Kafka checkpoint shape)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def from_json_offsets(d: dict | str) -> dict:
    if isinstance(d, str):
        d = json.loads(d)
    return {(t, int(p)): int(off) for t, parts in d.items() for p, off in parts.items()}


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._target: dict | None = None  # availableNow cap
        self._latest: dict | None = None
        self._last_trigger = time.monotonic()

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_planner"] = None
        return d

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    # -- offsets
    def initialOffset(self) -> dict:
        pl = self.planner
        tps = pl.topic_partitions()
        return to_json_offsets(pl.starting_offsets(tps, streaming=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        pl = self.planner
        self._target = pl.latest(pl.topic_partitions())

    def _available(self, start: dict) -> tuple[dict, dict]:
        """(start with new partitions filled in, latest offsets)."""
        pl = self.planner
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = pl.latest(pl.topic_partitions())
        start = dict(start)
        new = [tp for tp in latest if tp not in start]
        if new:
            start.update(pl.earliest(new))
        gone = sorted(tp for tp in start if tp not in latest)
        if gone and self._target is None:
            msg = data_loss_message(
                "partitions " + ", ".join(f"{t}-{p}" for t, p in gone) + " disappeared (topic deleted?)"
            )
            if self.opts.fail_on_data_loss:
                raise DataLossError(msg)
            log.warning(msg)
        for tp in gone:  # dropped from the end offsets, as Spark's Kafka source does
            latest.pop(tp, None)
        for tp, off in list(latest.items()):
            if off < start[tp]:  # truncated or recreated: checked again in partitions()
                latest[tp] = start[tp] if self._target is not None else off
        return start, latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json_offsets(start)
        begin, latest = self._available(begin)
        self._latest = latest
        available = sum(max(latest[tp] - begin[tp], 0) for tp in latest)
        o = self.opts
        if self._target is None:
            min_rows = o.min_offsets_per_trigger
            if isinstance(limit, ReadMinRows):
                min_rows = limit.min_rows
            if min_rows and available < min_rows:
                if time.monotonic() - self._last_trigger < o.max_trigger_delay_s:
                    return {t: dict(ps) for t, ps in start.items()} if start else to_json_offsets(begin)
        max_rows = None
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif o.max_offsets_per_trigger is not None and not isinstance(limit, ReadAllAvailable):
            max_rows = o.max_offsets_per_trigger
        end = rate_limit(begin, latest, max_rows) if max_rows else latest
        if any(end[tp] != begin.get(tp) for tp in end):
            self._last_trigger = time.monotonic()
        return to_json_offsets(end)

    def reportLatestOffset(self):
        return to_json_offsets(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict):
        pl = self.planner
        s = from_json_offsets(start)
        e = from_json_offsets(end)
        s = pl.check_ranges(s, e, "streaming query")
        ranges = [OffsetRange(t, p, s[(t, p)], e[(t, p)]) for (t, p) in sorted(e)]
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [RangePartition(r, self.opts) for r in ranges]

    def read(self, partition):
        return read_range(partition)

    def commit(self, end: dict) -> None:
        pass  # like Spark's Kafka source, nothing is committed to the broker

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
