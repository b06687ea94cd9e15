"""The unit tier refuses what belongs to another tier (tests/unit/conftest.py): network sockets and
child processes fail at once, naming where the test should go; asyncio's own socket pair works."""

from __future__ import annotations

import asyncio
import socket
import subprocess

import pytest


def test_a_network_connection_is_refused():
    with pytest.raises(RuntimeError, match="tests/inprocess or a process tier"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)


def test_a_listener_is_refused():
    with socket.socket() as s, pytest.raises(RuntimeError, match="network listener"):
        s.bind(("127.0.0.1", 0))


def test_a_child_process_is_refused():
    with pytest.raises(RuntimeError, match="child process"):
        subprocess.run(["true"], check=True)


def test_an_event_loop_still_runs():
    async def main():
        await asyncio.sleep(0)
        return 42

    assert asyncio.run(main()) == 42
