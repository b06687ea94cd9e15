"""`odradek topics ...`: create, list, describe, alter and delete topics (kafka-topics.sh and the
topic half of kafka-configs.sh), over `odradek.client.aio`.

Works against any Kafka-compatible broker; parts a broker does not implement (DescribeConfigs,
DescribeLogDirs, ListOffsets) are shown as "-" rather than failing the whole command.
`--command-config FILE` gives the client settings of a secured listener (as kafka-topics takes
them: security.protocol, sasl.*, ssl.*; cli/client_config.py).
"""

from __future__ import annotations

import asyncio
import json

import click

from odradek.cli.client_config import admin_client, command_config_option, load_client_config

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DESCRIBE_LOG_DIRS = 35

bootstrap_option = click.option(
    "--bootstrap-server",
    "-b",
    "bootstrap",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    envvar="ODRADEK_BOOTSTRAP_SERVER",
    help="host:port[,host:port] of any broker.",
)


def parse_kv(items: tuple[str, ...], what: str = "--config") -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        pieces = item.split(",")
        for part in pieces if all("=" in x for x in pieces) else [item]:
            k, sep, v = part.partition("=")
            if not sep or not k.strip():
                raise click.BadParameter(f"expected KEY=VALUE, got {part!r}", param_hint=what)
            out[k.strip()] = v.strip()
    return out


def human_bytes(n: int | None) -> str:
    if n is None or n < 0:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def run(coro):
    """Run one client coroutine; turn client errors into click errors (exit code 1)."""
    from odradek.client import errors as E

    try:
        return asyncio.run(coro)
    except E.KafkaError as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None
    except (OSError, ValueError) as e:
        raise click.ClickException(str(e)) from None


def _admin(bootstrap: str, command_config: str | None = None, timeout_ms: int = 30000):
    return admin_client(bootstrap, command_config, timeout_ms)


def _console():
    from rich.console import Console

    return Console()


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


# ----------------------------------------------------------------------------- create
@topics.command("create")
@bootstrap_option
@command_config_option
@click.argument("names", nargs=-1, required=True)
@click.option(
    "--partitions", "-p", type=int, default=-1, help="Partition count (default: the broker's num.partitions)."
)
@click.option("--replication-factor", "-r", type=int, default=-1, help="Replication factor (default: the broker's).")
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed when the topic already exists.")
@click.option("--validate-only", is_flag=True, help="Ask the broker to validate without creating.")
def create_cmd(bootstrap, command_config, names, partitions, replication_factor, configs, if_not_exists, validate_only):
    """Create topics NAMES..."""
    from odradek.client import NewTopic
    from odradek.client import errors as E

    cfg = parse_kv(configs)

    async def go():
        async with _admin(bootstrap, command_config) as a:
            for name in names:
                try:
                    await a.create_topics(
                        [NewTopic(name, partitions, replication_factor, dict(cfg))], validate_only=validate_only
                    )
                except E.TopicAlreadyExistsError:
                    if not if_not_exists:
                        raise
                    click.echo(f"Topic {name} already exists.")
                    continue
                click.echo(f"{'Validated' if validate_only else 'Created'} topic {name}.")

    run(go())


# ----------------------------------------------------------------------------- list
@topics.command("list")
@bootstrap_option
@command_config_option
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets ...).")
def list_cmd(bootstrap, command_config, internal):
    """List topic names, one a line."""

    async def go():
        async with _admin(bootstrap, command_config) as a:
            return await a.list_topics(internal=internal)

    for name in sorted(run(go())):
        click.echo(name)


# ----------------------------------------------------------------------------- describe
async def gather_description(
    bootstrap: str,
    names: list[str] | None,
    internal: bool = False,
    with_offsets: bool = True,
    with_configs: bool = True,
    *,
    command_config: str | None = None,
) -> list[dict]:
    """Everything `describe` shows, as plain data: one dict per topic. `command_config`: a client
    settings file (--command-config)."""
    from odradek.client import TopicPartition
    from odradek.client import errors as E
    from odradek.client.aio import AIOConsumer

    async with _admin(bootstrap, command_config) as a:
        infos = await a.describe_topics(names or None)
        if names is None:
            infos = {n: t for n, t in infos.items() if internal or not t.is_internal}
        topics_out = []
        for name in sorted(infos):
            t = infos[name]
            topics_out.append(
                {
                    "name": name,
                    "topic_id": str(t.topic_id) if t.topic_id else None,
                    "internal": t.is_internal,
                    "partitions": [
                        {
                            "partition": p.partition,
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replicas": list(p.replicas),
                            "isr": list(p.isr),
                            "offline": list(p.offline),
                            "log_start_offset": None,
                            "log_end_offset": None,
                            "size": None,
                        }
                        for p in sorted(t.partitions.values(), key=lambda p: p.partition)
                    ],
                    "configs": None,
                }
            )
        if with_configs:
            for t in topics_out:
                try:
                    res = await a.describe_configs([("topic", t["name"])])
                    t["configs"] = dict(sorted(res.get(("topic", t["name"]), {}).items()))
                except (TimeoutError, E.KafkaError, OSError):
                    t["configs"] = None
        # sizes: DescribeLogDirs on every broker (a generic request; the admin client has no wrapper)
        sizes: dict[tuple[str, int], int] = {}
        wanted = [{"topic": t["name"], "partitions": [p["partition"] for p in t["partitions"]]} for t in topics_out]
        if wanted:
            for node in list(a.cluster.metadata.brokers):
                try:
                    resp = await asyncio.wait_for(a.cluster.send(node, DESCRIBE_LOG_DIRS, {"topics": wanted}), 10)
                except Exception:  # noqa: BLE001 - brokers without DescribeLogDirs
                    continue
                for r in resp.results:
                    for tt in r.topics:
                        for pp in tt.partitions:
                            key = (tt.name, int(pp.partition_index))
                            sizes[key] = sizes.get(key, 0) + int(pp.partition_size)
    if with_offsets and topics_out:
        tps = [TopicPartition(t["name"], p["partition"]) for t in topics_out for p in t["partitions"]]
        settings = load_client_config(command_config)
        settings.update({"bootstrap.servers": bootstrap, "request.timeout.ms": 15000, "default.api.timeout.ms": 15000})
        c = AIOConsumer(config=settings)
        await c.start()
        try:
            try:
                starts = await c.beginning_offsets(tps, 15)
                ends = await c.end_offsets(tps, 15)
            except (TimeoutError, E.KafkaError, OSError):
                starts, ends = {}, {}
        finally:
            await c.close(autocommit=False)
        for t in topics_out:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition"])
                p["log_start_offset"] = starts.get(tp)
                p["log_end_offset"] = ends.get(tp)
    for t in topics_out:
        for p in t["partitions"]:
            p["size"] = sizes.get((t["name"], p["partition"]))
    return topics_out


def _fmt(v) -> str:
    return "-" if v is None else str(v)


@topics.command("describe")
@bootstrap_option
@command_config_option
@click.argument("names", nargs=-1)
@click.option("--internal", is_flag=True, help="With no NAMES: include internal topics.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--no-offsets", is_flag=True, help="Skip the ListOffsets round trips.")
def describe_cmd(bootstrap, command_config, names, internal, as_json, no_offsets):
    """Partitions (leader, replicas, ISR, log start/end offsets, size) and configs of NAMES (default: all)."""
    names_or_all = list(names) or None
    data = run(gather_description(bootstrap, names_or_all, internal, not no_offsets, command_config=command_config))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    from rich.table import Table

    con = _console()
    if not data:
        con.print("no topics")
    for t in data:
        total = [p["size"] for p in t["partitions"] if p["size"] is not None]
        msgs = [
            p["log_end_offset"] - p["log_start_offset"]
            for p in t["partitions"]
            if p["log_end_offset"] is not None and p["log_start_offset"] is not None
        ]
        title = (
            f"[bold]{t['name']}[/]  partitions={len(t['partitions'])}  "
            f"records≈{sum(msgs) if msgs else '-'}  size={human_bytes(sum(total)) if total else '-'}"
            + ("  (internal)" if t["internal"] else "")
        )
        table = Table(
            "partition", "leader", "replicas", "isr", "log start", "log end", "size", title=title, title_justify="left"
        )
        for p in t["partitions"]:
            table.add_row(
                str(p["partition"]),
                str(p["leader"]),
                ",".join(map(str, p["replicas"])),
                ",".join(map(str, p["isr"])),
                _fmt(p["log_start_offset"]),
                _fmt(p["log_end_offset"]),
                human_bytes(p["size"]) if p["size"] is not None else "-",
            )
        con.print(table)
        if t["configs"]:
            ct = Table("config", "value", title=f"{t['name']} configs", title_justify="left")
            for k, v in t["configs"].items():
                ct.add_row(k, _fmt(v))
            con.print(ct)


# ----------------------------------------------------------------------------- alter
@topics.command("alter")
@bootstrap_option
@command_config_option
@click.argument("name")
@click.option("--partitions", "-p", type=int, help="Grow the topic to this many partitions.")
@click.option(
    "--config", "-c", "set_configs", multiple=True, metavar="KEY=VALUE", help="Set a topic config (repeatable)."
)
@click.option(
    "--delete-config",
    "delete_configs",
    multiple=True,
    metavar="KEY",
    help="Remove a topic config override (repeatable).",
)
@click.option("--validate-only", is_flag=True)
def alter_cmd(bootstrap, command_config, name, partitions, set_configs, delete_configs, validate_only):
    """Add partitions to NAME and/or change its configs (IncrementalAlterConfigs)."""
    changes: dict[str, str | None] = dict(parse_kv(set_configs))
    for k in delete_configs:
        changes[k] = None
    if partitions is None and not changes:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")

    async def go():
        async with _admin(bootstrap, command_config) as a:
            if partitions is not None:
                await a.create_partitions({name: partitions}, validate_only=validate_only)
                click.echo(f"Topic {name} now has {partitions} partitions.")
            if changes:
                await a.incremental_alter_configs({("topic", name): changes}, validate_only=validate_only)
                for k, v in changes.items():
                    click.echo(f"{'Deleted' if v is None else 'Set'} {k}{'' if v is None else '=' + v} on {name}.")

    run(go())


# ----------------------------------------------------------------------------- delete
@topics.command("delete")
@bootstrap_option
@command_config_option
@click.argument("names", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="Succeed when a topic does not exist.")
def delete_cmd(bootstrap, command_config, names, if_exists):
    """Delete topics NAMES..."""
    from odradek.client import errors as E

    async def go():
        async with _admin(bootstrap, command_config) as a:
            for name in names:
                try:
                    await a.delete_topics([name])
                except E.UnknownTopicOrPartitionError:
                    if not if_exists:
                        raise
                    click.echo(f"Topic {name} does not exist.")
                    continue
                click.echo(f"Deleted topic {name}.")

    run(go())
