"""`OdradekDataSource`: the PySpark Python Data Source named ``odradek``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from .options import parse_sink_options, parse_source_options
from .reader import OdradekBatchReader, OdradekStreamReader, source_schema
from .txn_sink import check_exactly_once
from .writer import OdradekBatchWriter, OdradekStreamWriter, check_columns


def _include_headers(options) -> bool:
    v = options.get("includeHeaders") if hasattr(options, "get") else None
    return str(v).strip().lower() == "true" if v is not None else False


class OdradekDataSource(DataSource):
    """Spark's Kafka source and sink, served by odradek's Python client.

    ``spark.read.format("odradek").option("kafka.bootstrap.servers", ...).option("subscribe", "t").load()``
    """

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self):
        return source_schema(_include_headers(self.options))

    def reader(self, schema):
        return OdradekBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema):
        return OdradekStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema, overwrite: bool):
        opts = parse_sink_options(self.options)
        check_columns(schema, opts)
        check_exactly_once(opts, streaming=False)
        return OdradekBatchWriter(opts)

    def streamWriter(self, schema, overwrite: bool):
        opts = parse_sink_options(self.options)
        check_columns(schema, opts)
        check_exactly_once(opts, streaming=True)
        return OdradekStreamWriter(opts)
