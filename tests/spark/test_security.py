"""The odradek data source over SASL_SSL (SCRAM-SHA-512, the broker's certificate checked against a
CA): a batch read and a batch write with `kafka.security.protocol`, `kafka.sasl.*` and
`kafka.ssl.*` as Spark's Kafka connector takes them, against a real broker process whose SASL_SSL
listener is the only one the query is given; a wrong password fails the query."""

from __future__ import annotations

import pytest
from support.sasl_ssl_broker import CERTS, SCRAM_JAAS, sasl_ssl_broker
from support.spark_data import make_topic, produce

from odradek.client import Consumer

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    with sasl_ssl_broker(tmp_path_factory.mktemp("spark-sasl-ssl"), {"spark": "spark-pw"}) as b:
        yield b


def secure_options(broker, password: str = "spark-pw") -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": broker.sasl_ssl_bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": f'{SCRAM_JAAS} username="spark" password="{password}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(CERTS / "ca.pem"),
    }


def test_read_and_write_over_sasl_ssl(spark, secure_broker, topic_name):
    make_topic(secure_broker.bootstrap, topic_name, 2)
    sent = produce(secure_broker.bootstrap, topic_name, 500, partitions=2)
    df = spark.read.format("odradek").options(**secure_options(secure_broker), subscribe=topic_name).load()
    got = sorted((bytes(r.key), bytes(r.value)) for r in df.select("key", "value").collect())
    assert got == sorted((k, v) for k, v, _p in sent)

    out = topic_name + "-out"
    make_topic(secure_broker.bootstrap, out, 1)
    df.selectExpr("key", "value").write.format("odradek").mode("append").options(
        **secure_options(secure_broker), topic=out
    ).save()
    with Consumer(bootstrap_servers=secure_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(out, 0)])
        written: list = []
        for _ in range(50):
            written += [(r.key, r.value) for r in c.poll(0.5)]
            if len(written) >= 500:
                break
    assert sorted(written) == got


def test_a_wrong_password_fails_the_query(spark, secure_broker, topic_name):
    make_topic(secure_broker.bootstrap, topic_name, 1)
    opts = {**secure_options(secure_broker, "not-the-password"), "subscribe": topic_name}
    with pytest.raises(Exception) as e:
        spark.read.format("odradek").options(**opts).load().count()
    assert "SaslAuthenticationFailed" in str(e.value) or "Authentication failed" in str(e.value), str(e.value)[:2000]
    assert "not-the-password" not in str(e.value)


# ---------------------------------------------------------------------- streaming over SASL_SSL
def _committed(spark, broker, topic: str) -> list[bytes]:
    """Every committed value of `topic`, read back over SASL_SSL with read_committed."""
    df = (
        spark.read.format("odradek")
        .options(**secure_options(broker), subscribe=topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    return sorted(bytes(r.value) for r in df.select("value").collect())


def test_streaming_read_over_sasl_ssl(spark, secure_broker, topic_name, tmp_path):
    make_topic(secure_broker.bootstrap, topic_name, 2)
    sent = produce(secure_broker.bootstrap, topic_name, 300, partitions=2)
    q = (
        spark.readStream.format("odradek")
        .options(**secure_options(secure_broker), subscribe=topic_name)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    assert q.exception() is None
    assert len(q.recentProgress) >= 3  # maxOffsetsPerTrigger split the 300 records into batches
    got = sorted((bytes(r.key), bytes(r.value)) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert got == sorted((k, v) for k, v, _p in sent)


def test_exactly_once_sink_over_sasl_ssl(spark, secure_broker, topic_name, tmp_path):
    """The exactly-once sink's transactions, its commit record and the read back all go over
    the SASL_SSL listener; a replayed batch is found committed over it too."""
    src, dst = topic_name, topic_name + "-eos"
    make_topic(secure_broker.bootstrap, src, 2)
    make_topic(secure_broker.bootstrap, dst, 2)
    sent = produce(secure_broker.bootstrap, src, 200, partitions=2)
    ckpt = tmp_path / "ckpt"

    def copy() -> None:
        q = (
            spark.readStream.format("odradek")
            .options(**secure_options(secure_broker), subscribe=src)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "80")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("odradek")
            .options(**secure_options(secure_broker), topic=dst, exactlyOnce="true")
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(240)
        assert q.exception() is None

    copy()
    want = sorted(v for _k, v, _p in sent)
    assert _committed(spark, secure_broker, dst) == want
    # a crash after the sink committed the last batch, before Spark logged it: Spark replays it
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    for crc in (ckpt / "commits").glob(f".{last}.crc"):
        crc.unlink()
    copy()
    assert _committed(spark, secure_broker, dst) == want


def _assert_auth_failure(e: BaseException, password: str) -> None:
    text = str(e)
    assert "SaslAuthenticationFailed" in text or "Authentication failed" in text, text[:2000]
    assert password not in text


def test_a_wrong_password_fails_a_stream_without_the_secret(spark, secure_broker, topic_name, tmp_path):
    make_topic(secure_broker.bootstrap, topic_name, 1)
    produce(secure_broker.bootstrap, topic_name, 10, partitions=1)
    with pytest.raises(Exception) as e:
        q = (
            spark.readStream.format("odradek")
            .options(**secure_options(secure_broker, "wrong-stream-pw"), subscribe=topic_name)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("memory")
            .queryName("wrong_pw_" + topic_name.replace("-", "_"))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        if q.exception() is not None:
            raise q.exception()
    _assert_auth_failure(e.value, "wrong-stream-pw")


def test_a_wrong_password_fails_the_exactly_once_sink_without_the_secret(spark, secure_broker, topic_name, tmp_path):
    make_topic(secure_broker.bootstrap, topic_name, 1)
    produce(secure_broker.bootstrap, topic_name, 10, partitions=1)
    with pytest.raises(Exception) as e:
        q = (
            spark.readStream.format("odradek")
            .options(**secure_options(secure_broker), subscribe=topic_name)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("odradek")
            .options(**secure_options(secure_broker, "wrong-sink-pw"), topic=topic_name + "-out", exactlyOnce="true")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        if q.exception() is not None:
            raise q.exception()
    _assert_auth_failure(e.value, "wrong-sink-pw")
