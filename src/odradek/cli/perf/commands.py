"""The click side of `odradek perf produce|consume|e2e` (see odradek/cli/perf/__init__.py):
options, the topic, the driver by name, and the printed summary; the measuring is engine.py's."""

from __future__ import annotations

import json
import os

import click

from odradek.cli.client_config import command_config_option, load_client_config
from odradek.cli.perf.drivers import DRIVERS, driver
from odradek.cli.perf.engine import (
    ConsumeSpec,
    E2ESpec,
    PerfError,
    ProduceSpec,
    check_settings,
    ensure_topic,
    run_consume,
    run_e2e,
    run_produce,
)
from odradek.cli.topics import bootstrap_option

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _note(message: str) -> None:
    click.echo(message, err=True)


def _print_result(res: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(res))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(
        "metric",
        "value",
        title=f"perf {res['workload']} ({res['driver']} driver, topic {res['topic']})",
        title_justify="left",
    )
    for k, v in res.items():
        if k in ("workload", "driver", "topic", "latency_ms"):
            continue
        t.add_row(k, f"{v:,.2f}" if isinstance(v, float) else str(v))
    lat = res.get("latency_ms")
    if lat and lat["count"]:
        for k in ("avg", "p50", "p95", "p99", "p999", "max"):
            t.add_row(f"latency {k} (ms)", f"{lat[k]:.2f}")
        t.add_row("latency samples", str(lat["count"]))
    Console().print(t)


def _fail(e: BaseException):
    raise click.ClickException(f"{type(e).__name__}: {e}") from None


def _settings(command_config: str | None, driver_name: str) -> dict:
    """--command-config's client settings, refused up front for a driver that cannot take them."""
    settings = load_client_config(command_config)
    try:
        check_settings(driver(driver_name), settings)
    except PerfError as e:
        _fail(click.BadParameter(str(e)))
    return settings


driver_option = click.option(
    "--driver",
    "driver_name",
    type=click.Choice(list(DRIVERS)),
    default="odradek",
    show_default=True,
    help="odradek: odradek's Python client; confluent: librdkafka via confluent-kafka.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


@click.group()
def perf() -> None:
    """Load generators: producer and consumer throughput, end-to-end latency."""


@perf.command("produce")
@bootstrap_option
@click.option("--topic", "-t", required=True)
@click.option("--num-records", "-n", type=int, default=1_000_000, show_default=True)
@click.option("--record-size", "-s", type=int, default=100, show_default=True, help="Value bytes (no key).")
@click.option("--throughput", type=float, default=-1, show_default=True, help="Max records/s (-1: unlimited).")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True)
@click.option("--compression", "-z", type=click.Choice(COMPRESSIONS), default="none", show_default=True)
@click.option("--linger-ms", type=int, default=5, show_default=True)
@click.option("--batch-size", type=int, default=None, help="Default: 16384 (odradek), librdkafka's (confluent).")
@click.option("--partitions", type=int, default=None, help="Create the topic with this many partitions first.")
@click.option("--partition", type=int, default=None, help="Send every record to this partition.")
@click.option("--idempotence/--no-idempotence", default=False, show_default=True)
@click.option("--sample-every", type=int, default=16, show_default=True, help="Measure latency of every N-th record.")
@click.option(
    "--native-batch",
    type=int,
    default=0,
    show_default=True,
    help="confluent driver: enqueue N records per produce_batch() call (0: one produce() per record).",
)
@click.option(
    "-X",
    "client_config",
    multiple=True,
    metavar="KEY=VALUE",
    help="confluent driver: a librdkafka setting (repeatable), e.g. -X sticky.partitioning.linger.ms=0.",
)
@command_config_option
@driver_option
@json_option
def perf_produce(
    bootstrap,
    command_config,
    topic,
    num_records,
    record_size,
    throughput,
    acks,
    compression,
    linger_ms,
    batch_size,
    partitions,
    partition,
    idempotence,
    sample_every,
    native_batch,
    client_config,
    driver_name,
    as_json,
):
    """Producer throughput and send->ack latency."""
    bad = [c for c in client_config if "=" not in c]
    if bad:
        raise click.BadParameter(f"-X wants KEY=VALUE, got {bad[0]!r}")
    settings = _settings(command_config, driver_name)
    ensure_topic(bootstrap, topic, partitions, _note, settings)
    spec = ProduceSpec(
        bootstrap,
        topic,
        num_records,
        acks=acks,
        compression=compression,
        linger_ms=linger_ms,
        batch_size=batch_size,
        throughput=throughput,
        sample_every=max(1, sample_every),
        partition=partition,
        idempotence=idempotence,
        native_batch=native_batch,
        client_config=dict(c.split("=", 1) for c in client_config),
        settings=settings,
    )
    try:
        res = run_produce(driver(driver_name), spec, record_size, progress=not as_json)
    except PerfError as e:  # reported as before the split: a ClickException naming BadParameter
        _fail(click.BadParameter(str(e)))
    except Exception as e:  # noqa: BLE001
        _fail(e)
    _print_result(res, as_json)
    if res["errors"]:
        raise click.ClickException(f"{res['errors']} delivery error(s), first: {res['first_error']}")


@perf.command("consume")
@bootstrap_option
@click.option("--topic", "-t", required=True)
@click.option("--num-records", "-n", type=int, default=1_000_000, show_default=True, help="Stop after this many.")
@click.option("--group", "-g", default=None, help="Subscribe with this group (default: assign every partition).")
@click.option("--fetch-max-wait-ms", type=int, default=100, show_default=True)
@click.option(
    "--timeout", "timeout_s", type=float, default=30, show_default=True, help="Stop after this long without a record."
)
@command_config_option
@driver_option
@json_option
def perf_consume(
    bootstrap, command_config, topic, num_records, group, fetch_max_wait_ms, timeout_s, driver_name, as_json
):
    """Consumer throughput from the earliest offsets."""
    settings = _settings(command_config, driver_name)
    spec = ConsumeSpec(bootstrap, topic, num_records, group, fetch_max_wait_ms, timeout_s, settings)
    try:
        res = run_consume(driver(driver_name), spec, progress=not as_json)
    except PerfError as e:  # reported as before the split: a ClickException naming BadParameter
        _fail(click.BadParameter(str(e)))
    except Exception as e:  # noqa: BLE001
        _fail(e)
    _print_result(res, as_json)
    if res["records"] < num_records:
        click.echo(f"warning: only {res['records']} of {num_records} records consumed", err=True)


@perf.command("e2e")
@bootstrap_option
@click.option("--topic", "-t", required=True)
@click.option("--rate", type=float, default=5000, show_default=True, help="Records/s.")
@click.option("--duration", "duration_s", type=float, default=20, show_default=True, help="Seconds of sending.")
@click.option("--record-size", "-s", type=int, default=100, show_default=True)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True)
@click.option("--linger-ms", type=int, default=0, show_default=True)
@click.option("--fetch-max-wait-ms", type=int, default=500, show_default=True)
@click.option(
    "--warmup", "warmup_s", type=float, default=1.0, show_default=True, help="Seconds not counted at the start."
)
@click.option(
    "--partitions", type=int, default=1, show_default=True, help="Create the topic with this many partitions first."
)
@command_config_option
@driver_option
@json_option
def perf_e2e(
    bootstrap,
    command_config,
    topic,
    rate,
    duration_s,
    record_size,
    acks,
    linger_ms,
    fetch_max_wait_ms,
    warmup_s,
    partitions,
    driver_name,
    as_json,
):
    """End-to-end latency (send -> consumed) at a fixed rate."""
    settings = _settings(command_config, driver_name)
    ensure_topic(bootstrap, topic, partitions, _note, settings)
    spec = E2ESpec(
        bootstrap, topic, acks=acks, linger_ms=linger_ms, fetch_max_wait_ms=fetch_max_wait_ms, settings=settings
    )
    try:
        res = run_e2e(driver(driver_name), spec, rate, duration_s, record_size, warmup_s)
    except PerfError as e:  # reported as before the split: a ClickException naming BadParameter
        _fail(click.BadParameter(str(e)))
    except Exception as e:  # noqa: BLE001
        _fail(e)
    _print_result(res, as_json)
    if res["received"] < res["sent"]:
        click.echo(f"warning: {res['sent'] - res['received']} record(s) not received", err=True)


if os.environ.get("ODRADEK_PERF_DEBUG"):  # pragma: no cover
    import faulthandler

    faulthandler.enable()
