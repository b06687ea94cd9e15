"""The SparkSession the pipeline commands use."""

from __future__ import annotations

import os
import sys


def get_spark(master: str = "local[*]", app: str = "odradek-pipeline", conf: dict | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import odradek.spark

    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.sources.partitionOverwriteMode", "static")
    )
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    odradek.spark.register(spark)
    return spark
