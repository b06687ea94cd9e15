"""What the odradek sinks share: the producer's defaults, the admin client's settings, sending
rows, and the one record of which micro-batch a streaming sink has committed.

**Which batch is committed.** A streaming sink records batch id N as the committed offset
N+1 of a consumer group on partition 0 of the small compacted topic
``__odradek_spark_sink_commits`` (the broker keeps it in ``__consumer_offsets``, itself
compacted). A task that finds its batch id at or below the recorded one drains its input
without writing, so a batch Spark replays after a restart is not written twice. The two
sinks differ only in the group and in who records:

* at least once (writer.py): one group per query, ``odradek-spark-sink-<query id>``,
  recorded by the driver's ``commit`` once every task of the batch succeeded (OffsetCommit
  without a generation);
* exactly once (txn_sink.py): one group per query and Spark partition,
  ``odradek-spark-sink-<query id>-<partition>``, recorded by each task inside its
  transaction (``send_offsets_to_transaction``), so records and record commit together.

Both read the record with `recorded_batch`, after `ensure_commits_topic`: a retriable error
(a coordinator moving or loading) is retried, any other fails the task rather than guess
that nothing was committed.
"""

from __future__ import annotations

import logging
import time

from odradek.client.config import ADMIN

from .options import SinkOptions

log = logging.getLogger("odradek.spark")

COMMITS_TOPIC = "__odradek_spark_sink_commits"
PRODUCER_DEFAULTS = {"linger.ms": 20, "batch.size": 256 * 1024}
_SINK_GROUP_PREFIX = "odradek-spark-sink-"


def admin_config(opts: SinkOptions) -> dict:
    """The producer settings an admin client takes too (connection, timeouts, security.protocol, ssl.*, sasl.*)."""
    return {k: v for k, v in opts.producer_config.items() if k in ADMIN}


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


# ---------------------------------------------------------------------- which batch is committed
def sink_group(query_id: str, partition_id: int | None = None) -> str:
    """The group recording a query's batches: per query (at least once), or per query and Spark
    partition (exactly once: one per transactional id)."""
    if partition_id is None:
        return f"{_SINK_GROUP_PREFIX}{query_id}"
    return f"{_SINK_GROUP_PREFIX}{query_id}-{partition_id}"


def commits_partition():
    from odradek.client import TopicPartition

    return TopicPartition(COMMITS_TOPIC, 0)


def ensure_commits_topic(admin) -> None:
    from odradek.client import errors as E

    if COMMITS_TOPIC not in admin.list_topics(internal=True):
        try:
            admin.create_topic(COMMITS_TOPIC, 1, -1, {"cleanup.policy": "compact"})
        except E.TopicAlreadyExistsError:
            pass


def recorded_batch(admin, group: str, timeout_s: float = 60.0) -> int:
    """The batch id recorded for `group` (-1: none). Retriable errors (a coordinator moving or
    loading) are retried until `timeout_s`; any other error fails the task rather than
    guessing that nothing was committed (which would write the batch twice)."""
    from odradek.client import errors as E

    tp = commits_partition()
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while True:
        try:
            om = admin.list_group_offsets(group, [tp]).get(tp)
            return -1 if om is None or om.offset < 0 else om.offset - 1
        except E.KafkaError as e:
            if not e.retriable or time.monotonic() + delay > deadline:
                raise
            log.debug("odradek sink: reading the recorded batch of %s: %r; retrying", group, e)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def record_batch(admin, group: str, batch_id: int) -> None:
    """Record `batch_id` as committed for `group` outside a transaction (the at-least-once sink's
    driver; the exactly-once sink records inside each task's transaction instead)."""
    admin.alter_group_offsets(group, {commits_partition(): batch_id + 1})
