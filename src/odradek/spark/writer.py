"""Writers: batch (`DataSourceArrowWriter`) and streaming (`DataSourceStreamArrowWriter`).

Columns follow Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (string or
binary), ``headers`` (array<struct<key string, value binary>>), ``topic`` (string; the option
``topic`` overrides it), ``partition`` (int; null lets the producer's partitioner choose).
Other columns are ignored. Each task has its own odradek `Producer`, flushed before the task
reports success, so a successful task has every record acknowledged (acks=all by default).

Streaming idempotence, per batch id: after the sink commits batch N, its id is recorded as
the committed offset N+1 of a consumer group named ``odradek-spark-sink-<query id>`` on
partition 0 of the small compacted topic ``__odradek_spark_sink_commits`` (OffsetCommit
without a generation; the broker keeps it in ``__consumer_offsets``, itself compacted).
Each write task reads the query id and batch id from its TaskContext and skips writing when
the batch is already recorded, so a batch Spark replays after a restart (it crashed after
our commit but before its own commit log entry) is not written twice. A crash between the
tasks' writes and the commit still replays the batch: that window is at least once, as in
Spark's Kafka sink (Kafka transactions cannot span Spark tasks and the driver).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from .options import OptionError, SinkOptions

log = logging.getLogger("odradek.spark")

COMMITS_TOPIC = "__odradek_spark_sink_commits"


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


PRODUCER_DEFAULTS = {"linger.ms": 20, "batch.size": 256 * 1024}


def send_rows(producer_for, iterator, opts: SinkOptions) -> int:
    """Send every row of the Arrow batches with the producer `producer_for()` gives (called at
    the first row, so an empty task creates none); flush; raise the first delivery error."""
    failures: list = []

    def on_done(_md, exc):
        if exc is not None and len(failures) < 10:
            failures.append(exc)

    n = 0
    producer = None
    for rb in iterator:
        if rb.num_rows == 0:
            continue
        if producer is None:
            producer = producer_for()
        names = {name.lower(): i for i, name in enumerate(rb.schema.names)}
        rows = rb.num_rows
        values = rb.column(names["value"]).to_pylist()
        keys = rb.column(names["key"]).to_pylist() if "key" in names else [None] * rows
        if opts.topic is not None:
            topics = [opts.topic] * rows
        else:
            topics = rb.column(names["topic"]).to_pylist()
        parts = rb.column(names["partition"]).to_pylist() if "partition" in names else [None] * rows
        if "headers" in names:
            headers = [
                None if h is None else [(x["key"], x["value"]) for x in h]
                for h in rb.column(names["headers"]).to_pylist()
            ]
        else:
            headers = [None] * rows
        send = producer.send
        for t, v, k, p, h in zip(topics, values, keys, parts, headers):
            if t is None:
                raise ValueError("a row has a null topic and no topic option is set")
            send(t, v, key=k, headers=h, partition=p, callback=on_done)
            n += 1
        if failures:
            break
    if producer is not None:
        producer.flush()
    if failures:
        raise RuntimeError(f"odradek sink: {len(failures)}+ records failed: {failures[0]!r}") from failures[0]
    return n


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


# ---------------------------------------------------------------------- streaming idempotence
def _sink_group(query_id: str) -> str:
    return f"odradek-spark-sink-{query_id}"


def last_committed_batch(admin, query_id: str) -> int:
    """The last batch id the sink recorded for this query, -1 if none."""
    from odradek.client import TopicPartition

    try:
        offs = admin.list_group_offsets(_sink_group(query_id), [TopicPartition(COMMITS_TOPIC, 0)])
    except Exception as e:  # noqa: BLE001 - unknown group or topic: nothing committed yet
        log.debug("no committed batches for %s: %r", query_id, e)
        return -1
    om = offs.get(TopicPartition(COMMITS_TOPIC, 0))
    return -1 if om is None else om.offset - 1


def ensure_commits_topic(admin) -> None:
    from odradek.client import errors as E

    if COMMITS_TOPIC not in admin.list_topics(internal=True):
        try:
            admin.create_topic(COMMITS_TOPIC, 1, -1, {"cleanup.policy": "compact"})
        except E.TopicAlreadyExistsError:
            pass


def record_committed_batch(admin, query_id: str, batch_id: int) -> None:
    from odradek.client import TopicPartition

    ensure_commits_topic(admin)
    admin.alter_group_offsets(_sink_group(query_id), {TopicPartition(COMMITS_TOPIC, 0): batch_id + 1})


def _admin_config(opts: SinkOptions) -> dict:
    keep = {
        "bootstrap.servers",
        "client.id",
        "request.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
        "reconnect.backoff.ms",
        "metadata.max.age.ms",
        "default.api.timeout.ms",
    }
    return {k: v for k, v in opts.producer_config.items() if k in keep}


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

            from .txn_sink import write_in_transaction

            tc = TaskContext.get()
            if qid is None or bid is None or tc is None:
                raise RuntimeError(
                    "odradek sink: exactlyOnce needs the streaming query id and batch id of the task "
                    f"(TaskContext local properties; got query id {qid!r}, batch id {bid!r})"
                )
            n, skipped = write_in_transaction(iterator, self.opts, qid, bid, tc.partitionId())
            return SinkCommitMessage(records=n, skipped=skipped, query_id=qid, batch_id=bid)
        if qid is not None and bid is not None:
            admin = Admin(_admin_config(self.opts))
            try:
                done = last_committed_batch(admin, qid)
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
        admin = Admin(_admin_config(self.opts))
        try:
            for qid in qids:
                if last_committed_batch(admin, qid) < batchId:
                    record_committed_batch(admin, qid, batchId)
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
