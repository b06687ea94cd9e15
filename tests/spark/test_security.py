"""The odradek data source over SASL_SSL (SCRAM-SHA-512, the broker's certificate checked against a
CA): a batch read and a batch write with `kafka.security.protocol`, `kafka.sasl.*` and
`kafka.ssl.*` as Spark's Kafka connector takes them, against a real broker process whose SASL_SSL
listener is the only one the query is given; a wrong password fails the query."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.broker import BrokerProcess, free_port
from support.spark_data import make_topic, produce

from odradek.client import Admin, Consumer, UserScramCredentialUpsertion

pytestmark = pytest.mark.spark

CERTS = Path(__file__).resolve().parents[1] / "support" / "tls_certs"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    plain_port, sasl_ssl_port = free_port(), free_port()
    b = BrokerProcess(
        tmp_path_factory.mktemp("spark-sasl-ssl"),
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS + ";",
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
        },
        port=plain_port,
    )
    b.sasl_ssl_bootstrap = f"127.0.0.1:{sasl_ssl_port}"
    with b.start():
        with Admin(bootstrap_servers=b.bootstrap) as a:
            a.alter_user_scram_credentials([UserScramCredentialUpsertion("spark", "SCRAM-SHA-512", "spark-pw")])
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
