"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10), beside our ``format("odradek")``.

``scripts/install-test-deps.sh`` resolves it from ``scripts/maven/spark-sql-kafka.xml`` into
``.deps/spark-kafka``: the connector 4.2.0 (the newest Maven Central serves; there is no 4.3.0
for the installed pyspark 4.3.0, and 4.2.0 runs on it), its token provider, kafka-clients 3.9.2
and commons-pool2: the jars pyspark does not ship. A SparkSession loads them with ``spark.jars``
when it is created (:func:`spark_jars_conf`): the tests' shared session (tests/support/spark_session.py)
and bench/spark/run.py do.
"""

from __future__ import annotations

from pathlib import Path

from support.broker import DEPS

KAFKA_CONNECTOR_DIR = DEPS / "spark-kafka"


def kafka_connector_jars() -> list[Path]:
    """The connector's jars; [] when not installed."""
    jars = sorted(KAFKA_CONNECTOR_DIR.glob("*.jar"))
    return jars if any(j.name.startswith("spark-sql-kafka-0-10_") for j in jars) else []


def kafka_connector_version() -> str | None:
    for j in kafka_connector_jars():
        if j.name.startswith("spark-sql-kafka-0-10_2.13-"):
            return j.name.removeprefix("spark-sql-kafka-0-10_2.13-").removesuffix(".jar")
    return None


def spark_jars_conf() -> dict[str, str]:
    """``{"spark.jars": ...}`` for a SparkSession builder, or {} when the connector is missing."""
    jars = kafka_connector_jars()
    return {"spark.jars": ",".join(str(j) for j in jars)} if jars else {}
