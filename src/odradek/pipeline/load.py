"""`load`: a range of a topic into a Parquet warehouse by date and hour, exactly once.

Layout of a table (``<warehouse>/<topic>/``)::

    _manifest.json            the commit point: the loads that are visible and their offset ranges
    _lock                     flock'ed while a load runs (one loader at a time)
    _staging/<load id>/       Spark writes here (partitioned date=YYYY-MM-DD/hour=HH)
    loads/<load id>/...       committed load directories (only those in the manifest count)

A load (1) resolves its offset range on the driver (offsets, or times through ListOffsets),
(2) widens it to the union with every committed load it overlaps, so those can be replaced
whole, (3) reads exactly those offsets with the odradek connector and writes Parquet into
staging, (4) renames staging into ``loads/`` (atomic, same file system) and (5) replaces the
manifest atomically (temp file, fsync, rename), dropping the loads it superseded. A crash
before (5) leaves the old manifest: nothing partial is visible, and leftovers are removed by
the next load. Re-running a range therefore replaces it, never duplicates it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from . import kafka_options
from .events import EVENT_DDL

MANIFEST = "_manifest.json"


# ---------------------------------------------------------------------- manifest
def table_dir(warehouse: str | os.PathLike, topic: str) -> Path:
    return Path(warehouse) / topic


def read_manifest(table: Path) -> dict:
    p = table / MANIFEST
    if not p.exists():
        return {"version": 1, "loads": []}
    return json.loads(p.read_text())


def write_manifest(table: Path, manifest: dict) -> None:
    tmp = table / f".{MANIFEST}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, table / MANIFEST)
    fd = os.open(table, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def visible_load_dirs(table: Path) -> list[Path]:
    return [table / "loads" / ld["id"] for ld in read_manifest(table)["loads"]]


@contextmanager
def table_lock(table: Path):
    table.mkdir(parents=True, exist_ok=True)
    with open(table / "_lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another load is running on {table}") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _ranges_key(ranges: dict) -> dict[tuple[str, int], tuple[int, int]]:
    return {(t, int(p)): (int(se[0]), int(se[1])) for t, ps in ranges.items() for p, se in ps.items()}


def _ranges_json(r: dict[tuple[str, int], tuple[int, int]]) -> dict:
    out: dict = {}
    for (t, p), (s, e) in sorted(r.items()):
        out.setdefault(t, {})[str(p)] = [s, e]
    return out


def widen(requested: dict, loads: list[dict]) -> tuple[dict, list[str]]:
    """Union `requested` with every load overlapping it (to a fixpoint); returns the widened
    ranges and the ids of the loads they replace."""
    req = dict(requested)
    replaced: list[str] = []
    changed = True
    while changed:
        changed = False
        for ld in loads:
            if ld["id"] in replaced:
                continue
            lr = _ranges_key(ld["ranges"])
            overlap = any(
                tp in req and lr[tp][0] < req[tp][1] and req[tp][0] < lr[tp][1] and lr[tp][0] < lr[tp][1] for tp in lr
            )
            if not overlap:
                continue
            replaced.append(ld["id"])
            for tp, (s, e) in lr.items():
                if tp in req:
                    req[tp] = (min(req[tp][0], s), max(req[tp][1], e))
                else:
                    req[tp] = (s, e)
            changed = True
    return req, replaced


def _cleanup(table: Path, manifest: dict) -> None:
    """Remove staging leftovers and load directories the manifest does not list."""
    shutil.rmtree(table / "_staging", ignore_errors=True)
    keep = {ld["id"] for ld in manifest["loads"]}
    loads = table / "loads"
    if loads.exists():
        for d in loads.iterdir():
            if d.name not in keep:
                shutil.rmtree(d, ignore_errors=True)
    for tmp in table.glob(f".{MANIFEST}.*.tmp"):
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------- planning
def resolve_range(
    bootstrap: str,
    topic: str,
    start: dict | str | None = None,
    end: dict | str | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    settings: dict | None = None,
) -> dict[tuple[str, int], tuple[int, int]]:
    """Concrete [start, end) offsets per partition, like the connector would plan them."""
    from odradek.spark.options import parse_source_options
    from odradek.spark.planner import Planner

    opts = {**kafka_options(settings), "kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    if from_ms is not None:
        opts["startingTimestamp"] = str(from_ms)
        opts["startingOffsetsByTimestampStrategy"] = "latest"
    elif start is not None:
        opts["startingOffsets"] = start if isinstance(start, str) else json.dumps(start)
    if to_ms is not None:
        opts["endingTimestamp"] = str(to_ms)
    elif end is not None:
        opts["endingOffsets"] = end if isinstance(end, str) else json.dumps(end)
    so = parse_source_options(opts, streaming=False)
    pl = Planner(so)
    try:
        tps = pl.topic_partitions()
        if not tps:
            raise RuntimeError(f"topic {topic!r} does not exist or has no partitions")
        s = pl.starting_offsets(tps, streaming=False)
        e = pl.ending_offsets(tps)
        for tp in e:
            s.setdefault(tp, pl.earliest([tp])[tp])
        return {tp: (s[tp], max(e[tp], s[tp])) for tp in e}
    finally:
        pl.close()


# ---------------------------------------------------------------------- the load
def load(
    spark,
    bootstrap: str,
    topic: str,
    warehouse: str | os.PathLike,
    *,
    start=None,
    end=None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    progress: bool = False,
    settings: dict | None = None,
) -> dict:
    """Load a range of `topic` into the warehouse; returns the manifest entry committed.
    `settings`: client settings for a secured listener (security.protocol, sasl.*, ssl.*)."""
    from pyspark.sql import functions as F

    table = table_dir(warehouse, topic)
    with table_lock(table):
        manifest = read_manifest(table)
        _cleanup(table, manifest)
        requested = resolve_range(bootstrap, topic, start, end, from_ms, to_ms, settings)
        ranges, replaced = widen(requested, manifest["loads"])
        load_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        staging = table / "_staging" / load_id
        so = json.dumps({t: {p: se[0] for p, se in ps.items()} for t, ps in _ranges_json(ranges).items()})
        eo = json.dumps({t: {p: se[1] for p, se in ps.items()} for t, ps in _ranges_json(ranges).items()})
        assign = json.dumps({t: sorted(int(p) for p in ps) for t, ps in _ranges_json(ranges).items()})
        total = sum(e - s for s, e in ranges.values())
        df = (
            spark.read.format("odradek")
            .options(**kafka_options(settings))
            .option("kafka.bootstrap.servers", bootstrap)
            .option("assign", assign)
            .option("startingOffsets", so)
            .option("endingOffsets", eo)
            .option("maxRecordsPerPartition", "500000")
            .load()
        )
        ev = F.from_json(F.col("value").cast("string"), EVENT_DDL)
        out = (
            df.select(ev.alias("e"), "topic", "partition", "offset", F.col("timestamp").alias("kafka_ts"))
            .select("e.*", "topic", "partition", "offset", "kafka_ts")
            .withColumn("event_time", F.timestamp_millis(F.coalesce(F.col("ts"), F.unix_millis("kafka_ts"))))
            .withColumn("date", F.date_format("event_time", "yyyy-MM-dd"))
            .withColumn("hour", F.date_format("event_time", "HH"))
            .drop("ts")
        )
        _run_with_progress(
            spark,
            lambda: out.write.mode("overwrite").partitionBy("date", "hour").parquet(str(staging)),
            f"load {topic} ({total:,} records)",
            progress,
        )
        _crash_hook("before-commit", table)
        (table / "loads").mkdir(parents=True, exist_ok=True)
        final = table / "loads" / load_id
        os.rename(staging, final)
        entry = {
            "id": load_id,
            "ranges": _ranges_json(ranges),
            "records": total,
            "requested": _ranges_json(requested),
            "replaced": replaced,
            "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        new = {"version": 1, "loads": [ld for ld in manifest["loads"] if ld["id"] not in replaced] + [entry]}
        write_manifest(table, new)
        for rid in replaced:
            shutil.rmtree(table / "loads" / rid, ignore_errors=True)
        shutil.rmtree(table / "_staging", ignore_errors=True)
        return entry


def _crash_hook(point: str, table: Path) -> None:
    """Test hook: ODRADEK_PIPELINE_PAUSE=<point> writes <table>/_paused and waits to be killed."""
    if os.environ.get("ODRADEK_PIPELINE_PAUSE") == point:
        (table / "_paused").write_text(str(os.getpid()))
        while True:
            time.sleep(1)


def _run_with_progress(spark, fn, label: str, progress: bool) -> None:
    if not progress:
        fn()
        return
    import threading

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err: list = []

    def run():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            err.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    tracker = spark.sparkContext.statusTracker()
    with Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn()
    ) as bar:
        task = bar.add_task("load", total=None)
        while t.is_alive():
            done = total = 0
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                bar.update(task, completed=done, total=total)
            t.join(0.5)
    if err:
        raise err[0]


def read_table(warehouse: str | os.PathLike, topic: str):
    """The visible rows of a table as a pyarrow Table (only loads listed in the manifest)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    table = table_dir(warehouse, topic)
    part = ds.partitioning(pa.schema([("date", pa.string()), ("hour", pa.string())]), flavor="hive")
    parts = []
    for d in visible_load_dirs(table):
        parts.append(ds.dataset(str(d), format="parquet", partitioning=part).to_table())
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="permissive")
