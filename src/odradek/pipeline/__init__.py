"""The activity-stream pipeline on the odradek Spark connector (see docs/pipeline.md).

generate -> topic ``activity`` -> load (batch, exactly once, Parquet warehouse by date/hour)
                               -> stream (per-minute stats -> Parquet + topic ``activity-stats``)
warehouse -> report (rich tables, PNG charts)
"""

ACTIVITY_TOPIC = "activity"
STATS_TOPIC = "activity-stats"


def kafka_options(settings: dict | None) -> dict[str, str]:
    """Client settings (`odradek pipeline --command-config`: security.protocol, sasl.*, ssl.*) as
    the odradek data source's ``kafka.*`` options, as Spark's Kafka connector takes them."""
    return {f"kafka.{k}": str(v) for k, v in (settings or {}).items()}
