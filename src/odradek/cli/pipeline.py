"""`odradek pipeline ...`: the activity-stream pipeline (generate, load, stream, sessionize, report).

Every command that talks to a broker takes ``--command-config FILE`` (client settings for a
secured listener, as Kafka's tools take them: security.protocol, sasl.*, ssl.*); the Spark
commands pass them to the odradek data source as its ``kafka.*`` options."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import click

from odradek.cli.client_config import client_errors, command_config_option, load_client_config
from odradek.pipeline import ACTIVITY_TOPIC, STATS_TOPIC


def _ms(s: str | None) -> int | None:
    """Epoch milliseconds from ISO-8601 (UTC if no zone) or a number of ms."""
    if s is None:
        return None
    if s.isdigit():
        return int(s)
    dt = datetime.fromisoformat(s)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


@click.group("pipeline")
def pipeline() -> None:
    """The activity-stream pipeline on Spark (see docs/pipeline.md)."""


bootstrap_opt = click.option("--bootstrap-server", "-b", "bootstrap", default="127.0.0.1:9092", show_default=True)
topic_opt = click.option("--topic", default=ACTIVITY_TOPIC, show_default=True)
master_opt = click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")


@pipeline.command()
@bootstrap_opt
@command_config_option
@topic_opt
@click.option("--count", type=int, help="Number of events.")
@click.option("--rate", type=float, help="Events per second (default: as fast as possible).")
@click.option("--duration", type=float, help="Seconds to run.")
@click.option("--partitions", type=int, default=4, show_default=True, help="Partitions if the topic is created.")
@click.option("--seed", type=int, default=7, show_default=True)
def generate(bootstrap, command_config, topic, count, rate, duration, partitions, seed):
    """Produce page views, searches and clicks (keyed by user id), with a few crawlers."""
    from odradek.pipeline.events import generate as gen

    if count is None and duration is None:
        raise click.UsageError("give --count or --duration")
    with client_errors():
        n = gen(
            bootstrap,
            topic,
            count=count,
            rate=rate,
            duration=duration,
            seed=seed,
            partitions=partitions,
            settings=load_client_config(command_config),
        )
    click.echo(f"produced {n} events to {topic}")


@pipeline.command()
@bootstrap_opt
@command_config_option
@topic_opt
@master_opt
@click.option("--warehouse", required=True, type=click.Path(file_okay=False), help="Warehouse directory.")
@click.option("--starting-offsets", default=None, help='earliest or JSON {"activity":{"0":0}}')
@click.option("--ending-offsets", default=None, help='latest or JSON {"activity":{"0":1000}}')
@click.option("--from", "from_", default=None, help="Start time (ISO-8601 UTC or epoch ms).")
@click.option("--to", default=None, help="End time (ISO-8601 UTC or epoch ms), exclusive.")
def load(bootstrap, command_config, topic, master, warehouse, starting_offsets, ending_offsets, from_, to):
    """Load a range of the topic into the Parquet warehouse, exactly once."""
    from odradek.pipeline.load import load as do_load
    from odradek.pipeline.session import get_spark

    def spec(s):
        if s is None or s in ("earliest", "latest"):
            return s
        return json.loads(s)

    spark = get_spark(master, "odradek-pipeline-load")
    try:
        entry = do_load(
            spark,
            bootstrap,
            topic,
            warehouse,
            start=spec(starting_offsets),
            end=spec(ending_offsets),
            from_ms=_ms(from_),
            to_ms=_ms(to),
            progress=True,
            settings=load_client_config(command_config),
        )
    finally:
        spark.stop()
    click.echo(
        f"committed load {entry['id']}: {entry['records']} records, ranges {json.dumps(entry['ranges'])}"
        + (f", replacing {', '.join(entry['replaced'])}" if entry["replaced"] else "")
    )


@pipeline.command()
@bootstrap_opt
@command_config_option
@topic_opt
@master_opt
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Parquet output directory.")
@click.option("--checkpoint", required=True, type=click.Path(file_okay=False))
@click.option("--stats-topic", default=STATS_TOPIC, show_default=True)
@click.option("--threshold", type=int, default=100, show_default=True, help="Requests per minute that flag a crawler.")
@click.option("--trigger", default="10 seconds", show_default=True)
@click.option("--available-now", is_flag=True, help="Process what is there, then stop.")
@click.option("--max-offsets-per-trigger", type=int, default=None)
def stream(
    bootstrap,
    command_config,
    topic,
    master,
    out,
    checkpoint,
    stats_topic,
    threshold,
    trigger,
    available_now,
    max_offsets_per_trigger,
):
    """Per-minute views per URL, unique users, top referrers and crawlers (restart-safe)."""
    from rich.console import Console

    from odradek.pipeline.session import get_spark
    from odradek.pipeline.stream import start_stream

    console = Console(stderr=True)
    spark = get_spark(master, "odradek-pipeline-stream")
    q = start_stream(
        spark,
        bootstrap,
        out,
        checkpoint,
        topic=topic,
        stats_topic=stats_topic,
        threshold=threshold,
        trigger=trigger,
        available_now=available_now,
        max_offsets=max_offsets_per_trigger,
        settings=load_client_config(command_config),
    )
    try:
        with console.status("streaming") as status:
            while q.isActive:
                p = q.lastProgress
                if p:
                    status.update(
                        f"batch {p['batchId']}: {p['numInputRows']} rows, "
                        f"{p.get('processedRowsPerSecond', 0):.0f} rows/s"
                    )
                q.awaitTermination(2)
        if q.exception():
            raise click.ClickException(str(q.exception()))
    except KeyboardInterrupt:
        q.stop()
    finally:
        spark.stop()


@pipeline.command()
@bootstrap_opt
@command_config_option
@topic_opt
@click.option("--output", default="sessions", show_default=True, help="Topic of the session summaries.")
@click.option("--group", default="sessionize", show_default=True, help="Consumer group (also names the state topic).")
@click.option("--gap-ms", type=int, default=30 * 60 * 1000, show_default=True, help="Inactivity that ends a session.")
@click.option("--lateness-ms", type=int, default=0, show_default=True, help="How far the watermark trails.")
@click.option("--max-records", type=int, default=500, show_default=True, help="Records per transaction at most.")
@click.option(
    "--idle-exit",
    type=float,
    default=None,
    help="Stop after this many seconds without input, once the input is read to its end.",
)
def sessionize(bootstrap, command_config, topic, output, group, gap_ms, lateness_ms, max_records, idle_exit):
    """Per-user session summaries, exactly once (transactions; see docs/pipeline.md)."""
    import logging

    from odradek.pipeline.sessionize import run_until_idle

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    last = [0.0]

    def progress(s) -> None:
        now = time.monotonic()
        if now - last[0] > 5:
            last[0] = now
            click.echo(f"{s.events_read} events, {s.sessions_written} sessions written", err=True)

    args = dict(
        bootstrap=bootstrap,
        input_topic=topic,
        output_topic=output,
        group=group,
        gap_ms=gap_ms,
        lateness_ms=lateness_ms,
        max_records=max_records,
        settings=load_client_config(command_config),
    )
    with client_errors():
        run_until_idle(args, idle_exit, on_commit=progress)
    click.echo("sessionize: idle, stopped")


@pipeline.command()
@topic_opt
@click.option("--warehouse", required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--charts", "charts_dir", type=click.Path(file_okay=False), default=None, help="Write PNG charts here.")
def report(topic, warehouse, charts_dir):
    """Summary tables and charts from the warehouse."""
    from odradek.pipeline.report import charts, render, summarize

    s = summarize(warehouse, topic)
    render(s)
    if charts_dir:
        for p in charts(s, charts_dir):
            click.echo(f"wrote {p}")
