"""A module-scoped odradek broker for the CLI tests, and a CliRunner helper."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from support.broker import BrokerProcess, BrokerStartError


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("odradek-cli"), {"num.partitions": 1})
    try:
        b.start(timeout=30)
    except BrokerStartError as e:
        pytest.skip(f"odradek broker does not start: {e}")
    yield b
    b.stop()


@pytest.fixture
def odr(cli_broker):
    """odr("topics", "list") -> click Result, with --bootstrap-server filled in after the subcommand path."""
    from odradek.cli.main import main

    runner = CliRunner()

    def invoke(*args, input=None, ok=True, bootstrap=True):
        args = list(args)
        # options go after the (sub)command names: find where the names end
        names = 2 if args and args[0] in ("topics", "perf") else 1
        if bootstrap:
            args[names:names] = ["--bootstrap-server", cli_broker.bootstrap]
        res = runner.invoke(main, args, input=input, catch_exceptions=False)
        if ok:
            assert res.exit_code == 0, f"odradek {' '.join(args)} -> {res.exit_code}\n{res.output}"
        return res

    return invoke
