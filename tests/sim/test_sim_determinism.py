"""Same seed, same run, byte for byte in the trace: in one process, and in fresh processes whatever
their hash seed (the command line re-executes itself with PYTHONHASHSEED=0)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from odradek.testing.sim.faults import busy_schedule
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed

BUSY = busy_schedule()  # faults that reorder much


def test_the_same_seed_twice_gives_the_same_trace():
    a = run_seed(11, PROFILES["ci"], faults=BUSY)
    b = run_seed(11, PROFILES["ci"], faults=BUSY)
    assert a.stats["acked"] > 50 and a.stats["applied"]  # a run with something in it
    assert a.digest == b.digest
    assert a.stats == b.stats


def test_another_seed_gives_another_trace():
    a = run_seed(11, PROFILES["ci"], faults=BUSY)
    b = run_seed(12, PROFILES["ci"], faults=BUSY)
    assert a.digest != b.digest


def _digest_in_a_fresh_process(seed: int, hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    out = subprocess.run(
        [sys.executable, "-m", "odradek.testing.sim", "--seed", str(seed)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    m = re.search(r"digest ([0-9a-f]{12})", out)
    assert m, out
    return m.group(1)


def test_a_seed_replays_exactly_in_fresh_processes_whatever_their_hash_seed():
    assert _digest_in_a_fresh_process(7, "1") == _digest_in_a_fresh_process(7, "random")
