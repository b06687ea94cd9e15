"""Fixtures of the Spark connector and pipeline tests (tests/spark, tests/pipeline): one local[2]
SparkSession and one odradek broker for the whole session (tests use their own topics).
A pytest plugin (tests/conftest.py names it in ``pytest_plugins``), so that both folders share
the one session.

The session is created with Spark's own Kafka connector on ``spark.jars`` when it is installed
(tests/support/spark_jars.py), so ``format("kafka")`` runs beside ``format("odradek")``; jars can
only be added when the session is created, hence here. ``kafka_format`` skips a test without it."""

from __future__ import annotations

import os
import sys
import uuid

import pytest
from support.broker import BrokerProcess
from support.spark_jars import spark_jars_conf


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker"), {"num.partitions": "2"})
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import odradek.spark

    builder = SparkSession.builder
    for k, v in spark_jars_conf().items():
        builder = builder.config(k, v)
    s = (
        builder.master("local[2]")
        .appName("odradek-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    odradek.spark.register(s)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def kafka_format(spark):
    """Spark's own Kafka connector is on the session's classpath (else the test is skipped)."""
    if not spark_jars_conf():
        pytest.skip("Spark's Kafka connector not installed (.deps/spark-kafka): run scripts/install-test-deps.sh")
    return "kafka"


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:10]}"
