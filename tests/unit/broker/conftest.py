"""Tests of the broker's middle in this process, without a broker: the registry, purgatory,
partition, replica manager and fetch sessions over real logs (tmp_path)."""

from __future__ import annotations

import pytest

from odradek.storage import LogConfig, LogManager


@pytest.fixture
def log_manager(tmp_path):
    m = LogManager([str(tmp_path / "logs")], LogConfig())
    m.load()
    yield m
    m.shutdown()
