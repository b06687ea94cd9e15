"""The `odradek` command line (needs the `broker` extra: click, rich, uvloop, prometheus-client, kazoo)."""

from __future__ import annotations

_BROKER_EXTRA = {"click", "rich", "uvloop", "prometheus_client", "kazoo"}


def run() -> None:
    """The `odradek` console script: the command line, or a plain message naming the missing
    extra when odradek was installed as a client only (`pip install odradek`)."""
    try:
        from odradek.cli.main import main
    except ModuleNotFoundError as e:
        if e.name in _BROKER_EXTRA:
            raise SystemExit(
                f"odradek: the command line needs the broker extra ({e.name} is not installed): "
                "pip install 'odradek[broker]'"
            ) from None
        raise
    main()
