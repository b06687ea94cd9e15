"""The consume-transform-produce loop of tests/clients/java/TxnCli.java ``ctp``, written with
odradek's own client (``odradek.client``), for the fault tests of transactions (issue #15).

    python tests/support/ctp_odradek.py --bootstrap HOST:PORT --input IN --output OUT --group G \
        --transactional-id ID [--name NAME] [--max-poll N] [--pause-ms P] [--abort-every K] \
        [--until-end] [--timeout-ms T] [--transaction-timeout-ms T]

The same loop, options, output records and JSON lines on stdout as the Java one (see TxnCli.java
and support/txn_pipeline.py): a read_committed consumer of IN (partitions assigned, positions from
G's committed offsets) and a transactional producer; one transaction per non-empty poll copying
each record to OUT's partition of the same number with headers txn=NAME:K, n=<records in the
transaction>, src=<partition>:<offset>, then ``send_offsets_to_transaction`` and the commit; every
K-th transaction aborted on purpose (after its sends), the consumer then seeking back. Lines:
``{"txn", "values"}`` before the commit or abort is asked, ``{"committed"}`` / ``{"aborted", "why"}``
once answered, ``{"fenced", "error"}`` (exit 4), ``{"done", "transactions"}`` with --until-end,
``{"error", "message"}`` (exit 1) for anything else.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time

from odradek.client import Consumer, OffsetAndMetadata, Producer, TopicPartition
from odradek.client import errors as E

#: the errors after which the producer cannot go on (Java: ProducerFencedException, InvalidProducerEpochException)
FENCED = (E.ProducerFencedError, E.InvalidProducerEpochError)


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def halt(code: int) -> None:
    """Exit at once, as Java's Runtime.halt: no client close (a fenced producer's close could block)."""
    sys.stdout.flush()
    os._exit(code)


def caught_up(consumer: Consumer, tps: list[TopicPartition]) -> bool:
    """Every position at the input's end (read_committed: the last stable offset)."""
    end = consumer.end_offsets(tps)
    return all(consumer.position(tp) >= end[tp] for tp in tps)


def ctp(a: argparse.Namespace) -> None:
    t = a.timeout_ms
    consumer = Consumer(
        config={
            "bootstrap.servers": a.bootstrap,
            "client.id": "odradek-ctp",
            "group.id": a.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.records": a.max_poll,
            "request.timeout.ms": t,
            "default.api.timeout.ms": max(t, 30000),
            "metadata.max.age.ms": 1000,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": a.bootstrap,
            "client.id": "odradek-ctp",
            "transactional.id": a.transactional_id,
            "linger.ms": 5,
            "request.timeout.ms": t,
            "delivery.timeout.ms": t + 5,
            "max.block.ms": t,
            "transaction.timeout.ms": a.transaction_timeout_ms,
            "metadata.max.age.ms": 1000,
        }
    )
    producer.init_transactions()  # fences an earlier instance, aborts its open transaction
    tps = [TopicPartition(a.input, p) for p in sorted(consumer.partitions_for_topic(a.input))]
    consumer.assign(tps)
    k = committed = 0
    while True:
        recs = consumer.poll(0.2)
        if not recs:
            if a.until_end and caught_up(consumer, tps):
                break
            continue
        start: dict[TopicPartition, int] = {}
        nxt: dict[TopicPartition, OffsetAndMetadata] = {}
        for r in recs:
            tp = TopicPartition(r.topic, r.partition)
            start.setdefault(tp, r.offset)
            nxt[tp] = OffsetAndMetadata(r.offset + 1)
        txn = f"{a.name}:{k}"
        k += 1
        abort = a.abort_every > 0 and k % a.abort_every == 0
        try:
            producer.begin_transaction()
            for r in recs:
                headers = [
                    ("txn", txn.encode()),
                    ("n", str(len(recs)).encode()),
                    ("src", f"{r.partition}:{r.offset}".encode()),
                ]
                producer.send(a.output, r.value, partition=r.partition, headers=headers)
            producer.send_offsets_to_transaction(nxt, consumer.group_metadata())
            emit(txn=txn, values=[base64.b64encode(r.value or b"").decode() for r in recs])
            if a.pause_ms > 0:
                time.sleep(a.pause_ms / 1000)
            if abort:
                producer.abort_transaction()
                emit(aborted=txn, why="--abort-every")
                for tp, off in start.items():
                    consumer.seek(tp, off)
                continue
            producer.commit_transaction()
            committed += 1
            emit(committed=txn)
        except FENCED as e:
            emit(fenced=txn, error=type(e).__name__)
            halt(4)
        except E.KafkaError as e:
            # abortable: abort, then reprocess from where this transaction began
            try:
                producer.abort_transaction()
            except E.KafkaError as fatal:
                emit(fenced=txn, error=type(fatal).__name__, message=str(fatal)[:300])
                halt(4)
            emit(aborted=txn, why=f"{type(e).__name__}: {e}")
            for tp, off in start.items():
                consumer.seek(tp, off)
    emit(done=True, transactions=committed)
    producer.close(5)
    consumer.close(autocommit=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--name", default="ctp")
    ap.add_argument("--max-poll", type=int, default=20)
    ap.add_argument("--pause-ms", type=int, default=0)
    ap.add_argument("--abort-every", type=int, default=0)
    ap.add_argument("--until-end", action="store_true")
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--transaction-timeout-ms", type=int, default=60000)
    a = ap.parse_args()
    try:
        ctp(a)
    except BaseException as e:  # noqa: BLE001 - reported on stdout as the Java loop does
        emit(error=type(e).__name__, message=str(e)[:500])
        halt(1)
    halt(0)


if __name__ == "__main__":
    main()
