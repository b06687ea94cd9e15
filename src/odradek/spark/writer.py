"""Writers: batch (`DataSourceArrowWriter`) and streaming (`DataSourceStreamArrowWriter`).

Columns follow Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (string or
binary), ``headers`` (array<struct<key string, value binary>>), ``topic`` (string; the option
``topic`` overrides it), ``partition`` (int; null lets the producer's partitioner choose).
Other columns are ignored. Each task has its own odradek `Producer`, flushed before the task
reports success, so a successful task has every record acknowledged (acks=all by default).

Streaming idempotence, per batch id: after the sink commits batch N, its id is recorded for
the query (sink_common.py: the committed offset N+1 of the group
``odradek-spark-sink-<query id>`` on ``__odradek_spark_sink_commits``). Each write task reads
the query id and batch id from its TaskContext and skips writing when the batch is already
recorded, so a batch Spark replays after a restart (it crashed after our commit but before
its own commit log entry) is not written twice. A crash between the tasks' writes and the
commit still replays the batch: that window is at least once, as in Spark's Kafka sink
(Kafka transactions cannot span Spark tasks and the driver). With ``exactlyOnce=true`` each
task writes in a transaction of its own instead (txn_sink.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from .options import OptionError, SinkOptions
from .sink_common import (
    PRODUCER_DEFAULTS,
    admin_config,
    ensure_commits_topic,
    record_batch,
    recorded_batch,
    send_rows,
    sink_group,
)
from .txn_sink import write_in_transaction

log = logging.getLogger("odradek.spark")


def check_columns(schema: StructType, opts: SinkOptions) -> None:
    """Kafka's column rules, at planning time."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError(
            "the odradek sink needs a column named value (string or binary); columns: "
            + ", ".join(f.name for f in schema.fields)
        )
    if not isinstance(types["value"], (StringType, BinaryType)):
        raise OptionError(f"column value must be string or binary, not {types['value'].simpleString()}")
    if "key" in types and not isinstance(types["key"], (StringType, BinaryType)):
        raise OptionError(f"column key must be string or binary, not {types['key'].simpleString()}")
    if opts.topic is None:
        if "topic" not in types:
            raise OptionError("the odradek sink needs a topic: set option topic or add a string column topic")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError(f"column topic must be string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(f"column partition must be int, not {types['partition'].simpleString()}")
    if "headers" in types:
        h = types["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
            and isinstance(h.elementType.fields[0].dataType, StringType)
            and isinstance(h.elementType.fields[1].dataType, (BinaryType, StringType))
        )
        if not ok:
            raise OptionError("column headers must be array<struct<key:string,value:binary>>, not " + h.simpleString())


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    records: int = 0
    skipped: bool = False
    query_id: str | None = None
    batch_id: int | None = None
    errors: list = field(default_factory=list)


def produce_batches(iterator, opts: SinkOptions) -> int:
    """Send every row of the Arrow batches with a producer of this task's own (at least once)."""
    from odradek.client import Producer

    cfg = dict(PRODUCER_DEFAULTS)
    cfg.update(opts.producer_config)
    made: list = []

    def producer_for():
        made.append(Producer(cfg))
        return made[0]

    try:
        return send_rows(producer_for, iterator, opts)
    finally:
        for p in made:
            p.close()


class OdradekBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator):
        return SinkCommitMessage(records=produce_batches(iterator, self.opts))

    def commit(self, messages) -> None:
        total = sum(m.records for m in messages if m is not None)
        log.info("odradek sink: %d records written", total)

    def abort(self, messages) -> None:
        done = sum(m.records for m in messages if m is not None)
        log.warning(
            "odradek sink: job aborted; %d records of successful tasks were already written "
            "(Kafka sinks are at least once)",
            done,
        )


def _task_batch() -> tuple[str | None, int | None]:
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:
            return None, None
        qid = tc.getLocalProperty("sql.streaming.queryId")
        bid = tc.getLocalProperty("streaming.sql.batchId")
        return qid, (int(bid) if bid is not None else None)
    except Exception:  # noqa: BLE001
        return None, None


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator):
        from odradek.client import Admin

        qid, bid = _task_batch()
        if self.opts.exactly_once:
            from pyspark import TaskContext

            tc = TaskContext.get()
            if qid is None or bid is None or tc is None:
                raise RuntimeError(
                    "odradek sink: exactlyOnce needs the streaming query id and batch id of the task "
                    f"(TaskContext local properties; got query id {qid!r}, batch id {bid!r})"
                )
            n, skipped = write_in_transaction(iterator, self.opts, qid, bid, tc.partitionId())
            return SinkCommitMessage(records=n, skipped=skipped, query_id=qid, batch_id=bid)
        if qid is not None and bid is not None:
            admin = Admin(admin_config(self.opts))
            try:
                ensure_commits_topic(admin)
                done = recorded_batch(admin, sink_group(qid))
            finally:
                admin.close()
            if bid <= done:
                for _ in iterator:
                    pass
                log.warning("odradek sink: batch %d of query %s was already committed; not writing it again", bid, qid)
                return SinkCommitMessage(skipped=True, query_id=qid, batch_id=bid)
        return SinkCommitMessage(records=produce_batches(iterator, self.opts), query_id=qid, batch_id=bid)

    def commit(self, messages, batchId: int) -> None:
        from odradek.client import Admin

        if self.opts.exactly_once:  # each task committed its own transaction
            written = sum(m.records for m in messages if m is not None)
            log.info("odradek sink: batch %d committed in per-task transactions (%d records)", batchId, written)
            return
        qids = {m.query_id for m in messages if m is not None and m.query_id}
        if not qids:
            return
        admin = Admin(admin_config(self.opts))
        try:
            ensure_commits_topic(admin)
            for qid in qids:
                if recorded_batch(admin, sink_group(qid)) < batchId:
                    record_batch(admin, sink_group(qid), batchId)
        finally:
            admin.close()

    def abort(self, messages, batchId: int) -> None:
        done = sum(m.records for m in messages if m is not None)
        if self.opts.exactly_once:
            log.warning(
                "odradek sink: batch %d aborted; %d records of successful tasks are committed and recorded "
                "(a replay of the batch skips those tasks)",
                batchId,
                done,
            )
            return
        log.warning(
            "odradek sink: batch %d aborted; %d records of successful tasks were already written", batchId, done
        )
