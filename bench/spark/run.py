"""Spark connector throughput: batch read into noop and Parquet, batch write; raw client read rate.

    .venv/bin/python bench/spark/run.py [--records 5000000] [--partitions 4] [--master local[2]]

Starts an odradek broker on a free port in a temp dir, produces N records of 100-byte values,
then measures (each timed from action start to end, Spark session already warm):
  raw client read   one odradek Consumer per partition, sequentially, in this process
  spark read noop   spark.read.format("odradek")...write.format("noop")
  spark read parquet  ...write.parquet(tmp)
  spark-sql-kafka read noop / parquet   the same with Spark's own connector, format("kafka")
                    (.deps/spark-kafka, tests/support/spark_jars.py; skipped when not installed,
                    or with --skip-kafka-connector), from the same broker and topic
  spark write       a DataFrame of N rows (key, value) -> format("odradek") into a new topic
Prints records/s and the broker's CPU seconds per million records for each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def broker_cpu(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--skip-write", action="store_true")
    ap.add_argument("--skip-kafka-connector", action="store_true", help='leave out Spark\'s format("kafka") rows')
    a = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from support.broker import BrokerProcess
    from support.spark_jars import kafka_connector_version, spark_jars_conf

    from odradek.client import Admin, Consumer, Producer, TopicPartition

    tmp = Path(tempfile.mkdtemp(prefix="odradek-spark-bench-"))
    b = BrokerProcess(tmp / "broker", {"log.segment.bytes": str(512 * 1024 * 1024)})
    b.start()
    results = []
    try:
        bs = b.bootstrap
        with Admin(bootstrap_servers=bs) as ad:
            ad.create_topic("bench", a.partitions)
            ad.create_topic("bench-out", a.partitions)
        n, parts = a.records, a.partitions

        def measure(name, fn, count):
            c0, t = broker_cpu(b.proc.pid), time.time()
            fn()
            dt, cpu = time.time() - t, broker_cpu(b.proc.pid) - c0
            results.append((name, count, dt, count / dt, cpu / (count / 1e6)))
            print(
                f"{name:22s} {count:>10,} rec {dt:7.1f}s {count / dt:>12,.0f} rec/s"
                f"  broker {cpu / (count / 1e6):.2f} CPU-s/M",
                flush=True,
            )

        def produce():
            value = b"x" * 100
            with Producer(bootstrap_servers=bs, linger_ms=50, batch_size=1024 * 1024, max_request_size=8 << 20) as p:
                for i in range(n):
                    p.send("bench", value, key=b"k%d" % (i % 100000), partition=i % parts)
                p.flush()

        measure("raw client produce", produce, n)

        def raw():
            got = 0
            c = Consumer(
                bootstrap_servers=bs,
                max_poll_records=20000,
                max_partition_fetch_bytes=8 << 20,
                fetch_max_bytes=64 << 20,
                auto_offset_reset="none",
                fetch_max_wait_ms=100,
            )
            for part in range(parts):
                tp = TopicPartition("bench", part)
                end = n // parts + (1 if part < n % parts else 0)
                c.assign([tp])
                c.seek(tp, 0)
                k = 0
                while k < end:
                    k += len(c.poll(1.0))
                got += k
            c.close()
            assert got == n, got

        measure("raw client read", raw, n)

        from pyspark.sql import SparkSession

        import odradek.spark

        builder = SparkSession.builder
        jars = {} if a.skip_kafka_connector else spark_jars_conf()
        for k, v in jars.items():
            builder = builder.config(k, v)
        spark = (
            builder.master(a.master)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(parts))
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        odradek.spark.register(spark)

        def src(fmt="odradek"):  # a fresh DataFrameReader each time (.option() mutates the reader)
            return spark.read.format(fmt).option("kafka.bootstrap.servers", bs).option("subscribe", "bench")

        formats = [("odradek", "spark read")]
        if jars:
            formats.append(("kafka", f"spark-sql-kafka {kafka_connector_version()} read"))
        elif not a.skip_kafka_connector:
            print("Spark's Kafka connector not installed (.deps/spark-kafka): its rows are left out", flush=True)
        first_1000 = '{{"bench":{{{}}}}}'.format(",".join(f'"{i}":1000' for i in range(parts)))
        out = tmp / "parquet"
        for fmt, label in formats:
            # warm up: the Python workers (ours), the connector's classes and consumer pool (Spark's)
            src(fmt).option("endingOffsets", first_1000).load().write.format("noop").mode("overwrite").save()
            measure(f"{label} -> noop", lambda f=fmt: src(f).load().write.format("noop").mode("overwrite").save(), n)
            measure(f"{label} -> parquet", lambda f=fmt: src(f).load().write.mode("overwrite").parquet(str(out)), n)
            shutil.rmtree(out, ignore_errors=True)
        if not a.skip_write:
            wn = n
            # explicit partitions, like the raw produce above (keyed placement adds the client's
            # pure-Python murmur2 per record)
            df = spark.range(wn, numPartitions=parts).selectExpr(
                "cast(id % 100000 as string) as key",
                "repeat('y', 100) as value",
                f"cast(id % {parts} as int) as partition",
            )
            measure(
                "spark write",
                lambda: (
                    df.write.format("odradek")
                    .mode("append")
                    .option("kafka.bootstrap.servers", bs)
                    .option("topic", "bench-out")
                    .save()
                ),
                wn,
            )
        spark.stop()
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| measurement | records | seconds | records/s | broker CPU-s per M |")
    print("|---|---:|---:|---:|---:|")
    for name, count, dt, rate, cpu in results:
        print(f"| {name} | {count:,} | {dt:.1f} | {rate:,.0f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
