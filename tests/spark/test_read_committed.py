"""``kafka.isolation.level`` of the odradek source on a topic with committed, aborted and open
transactions (written by confluent-kafka's transactional producer), checked two ways: against
what was written, and against Spark's own Kafka connector reading the same topic.

read_committed ends at the last stable offset (an open transaction and everything after it is
not read yet) and drops the records of aborted transactions; read_uncommitted reads them all.
Neither shows a control record (transaction marker). Both are checked with the Arrow fast path
(no headers), the per-record path (headers), and ranges split inside transactions.

The broker is Apache Kafka 4.4 and odradek; odradek's case waits for its transaction support.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.spark

PARTITIONS = 3


@pytest.fixture(
    scope="module",
    params=["kafka4", "odradek"],
)
def txn_bootstrap(request):
    if request.param == "kafka4":
        return request.getfixturevalue("kafka4").bootstrap
    return request.getfixturevalue("spark_broker").bootstrap


class Written:
    """What the workload wrote: values by fate."""

    def __init__(self) -> None:
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.open: list[bytes] = []


def _txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "linger.ms": 2,
            "transaction.timeout.ms": 600000,  # the open transaction must outlive the module
        }
    )
    p.init_transactions(30)
    return p


def produce_transactions(bootstrap: str, topic: str) -> tuple[Written, Producer]:
    """Committed and aborted transactions of two producers, interleaved on every partition,
    non-transactional records between them, and, last, one transaction left open. Returns what
    was written and the producer of the open transaction (abort it when done)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    w = Written()
    a = _txn_producer(bootstrap, f"{topic}-a")
    b = _txn_producer(bootstrap, f"{topic}-b")
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})

    def send(p, fate: list, tag: str, n: int, headers: bool = False) -> None:
        for i in range(n):
            v = f"{tag}-{i}".encode()
            h = [("fate", tag.encode())] if headers and i % 2 == 0 else None
            p.produce(topic, v, f"k{i}".encode(), partition=i % PARTITIONS, headers=h)
            fate.append(v)
        p.flush(30)

    for round_ in range(4):
        a.begin_transaction()
        b.begin_transaction()
        send(a, w.committed if round_ % 2 == 0 else w.aborted, f"a{round_}", 15, headers=True)
        send(b, w.aborted if round_ % 2 == 0 else w.committed, f"b{round_}", 12)
        send(plain, w.committed, f"plain{round_}", 6, headers=True)
        send(a, w.committed if round_ % 2 == 0 else w.aborted, f"a{round_}x", 9)
        if round_ % 2 == 0:
            b.abort_transaction(30)
            a.commit_transaction(30)
        else:
            a.abort_transaction(30)
            b.commit_transaction(30)
    send(plain, w.committed, "tail", 6)
    b.begin_transaction()
    send(b, w.open, "open", 6)
    send(plain, w.open, "after-open", 6)  # not stable either: after the open transaction's first offset
    plain.flush(30)
    return w, b


@pytest.fixture(scope="module")
def txn_topic(txn_bootstrap):
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    written, open_producer = produce_transactions(txn_bootstrap, topic)
    yield txn_bootstrap, topic, written
    open_producer.abort_transaction(30)


def read(spark, fmt: str, bootstrap: str, topic: str, **opts):
    r = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> list[tuple]:
    out = []
    for r in df.collect():
        d = r.asDict(recursive=True)
        if d.get("headers") is not None:
            d["headers"] = [(h["key"], h["value"]) for h in d["headers"]]
        out.append(tuple(d.items()))
    return sorted(out, key=repr)


def _values(df) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


CASES = {
    "columns": {},
    "headers": {"includeHeaders": "true"},
    "split": {"minPartitions": "11"},  # ranges cut inside transactions
    "split-headers": {"minPartitions": "11", "includeHeaders": "true"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_read_committed_reads_committed_records_only(spark, txn_topic, case):
    bootstrap, topic, w = txn_topic
    df = read(spark, "odradek", bootstrap, topic, **{"kafka.isolation.level": "read_committed"}, **CASES[case])
    assert _values(df) == sorted(w.committed)


@pytest.mark.parametrize("case", list(CASES))
def test_read_uncommitted_reads_every_record_and_no_marker(spark, txn_topic, case):
    bootstrap, topic, w = txn_topic
    df = read(spark, "odradek", bootstrap, topic, **CASES[case])
    assert _values(df) == sorted(w.committed + w.aborted + w.open)
    explicit = read(spark, "odradek", bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"})
    assert _values(explicit) == _values(df)


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
@pytest.mark.parametrize("case", list(CASES))
def test_same_rows_as_sparks_kafka_connector(spark, kafka_format, txn_topic, level, case):
    bootstrap, topic, _w = txn_topic
    opts = {"kafka.isolation.level": level, **CASES[case]}
    theirs = rows(read(spark, kafka_format, bootstrap, topic, **opts))
    ours = rows(read(spark, "odradek", bootstrap, topic, **opts))
    assert ours == theirs


def test_read_committed_from_inside_an_aborted_transaction(spark, kafka_format, txn_topic):
    """Starting offsets in the middle of transactions: the aborted ones' records are still dropped
    (the Fetch names transactions that began before the fetch offset)."""
    bootstrap, topic, _w = txn_topic
    start = json.dumps({topic: {str(p): 7 + p for p in range(PARTITIONS)}})
    opts = {"kafka.isolation.level": "read_committed", "startingOffsets": start}
    assert rows(read(spark, "odradek", bootstrap, topic, **opts)) == rows(
        read(spark, kafka_format, bootstrap, topic, **opts)
    )


def test_streaming_read_committed_stops_at_the_last_stable_offset(spark, txn_topic, tmp_path):
    """availableNow in small batches (ranges end inside transactions): every committed record
    exactly once, nothing aborted, nothing of the open transaction."""
    bootstrap, topic, w = txn_topic
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .select("value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None
    got = spark.read.parquet(str(out))
    assert got.count() == got.select("partition", "offset").distinct().count()
    assert _values(got) == sorted(w.committed)


def test_isolation_level_typo_is_refused(spark, txn_topic):
    bootstrap, topic, _w = txn_topic
    with pytest.raises(Exception, match="isolation.level"):
        read(spark, "odradek", bootstrap, topic, **{"kafka.isolation.level": "read_comitted"}).count()
