"""Bugs the simulator finds that are known and being fixed elsewhere: each anomaly of a run is
matched against their signatures, so a batch tells a new bug from a known one.

When a fix merges, its entry goes: the CI batch (tests/sim/test_ci_batch.py) then fails on
any seed still showing it, and the bug's regression test (tests/sim/test_regressions.py, now
xfail strict) passes and must be turned on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.testing.sim.checker import Anomaly
    from odradek.testing.sim.run import Result


@dataclass(frozen=True)
class KnownBug:
    id: str
    title: str
    fixed_on: str  # the branch fixing it
    matches: Callable[[Anomaly, Result], bool]


def _logged(r: Result, pattern: re.Pattern[str]) -> bool:
    return any(pattern.search(t) for t in r.templates)


# None known now. An entry names the bug, the branch fixing it and a signature as narrow as the
# bug, e.g. `lambda a, r: a.kind == "replica-divergence" and "record #0" in a.detail`; a loss
# beyond Kafka's guarantee is no bug and never reaches here (guarantee.py reports it apart).
KNOWN: tuple[KnownBug, ...] = ()


def explain(result: Result) -> tuple[list[str], list[Anomaly]]:
    """(the known bugs this run shows, the anomalies none of them explains)."""
    known: list[str] = []
    unexplained: list[Anomaly] = []
    for a in result.anomalies:
        bug = next((b for b in KNOWN if b.matches(a, result)), None)
        if bug is None:
            unexplained.append(a)
        elif bug.id not in known:
            known.append(bug.id)
    return known, unexplained
