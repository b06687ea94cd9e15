"""bench/broker/micro.py runs each of its steps to the end, for each kind of producer (tiny n)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

MICRO = Path(__file__).resolve().parents[3] / "bench" / "broker" / "micro.py"


def load_micro():
    spec = importlib.util.spec_from_file_location("bench_broker_micro", MICRO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("producer", ["plain", "idempotent", "transactional"])
def test_every_step_is_timed(producer):
    steps = asyncio.run(load_micro().main(20, producer))
    expected = [
        "produce: frame+parse",
        "fetch:   frame+parse",
        "produce: parse+handle+encode",
        "fetch:   parse+handle+encode",
    ]
    if producer != "transactional":  # its open transaction holds back what read_committed sees
        expected += ["fetch:   read_committed", "fetch:   read_committed, aborts"]
    assert list(steps) == expected
    assert all(us > 0 for us in steps.values()), steps
