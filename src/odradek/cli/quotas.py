"""`odradek quotas ...`: describe and alter client quotas (the quota half of kafka-configs.sh:
`--entity-type users|clients`), over `odradek.client.aio` (AlterClientQuotas, DescribeClientQuotas).

    odradek quotas alter --client-id app --add-config producer_byte_rate=1048576
    odradek quotas alter --user-default --add-config request_percentage=200
    odradek quotas alter --user alice --client-id app --delete-config producer_byte_rate
    odradek quotas describe [--user alice | --user-default] [--client-id app | --client-default]

Output as kafka-configs prints it ("Quota configs for user-principal 'alice' are k=v, ...").
"""

from __future__ import annotations

import click

from odradek.cli.client_config import command_config_option, load_client_config
from odradek.cli.topics import bootstrap_option, parse_kv, run


def _entity(user: str | None, user_default: bool, client: str | None, client_default: bool) -> dict:
    if user is not None and user_default:
        raise click.UsageError("give --user or --user-default, not both")
    if client is not None and client_default:
        raise click.UsageError("give --client-id or --client-default, not both")
    entity: dict[str, str | None] = {}
    if user is not None or user_default:
        entity["user"] = user
    if client is not None or client_default:
        entity["client-id"] = client
    return entity


def entity_words(entity: tuple[tuple[str, str | None], ...]) -> str:
    """kafka-configs' words for an entity: "user-principal 'alice', the default client-id"."""
    parts = dict(entity)
    names = []
    if "user" in parts:
        names.append("the default user-principal" if parts["user"] is None else f"user-principal '{parts['user']}'")
    if "client-id" in parts:
        c = parts["client-id"]
        names.append("the default client-id" if c is None else f"client-id '{c}'")
    return ", ".join(names)


def describe_line(entity: tuple[tuple[str, str | None], ...], values: dict[str, float]) -> str:
    """kafka-configs' line for one entity."""
    settings = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
    return f"Quota configs for {entity_words(entity)} are {settings}"


entity_options = [
    click.option("--user", default=None, help="A user (principal name)."),
    click.option("--user-default", is_flag=True, help="The default user (<default>)."),
    click.option("--client-id", "client", default=None, help="A client id."),
    click.option("--client-default", is_flag=True, help="The default client id (<default>)."),
    command_config_option,
    bootstrap_option,
]


def _with_entity_options(f):
    for option in reversed(entity_options):
        f = option(f)
    return f


@click.group()
def quotas() -> None:
    """Client quotas: producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate."""


@quotas.command("describe")
@_with_entity_options
def describe_cmd(user, user_default, client, client_default, command_config, bootstrap) -> None:
    """Quotas of the named entity, or of every entity matching what is given (all when nothing)."""
    from odradek.client.aio import AIOAdmin

    wanted = _entity(user, user_default, client, client_default)

    async def go():
        async with AIOAdmin({"bootstrap.servers": bootstrap, **load_client_config(command_config)}) as admin:
            return await admin.describe_client_quotas(wanted, strict=bool(wanted))

    for entity, values in sorted(run(go()).items(), key=lambda kv: str(kv[0])):
        click.echo(describe_line(entity, values))


@quotas.command("alter")
@_with_entity_options
@click.option("--add-config", "add", multiple=True, help="key=value[,key=value] to set.")
@click.option("--delete-config", "delete", multiple=True, help="key[,key] to remove.")
def alter_cmd(user, user_default, client, client_default, command_config, bootstrap, add, delete) -> None:
    """Set or remove quotas of one entity."""
    from odradek.client.aio import AIOAdmin

    entity = _entity(user, user_default, client, client_default)
    if not entity:
        raise click.UsageError("name an entity: --user/--user-default and/or --client-id/--client-default")
    ops: dict[str, float | None] = {}
    for k, v in parse_kv(add, "--add-config").items():
        try:
            ops[k] = float(v)
        except ValueError:
            raise click.BadParameter(f"{k}: {v!r} is not a number", param_hint="--add-config") from None
    for item in delete:
        for k in item.split(","):
            ops[k.strip()] = None
    if not ops:
        raise click.UsageError("nothing to change: give --add-config and/or --delete-config")

    async def go():
        async with AIOAdmin({"bootstrap.servers": bootstrap, **load_client_config(command_config)}) as admin:
            await admin.alter_client_quotas([(entity, ops)])

    run(go())
    click.echo(f"Completed updating quotas of {entity_words(tuple(entity.items()))}.")
