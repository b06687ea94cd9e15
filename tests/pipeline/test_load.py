"""`odradek pipeline load`: exactly-once loads into the Parquet warehouse; report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from support.spark_data import make_topic

pytestmark = pytest.mark.spark

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def rows(warehouse, topic):
    from odradek.pipeline.load import read_table

    t = read_table(warehouse, topic)
    if t is None:
        return []
    cols = ["partition", "offset", "user_id", "url", "event_type", "event_time", "date", "hour"]
    return sorted(zip(*[t[c].to_pylist() for c in cols]))


@pytest.fixture(scope="module")
def activity(spark_broker):
    from odradek.pipeline.events import generate

    topic = f"activity-{os.getpid()}"
    # Event times start at START_MS, long past the broker's 7-day retention: without
    # retention.ms=-1 the session broker's retention check (every 5 minutes) deletes them
    # under a later test once the session has run that long.
    make_topic(spark_broker.bootstrap, topic, 2, {"retention.ms": "-1"})
    # 4000 events, one every 2 s of event time: 2h13m over three hours of partitions
    generate(
        spark_broker.bootstrap, topic, count=4000, partitions=2, progress=False, start_ms=START_MS, spacing_ms=2000
    )
    return topic


def test_load_twice_gives_identical_contents(spark, spark_broker, activity, tmp_path):
    from odradek.pipeline.load import load, read_manifest, table_dir
    from odradek.pipeline.report import charts, render, summarize

    wh = tmp_path / "wh"
    bs = spark_broker.bootstrap
    first = load(spark, bs, activity, wh)
    r1 = rows(wh, activity)
    assert len(r1) == 4000 and first["records"] == 4000
    per = {}
    for p, o, *_ in r1:
        per.setdefault(p, []).append(o)
    assert all(sorted(offs) == list(range(len(offs))) for offs in per.values())
    hours = sorted({(d, h) for *_, d, h in r1})
    assert hours == [("2026-01-01", "00"), ("2026-01-01", "01"), ("2026-01-01", "02")]
    second = load(spark, bs, activity, wh)
    assert rows(wh, activity) == r1
    m = read_manifest(table_dir(wh, activity))
    assert [ld["id"] for ld in m["loads"]] == [second["id"]] and second["replaced"] == [first["id"]]
    assert sorted(p.name for p in (table_dir(wh, activity) / "loads").iterdir()) == [second["id"]]
    # a sub-range by time overlaps the committed load: it is widened and replaces it, no duplicates
    third = load(spark, bs, activity, wh, from_ms=START_MS + 3_600_000, to_ms=START_MS + 3_700_000)
    assert third["replaced"] == [second["id"]]
    assert rows(wh, activity) == r1
    # report
    s = summarize(wh, activity)
    assert s["rows"] == 4000 and s["per_minute"] and s["top_urls"]
    render(s)
    files = charts(s, tmp_path / "charts")
    assert [f.name for f in files] == ["views_per_minute.png", "top_urls.png"]
    assert all(f.stat().st_size > 1000 for f in files)


def test_killed_load_then_rerun_equals_uninterrupted(spark, spark_broker, activity, tmp_path):
    from odradek.pipeline.load import load, read_manifest, table_dir

    bs = spark_broker.bootstrap
    ref = tmp_path / "ref"
    load(spark, bs, activity, ref, end={activity: {"0": 1000, "1": 1000}})
    expected = rows(ref, activity)
    assert len(expected) == 2000

    wh = tmp_path / "wh"
    env = dict(os.environ, ODRADEK_PIPELINE_PAUSE="before-commit", PYSPARK_PYTHON=sys.executable)
    cmd = [
        sys.executable,
        "-m",
        "odradek",
        "pipeline",
        "load",
        "-b",
        bs,
        "--topic",
        activity,
        "--master",
        "local[1]",
        "--warehouse",
        str(wh),
        "--ending-offsets",
        json.dumps({activity: {"0": 1000, "1": 1000}}),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    paused = table_dir(wh, activity) / "_paused"
    deadline = time.monotonic() + 240
    try:
        while not paused.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "load did not reach the commit point"
            time.sleep(0.2)
        staged = list((table_dir(wh, activity) / "_staging").rglob("*.parquet"))
        assert staged, "the killed load had written its output"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # nothing of the killed load is visible
    assert read_manifest(table_dir(wh, activity))["loads"] == []
    assert rows(wh, activity) == []
    load(spark, bs, activity, wh, end={activity: {"0": 1000, "1": 1000}})
    assert rows(wh, activity) == expected
    assert not (table_dir(wh, activity) / "_staging").exists()


def test_stream_stats_restart_safe(spark, spark_broker, tmp_path):
    """Two availableNow runs with a restart between: every finished minute is reported once,
    with all of its events, in Parquet and in the stats topic."""
    import pyarrow.compute as pc

    from odradek.pipeline.events import generate
    from odradek.pipeline.stream import read_stats, start_stream

    bs = spark_broker.bootstrap
    topic, stats = f"act-{os.getpid()}", f"act-stats-{os.getpid()}"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    # old event times: kept from the broker's retention check, as in the `activity` fixture above
    make_topic(bs, topic, 2, {"retention.ms": "-1"})
    # 2 x 600 events 200 ms apart: minutes 0..3 of event time; bots make ~8 requests a minute
    generate(bs, topic, count=600, partitions=2, progress=False, start_ms=START_MS, spacing_ms=200)

    def run():
        q = start_stream(
            spark, bs, out, ckpt, topic=topic, stats_topic=stats, available_now=True, threshold=5, max_offsets=400
        )
        q.awaitTermination(180)
        assert q.exception() is None

    run()
    generate(bs, topic, count=600, partitions=2, progress=False, start_ms=START_MS + 120_000, spacing_ms=200, seed=9)
    run()
    m = read_stats(out, "minute")
    minutes = m["minute"].to_pylist()
    assert len(minutes) == len(set(minutes)) >= 2  # each finished minute once
    assert set(m["events"].to_pylist()) == {300}  # 60 s / 200 ms per minute, all of them
    assert pc.min(m["unique_users"]).as_py() > 100
    crawlers = read_stats(out, "crawlers")
    assert crawlers is not None and {w for w in crawlers["who"].to_pylist() if w.startswith("bot")}
    got = spark.read.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", stats).load()
    keys = [r.key.decode() for r in got.select("key").collect()]
    assert sum(k.startswith("minute:") for k in keys) == len(minutes)
