"""Static registration of the ``odradek`` PySpark data source.

PySpark finds top-level modules named ``pyspark_*`` that define ``DefaultSource`` and makes
their format available in every session, so ``spark.read.format("odradek")`` works without
``spark.dataSource.register``.
"""

from odradek.spark.source import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
