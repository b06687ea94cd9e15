"""The unit tier: no sockets, no processes, no waiting on real time where a clock will do.

Every test here runs with network sockets (AF_INET, AF_INET6) and child processes refused: a
test that needs a broker belongs in tests/inprocess (a broker in this process) or in a process
tier (tests/interop, tests/cluster, ...; see tests/README.md). Socket pairs (AF_UNIX), which
asyncio's event loop uses for itself, are allowed.
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest


class NotInTheUnitTier(RuntimeError):
    pass


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise NotInTheUnitTier(f"{what} in a unit test: move the test to tests/inprocess or a process tier")

    return refuse


@pytest.fixture(autouse=True)
def _no_sockets_no_processes(monkeypatch):
    real_connect, real_bind = socket.socket.connect, socket.socket.bind

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(f"a network connection to {address!r}")()
        return real_connect(sock, address)

    def bind(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(f"a network listener on {address!r}")()
        return real_bind(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket.socket, "bind", bind)
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("a child process"))
    monkeypatch.setattr(os, "fork", _refuse("fork"))
