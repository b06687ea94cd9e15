"""Tests of the broker's middle in this process: the registry, purgatory, partition,
replica manager, fetch sessions, and a whole broker without sockets
(tests/support/inprocess.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.inprocess import InProcessBroker

from odradek.storage import LogConfig, LogManager


@pytest.fixture
def log_manager(tmp_path):
    m = LogManager([str(tmp_path / "logs")], LogConfig())
    m.load()
    yield m
    m.shutdown()


@pytest.fixture
def inprocess(tmp_path) -> Callable[..., InProcessBroker]:
    def make(**overrides: str) -> InProcessBroker:
        return InProcessBroker(tmp_path / "data", overrides)

    return make
