"""The activity-stream pipeline on the odradek Spark connector (see docs/pipeline.md).

generate -> topic ``activity`` -> load (batch, exactly once, Parquet warehouse by date/hour)
                               -> stream (per-minute stats -> Parquet + topic ``activity-stats``)
warehouse -> report (rich tables, PNG charts)
"""

ACTIVITY_TOPIC = "activity"
STATS_TOPIC = "activity-stats"
