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


_FOLLOWER_REVALIDATES = re.compile(
    r"replica fetcher for broker \d+ failed.*(InvalidRecordError|InvalidTimestampError|RecordTooLargeError)"
)


def _follower_revalidates(a: Anomaly, r: Result) -> bool:
    return a.kind == "unavailable" and any(_FOLLOWER_REVALIDATES.search(line) for line in r.logs)


def _end_offset_backwards(a: Anomaly, r: Result) -> bool:
    return a.kind == "end-offset-backwards"


KNOWN: tuple[KnownBug, ...] = (
    KnownBug(
        "audit-1",
        "followers re-validate replicated batches (size, timestamps, keys) and one failing partition "
        "stalls the whole fetcher: replicas never return to the ISR",
        "replication-core",
        _follower_revalidates,
    ),
    KnownBug(
        "audit-4",
        "ListOffsets(latest) answers a new leader's high watermark below its epoch's start (KIP-207): "
        "end offsets go backwards after a leader change",
        "replication-core",
        _end_offset_backwards,
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
