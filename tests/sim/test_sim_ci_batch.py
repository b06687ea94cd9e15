"""The CI batch: several hundred seeds in parallel processes, nothing found but known bugs.

Seeds 1..ODRADEK_SIM_SEEDS (300 by default), the ci profile, one worker per core: about a
minute on this 2-core machine (`bench/sim/run.py` runs the long ones). Heavy on CPU: run it
under the machine's lock (`/work/wt/heavy .venv/bin/python -m pytest tests/sim -m sim_batch`).
"""

from __future__ import annotations

import os

import pytest

from odradek.testing.sim.batch import run_batch


@pytest.mark.sim_batch
@pytest.mark.serial  # both cores: alone in its tier, after the others (scripts/test.sh)
def test_a_ci_batch_of_seeds_finds_nothing_but_known_bugs():
    n = int(os.environ.get("ODRADEK_SIM_SEEDS", "300"))
    summary = run_batch(range(1, n + 1), profile="ci")
    print(summary.text())
    assert summary.seeds == n
    assert summary.unexplained == [], summary.text()
    assert sum(summary.faults.values()) >= n  # faults happened
    assert summary.acked > 50 * n  # and a workload ran through them
