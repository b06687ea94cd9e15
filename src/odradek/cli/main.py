"""`odradek ...`: the command line, thin over config, broker and client."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from odradek import __version__


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


class LazyGroup(click.Group):
    """Subcommands named here are imported only when used, so `odradek broker`
    never depends on the client, Spark or tool modules (and starts fast)."""

    lazy: dict[str, str] = {
        # name -> "module:attribute"
        "topics": "odradek.cli.topics:topics",
        "produce": "odradek.cli.console:produce_cmd",
        "consume": "odradek.cli.console:consume_cmd",
        "perf": "odradek.cli.perf:perf",
        "groups": "odradek.cli.groups:groups",
        "transactions": "odradek.cli.transactions:transactions",
        "pipeline": "odradek.cli.pipeline:pipeline",
        "cluster": "odradek.cli.cluster:cluster",
        "acls": "odradek.cli.acls:acls",
        "users": "odradek.cli.users:users",
        "quotas": "odradek.cli.quotas:quotas",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is None and name in self.lazy:
            import importlib

            module, _, attr = self.lazy[name].partition(":")
            try:
                cmd = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as e:
                reason = f"command {name!r} is not available: {e}"

                def unavailable() -> None:
                    raise click.ClickException(reason)

                cmd = click.Command(name, callback=unavailable, help=f"(unavailable: {e})")
        return cmd


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="odradek")
def main() -> None:
    """odradek: a Kafka-compatible streaming platform."""


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="server.properties file.")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE", help="Set a broker setting (repeatable).")
@click.option("--log-level", default="INFO", show_default=True, help="Logging level.")
@click.option(
    "--loop",
    "loop_impl",
    type=click.Choice(["uvloop", "asyncio"]),
    default="uvloop",
    show_default=True,
    help="Event loop implementation.",
)
def broker(config_path: str | None, overrides: tuple[str, ...], log_level: str, loop_impl: str) -> None:
    """Run a single-node broker (metadata kept in its first log directory)."""
    # kio registers a Hypothesis strategy for its types when it can import hypothesis (installed
    # with the test extra): at import that builds Hypothesis' Unicode tables, ~1 CPU-s and a
    # ~200 MB peak of RSS unless <cwd>/.hypothesis caches them, and writes that directory into
    # the broker's working directory. A broker never generates test data: keep it out.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from odradek.broker.config import BrokerConfig, ConfigError

    _setup_logging(log_level)
    try:
        config = BrokerConfig.load(config_path, overrides)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    from odradek.broker.server import run_broker

    if loop_impl == "uvloop":
        import uvloop

        runner = uvloop.run
    else:
        runner = asyncio.run
    sys.exit(runner(run_broker(config)))


@main.command("dump-log")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--print-data-log", is_flag=True, help="Print every record too.")
def dump_log_cmd(paths: tuple[str, ...], print_data_log: bool) -> None:
    """Decode segment (.log), index (.index) and time index (.timeindex) files."""
    from odradek.cli.dump_log import dump

    for path in paths:
        try:
            for line in dump(path, print_data_log):
                click.echo(line)
        except (ValueError, OSError) as e:
            raise click.ClickException(str(e)) from None


@main.command("config")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="server.properties file.")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE", help="Set a broker setting (repeatable).")
def config_cmd(config_path: str | None, overrides: tuple[str, ...]) -> None:
    """Print the effective broker configuration and where each value came from."""
    from rich.console import Console
    from rich.table import Table

    from odradek.broker.config import BrokerConfig, ConfigError

    try:
        cfg = BrokerConfig.load(config_path, overrides)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    table = Table("setting", "value", "source")
    for name, value in cfg.items():
        shown = (
            ",".join(value)
            if isinstance(value, list)
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )
        table.add_row(name, shown, cfg.sources.get(name, "default"))
    Console().print(table)


main.add_command(__import__("odradek.cli.pipeline", fromlist=["pipeline"]).pipeline)  # odradek pipeline ...


if __name__ == "__main__":
    main()
