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


_LOSS = (
    "lost",
    "consumed-then-lost",
    "leader-without-acked",
    "isr-without-acked",
)


def _power_loss(a: Anomaly, r: Result) -> bool:
    return a.kind in _LOSS and any(f.kind == "power" for f in r.schedule)


KNOWN: tuple[KnownBug, ...] = (
    KnownBug(
        "restarted-replica-before-its-session-ends",
        "a broker back from a power cut before its old ZooKeeper session expired is admitted to an "
        "ISR with its shorter log: an ISR expansion its leader proposed before the cut is applied "
        "after it (ci 26: the broker epoch it carries is still the registered one), or a new "
        "controller elects it (ci 162, with ZooKeeper slow); acknowledged records are lost. The "
        "restarted-leader fix (recorded ISR broker epochs) covers a broker that registered again; "
        "these windows come before that (Kafka's ZooKeeper mode has them too; KRaft closes them "
        "with broker fencing and KIP-966's unclean-shutdown detection)",
        "not assigned",
        _power_loss,
    ),
)


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
