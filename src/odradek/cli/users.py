"""`odradek users add|list|delete`: SCRAM users (kafka-configs.sh --entity-type users
--add-config 'SCRAM-SHA-512=[password=...]'), over the admin client.

    odradek users add alice [--mechanism SCRAM-SHA-512] [--iterations 4096] [--password PW]
    odradek users list [alice ...]
    odradek users delete alice [--mechanism SCRAM-SHA-256]

The password is asked for (not echoed) unless given, and salted by the client: the broker
receives the salted password only. Each mechanism goes in a request of its own: Kafka 3.9's
ZooKeeper mode takes a user's two mechanisms in one request, a KRaft controller (Kafka 3.5+,
ScramControlManager) refuses a user named twice in one request with DUPLICATE_RESOURCE.
`delete` without --mechanism deletes every credential of the user. `--command-config` gives the
client settings for a secured listener.
"""

from __future__ import annotations

import click

from odradek.cli.client_config import admin_client, command_config_option
from odradek.cli.topics import bootstrap_option, run

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
mechanism_choice = click.Choice(MECHANISMS, case_sensitive=False)


@click.group()
def users() -> None:
    """Add, list and delete SCRAM users' credentials."""


@users.command("add")
@bootstrap_option
@command_config_option
@click.argument("name")
@click.option(
    "--mechanism",
    "mechanisms",
    multiple=True,
    type=mechanism_choice,
    help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (repeatable; default SCRAM-SHA-512).",
)
@click.option("--iterations", default=4096, show_default=True, type=click.IntRange(4096, 16384))
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True, help="Asked for when absent.")
def add_cmd(bootstrap, command_config, name, mechanisms, iterations, password):
    """Add or replace NAME's credential for each mechanism."""
    from odradek.client.aio import UserScramCredentialUpsertion

    ups = [UserScramCredentialUpsertion(name, m.upper(), password, iterations) for m in mechanisms or MECHANISMS[1:]]

    async def go():
        async with admin_client(bootstrap, command_config) as a:
            for u in ups:  # one request each: a KRaft controller refuses one user twice (DUPLICATE_RESOURCE)
                await a.alter_user_scram_credentials([u])

    run(go())
    click.echo(f"Added {', '.join(u.mechanism for u in ups)} credentials of user {name}.")


@users.command("list")
@bootstrap_option
@command_config_option
@click.argument("names", nargs=-1)
def list_cmd(bootstrap, command_config, names):
    """Users with their credentials' mechanisms and iterations (every user, or NAMES)."""

    async def go():
        async with admin_client(bootstrap, command_config) as a:
            return await a.describe_user_scram_credentials(list(names) or None)

    for user, infos in sorted(run(go()).items()):
        creds = ",".join(f"{i.mechanism}=iterations={i.iterations}" for i in sorted(infos, key=lambda i: i.mechanism))
        click.echo(f"SCRAM credential configs for user-principal '{user}' are {creds}")


@users.command("delete")
@bootstrap_option
@command_config_option
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True, type=mechanism_choice, help="Default: every one NAME has.")
def delete_cmd(bootstrap, command_config, name, mechanisms):
    """Delete NAME's credentials."""
    from odradek.client.aio import UserScramCredentialDeletion

    async def go():
        async with admin_client(bootstrap, command_config) as a:
            ms = [m.upper() for m in mechanisms]
            if not ms:
                ms = [i.mechanism for i in (await a.describe_user_scram_credentials([name]))[name]]
            for m in ms:  # one request each, as in add
                await a.alter_user_scram_credentials([UserScramCredentialDeletion(name, m)])
            return ms

    click.echo(f"Deleted {', '.join(run(go()))} credentials of user {name}.")
