"""PySpark connector: the ``odradek`` data source (Spark's Kafka source/sink contract).

Installed with the package, the format is available in every session (static registration
through the top-level module ``pyspark_odradek``); ``register(spark)`` registers it explicitly.
See docs/spark.md.
"""

from __future__ import annotations

FORMAT = "odradek"


def register(spark) -> None:
    """Register the ``odradek`` format in `spark` (a SparkSession)."""
    from .source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)


def __getattr__(name):
    if name == "OdradekDataSource":
        from .source import OdradekDataSource

        return OdradekDataSource
    raise AttributeError(name)


__all__ = ["FORMAT", "register", "OdradekDataSource"]
