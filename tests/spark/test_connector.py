"""The odradek PySpark data source against a real broker and a local[2] SparkSession."""

from __future__ import annotations

import json
import time

import pytest
from support.spark_data import checksum, make_topic, produce

pytestmark = pytest.mark.spark


def reader(spark, bootstrap, **opts):
    r = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in opts.items():
        r = r.option(k, v)
    return r


def rows_of(df):
    return [(r.key, r.value, r.partition, r.offset) for r in df.select("key", "value", "partition", "offset").collect()]


def test_batch_read_equals_produced(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap
    make_topic(bs, topic_name, 3)
    sent = produce(bs, topic_name, 3000, partitions=3, headers=True)
    expected_offsets = {}
    exp = []
    for k, v, p in sent:
        off = expected_offsets.get(p, 0)
        expected_offsets[p] = off + 1
        exp.append((k, v, p, off))
    df = reader(spark, bs, subscribe=topic_name, includeHeaders="true").load()
    got = rows_of(df)
    assert len(got) == 3000
    assert checksum(got) == checksum(exp)
    # headers: every even record carries ("h", str(i)); others are null like Spark's Kafka source
    hs = df.where("headers is not null").count()
    assert hs == 1500
    # minPartitions splits the three partitions into more tasks, same data
    df2 = reader(spark, bs, subscribe=topic_name, minPartitions="7").load()
    assert df2.rdd.getNumPartitions() >= 7
    assert checksum(rows_of(df2)) == checksum(exp)
    # JSON offsets with -2/-1 and an explicit range
    so = json.dumps({topic_name: {"0": 10, "1": -2, "2": -2}})
    eo = json.dumps({topic_name: {"0": 20, "1": -1, "2": 5}})
    df3 = reader(spark, bs, assign=json.dumps({topic_name: [0, 1, 2]}), startingOffsets=so, endingOffsets=eo).load()
    assert df3.count() == 10 + 1000 + 5
    # subscribePattern
    assert (
        reader(spark, bs, subscribePattern=topic_name[:6] + ".*").load().where(f"topic = '{topic_name}'").count()
        == 3000
    )


def test_batch_read_by_timestamp(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap
    make_topic(bs, topic_name, 1)
    produce(bs, topic_name, 50, partitions=1)
    time.sleep(0.05)
    mid = int(time.time() * 1000)
    time.sleep(0.05)
    produce(bs, topic_name, 30, partitions=1, start=50)
    df = reader(spark, bs, subscribe=topic_name, startingTimestamp=str(mid)).load()
    assert df.count() == 30
    df = reader(spark, bs, subscribe=topic_name, endingTimestamp=str(mid)).load()
    assert df.count() == 50
    with pytest.raises(Exception, match="no offset matched"):
        reader(spark, bs, subscribe=topic_name, startingTimestamp=str(mid + 10**8)).load().count()
    df = reader(
        spark, bs, subscribe=topic_name, startingTimestamp=str(mid + 10**8), startingOffsetsByTimestampStrategy="latest"
    ).load()
    assert df.count() == 0


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
        ({}, "exactly one of"),
        ({"subscribe": "a", "kafka.group.id": "g"}, "kafka.group.id"),
        ({"subscribe": "a", "kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"subscribe": "a", "startingOfsets": "earliest"}, "startingofsets"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "10"}, "only to streaming"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "not allowed for batch"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ],
)
def test_bad_options_fail_at_planning(spark, spark_broker, opts, message):
    with pytest.raises(Exception, match=message):
        reader(spark, spark_broker.bootstrap, **opts).load().count()


def _stream(spark, bs, topic, out, ckpt, **opts):
    r = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        r = r.option(k, v)
    q = (
        r.load()
        .select("key", "value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    return q


def test_stream_restart_exactly_once_and_max_offsets(spark, spark_broker, topic_name, tmp_path):
    bs = spark_broker.bootstrap
    make_topic(bs, topic_name, 2)
    produce(bs, topic_name, 1000)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = _stream(spark, bs, topic_name, out, ckpt, maxOffsetsPerTrigger="300")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 300 and sum(sizes) == 1000, sizes
    # checkpointed offsets have Kafka's JSON shape
    offsets_dir = ckpt / "offsets"
    last = max(int(p.name) for p in offsets_dir.iterdir() if p.name.isdigit())
    assert json.loads((offsets_dir / str(last)).read_text().splitlines()[-1]) == {topic_name: {"0": 500, "1": 500}}
    # restart: more data, a new partition
    produce(bs, topic_name, 500, start=1000)
    from odradek.client import Admin

    with Admin(bootstrap_servers=bs) as a:
        a.create_partitions({topic_name: 3})
    produce(bs, topic_name, 30, partitions=3, start=1500)
    _stream(spark, bs, topic_name, out, ckpt, maxOffsetsPerTrigger="300")
    df = spark.read.parquet(str(out))
    got = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
    assert len(got) == len(set(got)) == 1530
    by_part = {}
    for p, o in got:
        by_part.setdefault(p, []).append(o)
    for p, offs in by_part.items():
        assert sorted(offs) == list(range(len(offs))), p


def test_fail_on_data_loss_batch_and_stream(spark, spark_broker, topic_name, tmp_path):
    from odradek.client import Admin, TopicPartition

    bs = spark_broker.bootstrap
    make_topic(bs, topic_name, 1)
    produce(bs, topic_name, 100, partitions=1)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _stream(spark, bs, topic_name, out, ckpt)  # consumed 0..99
    produce(bs, topic_name, 100, partitions=1, start=100)
    with Admin(bootstrap_servers=bs) as a:
        a.delete_records({TopicPartition(topic_name, 0): 150})
    so = json.dumps({topic_name: {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, bs, subscribe=topic_name, startingOffsets=so).load().count()
    assert reader(spark, bs, subscribe=topic_name, startingOffsets=so, failOnDataLoss="false").load().count() == 50
    # streaming: the checkpoint says 100, the log now starts at 150
    with pytest.raises(Exception, match="failOnDataLoss"):
        q = _stream(spark, bs, topic_name, out, ckpt)
        if q.exception():
            raise q.exception()
    _stream(spark, bs, topic_name, out, ckpt, failOnDataLoss="false")
    offs = sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())
    assert offs == list(range(100)) + list(range(150, 200))


def test_writer_round_trip_batch_and_stream(spark, spark_broker, topic_name, tmp_path):
    bs = spark_broker.bootstrap
    make_topic(bs, topic_name, 2)
    rows = [(f"k{i}", f"value-{i}", i % 2, [("src", b"test")] if i % 3 == 0 else None) for i in range(500)]
    df = spark.createDataFrame(
        rows, "key string, value string, partition int, headers array<struct<key:string,value:binary>>"
    )
    df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", bs).option("topic", topic_name).save()
    back = reader(spark, bs, subscribe=topic_name, includeHeaders="true").load()
    got = {
        (
            r.key.decode(),
            r.value.decode(),
            r.partition,
            None if r.headers is None else tuple((h.key, bytes(h.value)) for h in r.headers),
        )
        for r in back.collect()
    }
    assert got == {(k, v, p, None if h is None else tuple(h)) for k, v, p, h in rows}
    # a sink needs a value column and a topic
    with pytest.raises(Exception, match="value"):
        spark.createDataFrame([("a",)], "key string").write.format("odradek").mode("append").option(
            "kafka.bootstrap.servers", bs
        ).option("topic", topic_name).save()
    with pytest.raises(Exception, match="topic"):
        spark.createDataFrame([("a",)], "value string").write.format("odradek").mode("append").option(
            "kafka.bootstrap.servers", bs
        ).save()

    # streaming copy topic -> topic2, twice (restart): each record copied exactly once
    t2 = topic_name + "-copy"
    make_topic(bs, t2, 2)
    ckpt = tmp_path / "wckpt"

    def copy():
        q = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", topic_name)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "200")
            .load()
            .selectExpr("key", "value", "partition")
            .writeStream.format("odradek")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", t2)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        return q

    q = copy()
    assert reader(spark, bs, subscribe=t2).load().count() == 500
    # simulate a crash after the sink committed the last batch but before Spark logged it:
    # drop the last commit log entry; Spark replays that batch and the sink must skip it
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    for crc in (ckpt / "commits").glob(f".{last}.crc"):
        crc.unlink()
    copy()
    assert reader(spark, bs, subscribe=t2).load().count() == 500
    produce(bs, topic_name, 50, start=1000)
    copy()
    assert reader(spark, bs, subscribe=t2).load().count() == 550
    assert q.id is not None
