"""Differential test of our data source: Spark's own Kafka connector (``format("kafka")``,
spark-sql-kafka-0-10, tests/support/spark_jars.py) and ``format("odradek")`` read the same topics
from odradek: the same schema and the same rows, for every way of choosing offsets (JSON offsets,
earliest/latest, by timestamp for all partitions or each, start and end) and the same refusals.
And as a check of the harness itself, ``format("kafka")`` reads the same rows from Apache Kafka.

The records: three partitions, keys (one null), values (one null), headers (none, one, several,
a null header value), explicit CreateTime timestamps that interleave across partitions.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.spark

PARTITIONS = 3
PER_PARTITION = 40
T0 = 1_700_000_000_000


def ts(partition: int, i: int) -> int:
    """Record i of a partition: one second apart, partitions 10 ms apart (they interleave)."""
    return T0 + i * 1000 + partition * 10


def produce_workload(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(PER_PARTITION):
        for part in range(PARTITIONS):
            n = i * PARTITIONS + part
            key = None if n == 7 else f"k{n}".encode()
            value = None if n == 11 else f"value-{n}".encode()
            headers = [[], [("a", b"1")], [("a", b"1"), ("b", None), ("a", b"2")]][n % 3]
            p.produce(topic, value, key, part, timestamp=ts(part, i), headers=headers or None)
    assert p.flush(30) == 0


def read(spark, fmt: str, bootstrap: str, topic: str, **opts):
    r = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    if not any(k in opts for k in ("assign", "subscribePattern")):
        r = r.option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> list[tuple]:
    """Every row as a tuple, order-independent (a Kafka source promises no order across partitions)."""
    out = []
    for r in df.collect():
        d = r.asDict(recursive=True)
        if d.get("headers") is not None:
            d["headers"] = [(h["key"], h["value"]) for h in d["headers"]]
        out.append(tuple(d.items()))
    return sorted(out, key=repr)


@pytest.fixture(scope="module")
def workload(spark_broker):
    topic = f"diff-{uuid.uuid4().hex[:8]}"
    produce_workload(spark_broker.bootstrap, topic)
    return topic


def _per_partition(topic: str, values: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): v for p, v in values.items()}})


def cases(topic: str) -> dict[str, dict[str, str]]:
    mid = str(ts(0, 15) + 5)  # between records 15 and 16 of partition 0 (16 of 1 and 2 too: +10/+20 ms)
    late = str(ts(0, 30) + 500)
    return {
        "defaults": {},
        "headers": {"includeHeaders": "true"},
        "earliest-latest": {"startingOffsets": "earliest", "endingOffsets": "latest", "includeHeaders": "true"},
        "json-offsets": {
            "startingOffsets": _per_partition(topic, {0: 5, 1: -2, 2: 12}),
            "endingOffsets": _per_partition(topic, {0: 30, 1: -1, 2: 20}),
        },
        "assign": {"assign": json.dumps({topic: [0, 2]}), "startingOffsets": _per_partition(topic, {0: 3, 2: -2})},
        "pattern": {"subscribePattern": topic[:9] + ".*"},
        "startingTimestamp": {"startingTimestamp": mid},
        "startingTimestamp-exact": {"startingTimestamp": str(ts(1, 20))},  # equal to a record's: included
        "startingOffsetsByTimestamp": {
            "startingOffsetsByTimestamp": _per_partition(topic, {0: ts(0, 5), 1: ts(1, 20) + 1, 2: T0 - 1})
        },
        "endingTimestamp": {"endingTimestamp": late},
        "endingOffsetsByTimestamp": {
            "endingOffsetsByTimestamp": _per_partition(topic, {0: ts(0, 10), 1: ts(1, 39) + 1, 2: ts(2, 25) - 1})
        },
        "start-and-end-by-time": {"startingTimestamp": mid, "endingTimestamp": late, "includeHeaders": "true"},
        # precedence: startingTimestamp over startingOffsetsByTimestamp over startingOffsets
        "precedence": {
            "startingTimestamp": mid,
            "startingOffsetsByTimestamp": _per_partition(topic, {0: T0, 1: T0, 2: T0}),
            "startingOffsets": "earliest",
        },
        "no-match-latest": {
            "startingOffsetsByTimestamp": _per_partition(topic, {0: ts(0, 99), 1: ts(1, 3), 2: ts(2, 99)}),
            "startingOffsetsByTimestampStrategy": "latest",
        },
        "no-match-at-end": {"endingTimestamp": str(ts(2, 99))},  # no offset at or after: the end offset
        "minPartitions": {"minPartitions": "7", "includeHeaders": "true"},
    }


CASES = list(cases("t"))


@pytest.mark.parametrize("case", CASES)
def test_same_schema_and_rows_as_sparks_kafka_connector(spark, kafka_format, spark_broker, workload, case):
    opts = cases(workload)[case]
    theirs = read(spark, kafka_format, spark_broker.bootstrap, workload, **opts)
    ours = read(spark, "odradek", spark_broker.bootstrap, workload, **opts)
    assert ours.schema == theirs.schema
    expected = rows(theirs)
    assert expected or case == "no-match-latest", "the case should select rows"
    assert rows(ours) == expected
    if case == "defaults":
        assert len(expected) == PARTITIONS * PER_PARTITION


@pytest.mark.parametrize(
    "opts",
    [
        {"startingTimestamp": str(ts(0, 99))},  # no offset at or after it, strategy "error"
        {"startingOffsets": "latest"},  # not for a batch query
        {"endingOffsets": "earliest"},  # not for a batch query
        {"kafka.auto.offset.reset": "earliest"},  # the source decides where to start
        {"kafka.enable.auto.commit": "true"},
        {"kafka.value.deserializer": "org.apache.kafka.common.serialization.StringDeserializer"},
    ],
    ids=[
        "no-offset-for-start-time",
        "latest-start",
        "earliest-end",
        "auto-offset-reset",
        "auto-commit",
        "deserializer",
    ],
)
def test_same_refusals(spark, kafka_format, spark_broker, workload, opts):
    for fmt in (kafka_format, "odradek"):
        with pytest.raises(Exception):  # noqa: B017 - each source words it its own way
            read(spark, fmt, spark_broker.bootstrap, workload, **opts).count()


def test_kafka_group_id_is_where_the_two_differ(spark, kafka_format, spark_broker, workload):
    """Spark's connector accepts ``kafka.group.id`` (since Spark 3.0, with a warning: its consumers
    use that group id instead of a generated one; they never commit). Ours refuses it at planning:
    its consumers use no group at all (docs/spark.md)."""
    assert len(rows(read(spark, kafka_format, spark_broker.bootstrap, workload, **{"kafka.group.id": "g"}))) > 0
    with pytest.raises(Exception, match="kafka.group.id"):
        read(spark, "odradek", spark_broker.bootstrap, workload, **{"kafka.group.id": "g"}).count()


def test_harness_reads_the_same_rows_from_apache_kafka(spark, kafka_format, spark_broker, kafka4, workload):
    """Spark's connector reads the same records from Apache Kafka as from odradek: the workload and
    the comparison are sound on the reference broker too."""
    produce_workload(kafka4.bootstrap, workload)  # the same topic name, records, timestamps
    for case in ("headers", "json-offsets", "startingTimestamp", "endingOffsetsByTimestamp", "no-match-latest"):
        opts = cases(workload)[case]
        from_kafka = rows(read(spark, kafka_format, kafka4.bootstrap, workload, **opts))
        from_odradek = rows(read(spark, kafka_format, spark_broker.bootstrap, workload, **opts))
        assert from_kafka == from_odradek, case
