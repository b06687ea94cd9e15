"""The client settings of the admin commands for a secured listener: `--command-config FILE`, a
Java .properties file of client settings (security.protocol, sasl.mechanism, sasl.jaas.config,
ssl.truststore.location, ...), as Kafka's tools take it. A setting odradek's client does not
know is refused (the client's config check), not ignored."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

command_config_option = click.option(
    "--command-config",
    "command_config",
    type=click.Path(exists=True, dir_okay=False),
    envvar="ODRADEK_COMMAND_CONFIG",
    help="A .properties file of client settings (security.protocol, sasl.*, ssl.*) for a secured listener.",
)


def config_file_option(kafka_name: str):
    """`--command-config` under the name Kafka's console tool gives it too (`--producer.config`,
    `--consumer.config`)."""
    return click.option(
        kafka_name,
        "--command-config",
        "command_config",
        type=click.Path(exists=True, dir_okay=False),
        envvar="ODRADEK_COMMAND_CONFIG",
        help="A .properties file of client settings (security.protocol, sasl.*, ssl.*) for a secured listener.",
    )


@contextmanager
def client_errors() -> Iterator[None]:
    """A client error (a refused login, an unknown setting in the file) as a click error: one line
    naming it, exit code 1, no traceback."""
    from odradek.client import errors as E

    try:
        yield
    except E.KafkaError as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None
    except (OSError, ValueError) as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from None


def load_client_config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    from odradek.broker.config import parse_properties

    return parse_properties(Path(path).read_text())


def admin_client(bootstrap: str, command_config: str | None, timeout_ms: int = 30000):
    """An AIOAdmin for `bootstrap` with the file's settings (not started)."""
    from odradek.client.aio import AIOAdmin

    config = load_client_config(command_config)
    config.setdefault("request.timeout.ms", timeout_ms)
    config.setdefault("default.api.timeout.ms", timeout_ms)
    config["bootstrap.servers"] = bootstrap
    return AIOAdmin(config)
