"""The in-process tier: a whole broker (tests/support/inprocess.py) or a scripted peer in this
process, on one event loop; sockets on 127.0.0.1 only, no child processes.

* ``inprocess``  ``inprocess(**overrides)`` -> an InProcessBroker on tmp_path / "data" (not started).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.inprocess import InProcessBroker


@pytest.fixture
def inprocess(tmp_path) -> Callable[..., InProcessBroker]:
    def make(**overrides: str) -> InProcessBroker:
        return InProcessBroker(tmp_path / "data", overrides)

    return make
