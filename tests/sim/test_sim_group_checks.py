"""The consumer group's checks (checker.check_group) on made-up histories: each anomaly shows
when, and only when, what it names happened."""

from __future__ import annotations

from odradek.testing.sim.checker import Final, check_group
from odradek.testing.sim.history import History
from odradek.testing.sim.logs import LogRecord, fates
from odradek.testing.sim.trace import Trace


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def setup(n: int = 6) -> tuple[History, Clock, Final, dict]:
    clock = Clock()
    h = History(Trace(), clock)
    # p0: n plain records, then a transaction of two records that aborted (offsets n, n+1, marker n+2)
    records = [LogRecord(o, f"producer-1:{o}", 1, False) for o in range(n)]
    records += [LogRecord(n, "txn-1:0:0", 2, True), LogRecord(n + 1, "txn-1:0:1", 2, True)]
    records.append(LogRecord(n + 2, None, 2, True, marker=0))
    final = Final(end=100.0, logs={0: records})
    fate = {(0, o): f for o, f in fates(records).items()}
    return h, clock, final, fate


def at(clock: Clock, t: float) -> None:
    clock.t = t


def kinds(h: History, final: Final, fate: dict) -> list[str]:
    return sorted(a.kind for a in check_group(h, final, fate))


def test_a_group_that_consumed_and_committed_in_order_is_clean():
    h, clock, final, fate = setup()
    for o in range(6):
        at(clock, o)
        h.consumed("member-1.1", 0, o, f"producer-1:{o}")
    at(clock, 6.5)
    c = h.commit_sent("member-1.1", {0: 9})  # past the aborted transaction and its marker: fine
    at(clock, 7)
    h.commit_done(c, None)
    at(clock, 8)
    h.committed_answer("offsets-poller", 7.5, {0: 9})
    assert kinds(h, final, fate) == []


def test_a_commit_past_a_record_nobody_consumed_is_reported():
    h, clock, final, fate = setup()
    for o in (0, 1, 2):
        at(clock, o)
        h.consumed("member-1.1", 0, o, f"producer-1:{o}")
    at(clock, 3)
    c = h.commit_sent("member-1.1", {0: 5})
    at(clock, 4)
    h.commit_done(c, None)
    found = check_group(h, final, fate)
    assert [a.kind for a in found] == ["commit-beyond-consumed"]
    assert "offset 3" in found[0].detail
    # a failed commit claims nothing
    h2, clock2, final2, fate2 = setup()
    c = h2.commit_sent("member-1.1", {0: 5})
    h2.commit_done(c, TimeoutError())
    assert kinds(h2, final2, fate2) == []


def test_an_offset_answered_lower_than_one_acknowledged_before_is_backwards():
    h, clock, final, fate = setup()
    for o in range(6):
        at(clock, o)
        h.consumed("member-1.1", 0, o, f"producer-1:{o}")
    at(clock, 6)
    c = h.commit_sent("member-1.1", {0: 6})
    at(clock, 7)
    h.commit_done(c, None)
    at(clock, 9)
    h.committed_answer("offsets-poller", 6.5, {0: 4})  # asked before the ack came: no claim on it
    assert kinds(h, final, fate) == []
    at(clock, 11)
    h.committed_answer("offsets-poller", 10, {0: 4})  # asked after: the commit went backwards
    found = check_group(h, final, fate)
    assert [a.kind for a in found] == ["commit-backwards"]
    assert "after member-1.1's commit said 6" in found[0].detail


def test_a_record_below_what_the_group_consumed_that_no_member_was_given_is_skipped():
    h, clock, final, fate = setup()
    for o in (0, 1, 3, 4):
        h.consumed("member-2.1", 0, o, f"producer-1:{o}")
    found = check_group(h, final, fate)
    assert [a.kind for a in found] == ["group-skipped"]
    assert "[2]" in found[0].detail
