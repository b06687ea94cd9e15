"""The exactly-once streaming sink (option ``exactlyOnce=true``): one Kafka transaction per
write task of each micro-batch, idempotent by (query id, batch id).

A Kafka transaction belongs to one producer, and a micro-batch is written by several Spark
tasks in separate processes, so the unit is the task: Spark partition ``i`` of every batch of
query ``q`` writes with ``transactional.id = odradek-spark-<q>-<i>``.

* **Fencing.** Each task starts with `init_transactions()`: the coordinator bumps the epoch of
  that transactional id and aborts whatever transaction an earlier holder left open, so a
  zombie (a task of a crashed or restarted run, a retried or speculative attempt) can neither
  commit nor write again.
* **Idempotent commit.** The batch id travels in the transaction: before committing, the task
  adds the offset ``batch id + 1`` of partition 0 of the compacted topic
  ``__odradek_spark_sink_commits`` for the consumer group ``odradek-spark-sink-<q>-<i>`` (one
  group per transactional id) with `send_offsets_to_transaction`. Records and that offset
  commit or abort together. After `init_transactions()` (so nothing of this id is pending)
  the task reads the group's offset: a batch id at or below the recorded one was committed
  already, and the task drains its input without writing. (The record and how it is read are
  the at-least-once sink's too: sink_common.py.)
* **What it guarantees.** Each (batch, Spark partition) is written exactly once, provided a
  replayed batch gives each partition the same rows (Spark replays a batch with the same
  offsets; the plan must be deterministic, as for every exactly-once sink). A batch is atomic
  per task, not as a whole: a read_committed consumer can see the output of task 0 of batch N
  before that of task 1. If task 1 fails, Spark fails the batch, and the restart replays it:
  task 0 finds its batch recorded and writes nothing, task 1 writes.

The driver's `commit(messages, batchId)` has nothing left to do but log.
"""

from __future__ import annotations

import logging

from .options import OptionError, SinkOptions
from .sink_common import (
    PRODUCER_DEFAULTS,
    admin_config,
    commits_partition,
    ensure_commits_topic,
    recorded_batch,
    send_rows,
    sink_group,
)

log = logging.getLogger("odradek.spark")

TXN_ID_PREFIX = "odradek-spark-"


def transactional_id(query_id: str, partition_id: int) -> str:
    return f"{TXN_ID_PREFIX}{query_id}-{partition_id}"


def check_exactly_once(opts: SinkOptions, streaming: bool) -> None:
    """Refuse exactlyOnce where it is not supported, at planning time."""
    if not opts.exactly_once:
        return
    if not streaming:
        raise OptionError(
            "option exactlyOnce applies only to streaming writes (a batch write has no batch id to "
            "make a retried job idempotent)"
        )


def write_in_transaction(iterator, opts: SinkOptions, query_id: str, batch_id: int, partition_id: int):
    """One task's rows of batch `batch_id` in one transaction; returns (records, skipped)."""
    from odradek.client import Admin, Producer

    tid = transactional_id(query_id, partition_id)
    group = sink_group(query_id, partition_id)
    cfg = dict(PRODUCER_DEFAULTS)
    cfg.update(opts.producer_config)
    cfg["transactional.id"] = tid
    admin = Admin(admin_config(opts))
    producer = Producer(cfg)
    try:
        ensure_commits_topic(admin)
        producer.init_transactions()  # fences zombies; their open transaction is aborted
        done = recorded_batch(admin, group)
        if batch_id <= done:
            for _ in iterator:
                pass
            log.warning(
                "odradek sink: batch %d of query %s, partition %d, was committed already (transactional id %s)",
                batch_id,
                query_id,
                partition_id,
                tid,
            )
            return 0, True
        producer.begin_transaction()
        try:
            n = send_rows(lambda: producer, iterator, opts)  # flushed, every record acknowledged
            producer.send_offsets_to_transaction({commits_partition(): batch_id + 1}, group)
            producer.commit_transaction()
        except BaseException:
            try:
                producer.abort_transaction()
            except Exception as e:  # noqa: BLE001 - fenced or fatal: the coordinator aborts it
                log.warning("odradek sink: abort of %s failed: %r", tid, e)
            raise
        return n, False
    finally:
        producer.close()
        admin.close()
