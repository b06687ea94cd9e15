"""Seed 5173 of the long run (issue 25): `replica-divergence` and `consumed-then-lost`, faults
config (cleanup.policy=compact), clock-step (b3 -7200 s), partition.

What happened: the topic turned compacted at 2.6 s; b3's wall clock stepped back two hours at
5.0 s. Its log manager had set the cleaner's next pass (and retention, the checkpoints) at a
wall-clock time, now two hours away, so b1 and b2 compacted t at 15.1 s and b3 never did. A
compaction pass removes the records of aborted transactions (two transactions here, aborted
after an abortable InvalidTimestampError, whose records were written), so b3, in the ISR, held
offsets 18 and 28 of p0 and 31 of p2 where its leaders had holes: `replica-divergence`. The
fix (storage/manager.py): the background duties fall due on the monotonic clock, as Kafka's
scheduler runs them; unit tests in tests/unit/storage/test_background_schedule.py.

The `consumed-then-lost` were a read_uncommitted reader's reads of those aborted records,
removed since by the cleaner on every replica, as Kafka's cleaner removes them (LogCleaner's
CleanedTransactionMetadata): not a loss. The checker now tells such a hole from a truncation
(`checker.removed_with_its_abort`), tested here on made-up histories.
"""

from __future__ import annotations

import dataclasses
import logging

from odradek.testing.sim.checker import Final, check
from odradek.testing.sim.faults import Fault
from odradek.testing.sim.history import History
from odradek.testing.sim.logs import ABORT, COMMIT, LogRecord
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed
from odradek.testing.sim.runner import FaultRunner
from odradek.testing.sim.trace import Trace

CI = PROFILES["ci"]
# the cleaner every 4 s, so every broker passes a few times within the run's 15 s
OPTS = dataclasses.replace(CI, overrides=(("log.cleaner.backoff.ms", "4000"),))


async def step_back_then_look(r: FaultRunner, f: Fault) -> None:
    """b3's wall clock steps back two hours before any cleaner pass; 10 s later, each broker's
    cleaner checkpoint of each partition of the topic (0: never cleaned)."""
    r.c.host(3).step_clock(-7200)
    await r.until(lambda: False, 10.0)
    r.notes["cleaned"] = {
        b: {p: lg.cleaner_checkpoint for p in range(3) if (lg := r.c.log_of(b, r.topic, p)) is not None}
        for b in (1, 2, 3)
    }


def test_a_broker_whose_clock_stepped_back_compacts_its_replicas_as_the_others_do():
    plan = [Fault(2.0, "config", arg=("cleanup.policy", "compact")), Fault(3.0, "script", arg=step_back_then_look)]
    for seed in (1, 2):
        r = run_seed(seed, OPTS, faults=plan, log_level=logging.INFO)
        cleaned = r.notes.get("cleaned")
        assert cleaned is not None and set(cleaned) == {1, 2, 3}, (seed, r.notes)
        assert all(len(by_partition) == 3 for by_partition in cleaned.values()), (seed, cleaned)
        # b3 cleans each partition the others cleaned (a partition the workload left too little
        # dirty data in is cleaned by none), and the run cleaned something
        by_others = {p for b in (1, 2) for p, c in cleaned[b].items() if c > 0}
        assert by_others, (seed, cleaned)
        assert {p for p, c in cleaned[3].items() if c > 0} == by_others, (seed, cleaned)
        assert r.anomalies == [], (seed, [str(a) for a in r.anomalies])


def test_seed_5173():
    r = run_seed(5173, CI)
    assert r.anomalies == [], [str(a) for a in r.anomalies]


# ----------------------------------------------------------------- the checker, on made-up histories
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _history_and_log(outcome_marker: int, hole: bool) -> tuple[History, Final]:
    """p0: two plain records; a transaction's record at offset 2 (a hole when `hole`), read by
    a read_uncommitted reader and a read_committed one; a plain record at 3; the transaction's
    marker (ABORT or COMMIT) at 4; everything acknowledged."""
    clock = Clock()
    h = History(Trace(), clock)
    for o in (0, 1, 3):
        h.done(h.sent("producer-1", o, 0, f"producer-1:{o}"), o, None)
    txn = h.begin("txn-1", 0)
    h.done(h.sent("txn-1", 0, 0, "txn-1:0:0", txn), 2, None)
    h.outcome(txn, "unknown")  # the client could not tell (its successor ended it)
    clock.t = 1.0
    h.read("ru-reader-1", False, 0, 2, "txn-1:0:0")
    records = [LogRecord(0, "producer-1:0", 1, False), LogRecord(1, "producer-1:1", 1, False)]
    if not hole:
        records.append(LogRecord(2, "txn-1:0:0", 7, True))
    records += [LogRecord(3, "producer-1:3", 1, False), LogRecord(4, None, 7, True, outcome_marker)]
    # the transactional producer's id from another of its records, committed, on another partition
    h.done(h.sent("txn-1", 1, 1, "txn-1:1:0", h.begin("txn-1", 1)), 0, None)
    h.txns[-1].outcome = "committed"
    logs = {0: records, 1: [LogRecord(0, "txn-1:1:0", 7, True), LogRecord(1, None, 7, True, COMMIT)]}
    return h, Final(end=10.0, logs=logs, high_watermarks={0: 5, 1: 2})


def _kinds(h: History, final: Final) -> list[str]:
    return sorted(a.kind for a in check(h, final))


def test_an_aborted_record_compacted_away_after_it_was_read_is_no_loss():
    h, final = _history_and_log(ABORT, hole=True)
    assert _kinds(h, final) == []


def test_a_hole_where_a_committed_transaction_had_a_record_read_is_still_reported():
    h, final = _history_and_log(COMMIT, hole=True)
    assert _kinds(h, final) == ["consumed-then-lost"]


def test_an_offset_holding_another_record_is_still_consumed_then_lost():
    h, final = _history_and_log(ABORT, hole=False)
    final.logs[0][2] = LogRecord(2, "producer-2:0", 3, False)  # truncated, then written again
    h.done(h.sent("producer-2", 0, 0, "producer-2:0"), 2, None)
    assert _kinds(h, final) == ["consumed-then-lost"]


def test_a_read_committed_reader_that_read_a_record_compacted_away_as_aborted_read_aborted_data():
    h, final = _history_and_log(ABORT, hole=True)
    h.read("rc-reader-1", True, 0, 2, "txn-1:0:0")
    found = check(h, final)
    assert [a.kind for a in found] == ["aborted-visible"]
    assert "compacted away" in found[0].detail
