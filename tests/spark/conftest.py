"""Fixtures for the Spark connector and pipeline tests: one local[2] SparkSession and one
odradek broker for the whole session (tests use their own topics)."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from support.broker import BrokerProcess  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: tests with a real local SparkSession and a real broker")


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker"), {"num.partitions": "2"})
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import odradek.spark

    s = (
        SparkSession.builder.master("local[2]")
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


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:10]}"
