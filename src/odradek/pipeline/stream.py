"""`stream`: per-minute activity statistics with Structured Streaming.

One query reads ``activity`` with the odradek source and keeps one stateful aggregation:
counts per (minute, event type, url, referrer, user, ip) with a watermark. In append mode a
minute's rows are all emitted in the micro-batch where the watermark passes the minute's
end, so `foreachBatch` derives every statistic of a finished minute from one batch:

* ``url_views``    page views per URL per minute
* ``minute``       events, page views and unique users (approx_count_distinct) per minute
* ``referrers``    top referrers per minute (rank <= top_n)
* ``crawlers``     users or IPs with more than ``threshold`` requests in a minute

Each batch writes ``<out>/<stat>/batch=<id>/`` (overwrite, so a replayed batch replaces
itself) and sends JSON records to ``activity-stats`` unless ``<out>/_sent/<id>`` says that
batch was already sent. The checkpoint makes restarts resume where the last run stopped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import ACTIVITY_TOPIC, STATS_TOPIC, kafka_options
from .events import EVENT_DDL


def build_stats(fine, top_n: int = 5, threshold: int = 100):
    """The four stat DataFrames from finished (window, dims, n) rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    f = fine.select(F.col("window.start").alias("minute"), "event_type", "url", "referrer", "user_id", "ip", "n")
    views = f.where("event_type = 'page_view'")
    url_views = views.groupBy("minute", "url").agg(F.sum("n").alias("views"))
    minute = f.groupBy("minute").agg(
        F.sum("n").alias("events"),
        F.sum(F.when(F.col("event_type") == "page_view", F.col("n")).otherwise(0)).alias("page_views"),
        F.approx_count_distinct("user_id").alias("unique_users"),
    )
    refs = (
        f.where("referrer <> ''")
        .groupBy("minute", "referrer")
        .agg(F.sum("n").alias("n"))
        .withColumn("rank", F.row_number().over(Window.partitionBy("minute").orderBy(F.desc("n"), "referrer")))
        .where(F.col("rank") <= top_n)
    )
    by_user = (
        f.groupBy("minute", "user_id")
        .agg(F.sum("n").alias("requests"))
        .where(F.col("requests") > threshold)
        .select("minute", F.lit("user").alias("kind"), F.col("user_id").alias("who"), "requests")
    )
    by_ip = (
        f.groupBy("minute", "ip")
        .agg(F.sum("n").alias("requests"))
        .where(F.col("requests") > threshold)
        .select("minute", F.lit("ip").alias("kind"), F.col("ip").alias("who"), "requests")
    )
    return {"url_views": url_views, "minute": minute, "referrers": refs, "crawlers": by_user.unionByName(by_ip)}


def start_stream(
    spark,
    bootstrap: str,
    out: str | os.PathLike,
    checkpoint: str | os.PathLike,
    *,
    topic: str = ACTIVITY_TOPIC,
    stats_topic: str = STATS_TOPIC,
    watermark: str = "1 minute",
    threshold: int = 100,
    top_n: int = 5,
    trigger: str | None = "10 seconds",
    available_now: bool = False,
    max_offsets: int | None = None,
    starting: str = "earliest",
    settings: dict | None = None,
):
    from pyspark.sql import functions as F

    out = Path(out)
    r = (
        spark.readStream.format("odradek")
        .options(**kafka_options(settings))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
    )
    if max_offsets:
        r = r.option("maxOffsetsPerTrigger", str(max_offsets))
    ev = (
        r.load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_DDL).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    fine = (
        ev.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", "1 minute"), "event_type", "url", "referrer", "user_id", "ip")
        .agg(F.count(F.lit(1)).alias("n"))
    )

    def each_batch(df, batch_id: int) -> None:
        df = df.persist()
        try:
            if df.isEmpty():
                return
            stats = build_stats(df, top_n, threshold)
            for name, sdf in stats.items():
                sdf.write.mode("overwrite").parquet(str(out / name / f"batch={batch_id}"))
            sent = out / "_sent" / str(batch_id)
            if not sent.exists():
                msgs = None
                for name, sdf in stats.items():
                    j = sdf.select(
                        F.concat_ws(":", F.lit(name), F.date_format("minute", "yyyy-MM-dd'T'HH:mm")).alias("key"),
                        F.to_json(F.struct(F.lit(name).alias("stat"), *[F.col(c) for c in sdf.columns])).alias("value"),
                    )
                    msgs = j if msgs is None else msgs.unionByName(j)
                (
                    msgs.write.format("odradek")
                    .mode("append")
                    .options(**kafka_options(settings))
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", stats_topic)
                    .save()
                )
                sent.parent.mkdir(parents=True, exist_ok=True)
                sent.write_text(json.dumps({"batch": batch_id}))
        finally:
            df.unpersist()

    w = fine.writeStream.outputMode("append").foreachBatch(each_batch).option("checkpointLocation", str(checkpoint))
    if available_now:
        w = w.trigger(availableNow=True)
    elif trigger:
        w = w.trigger(processingTime=trigger)
    return w.start()


def read_stats(out: str | os.PathLike, name: str):
    """One statistic as a pyarrow Table (all batches)."""
    import pyarrow.dataset as ds

    p = Path(out) / name
    if not p.exists():
        return None
    return ds.dataset(str(p), format="parquet", partitioning="hive").to_table()
