"""One test per bug the simulator found, each a scripted schedule that shows it (the seeds of the
batch that found it are named). Bugs being fixed on other branches are xfail(strict): when the
fix merges, the test passes, strict xfail fails, and the mark goes (with the bug's entry in
odradek/testing/sim/known.py)."""

from __future__ import annotations

import dataclasses

from odradek.testing.sim.faults import Fault
from odradek.testing.sim.known import explain
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import SimOptions, run_seed
from odradek.testing.sim.workload import WorkloadSpec

CI = PROFILES["ci"]


def _anomalies(opts: SimOptions, plan: list[Fault], seeds: list[int]) -> list[str]:
    found = []
    for seed in seeds:
        r = run_seed(seed, opts, faults=plan)
        found += [f"seed {seed}: {a}" for a in r.anomalies]
    return found


# ----------------------------------------------------------------- audit §1
def test_audit1_a_follower_with_its_clock_two_hours_behind_keeps_replicating():
    """Seed 63 (ci): a follower whose clock is 2 h behind finds every batch "2 h in the future"
    (log.message.timestamp.after.max.ms=1 h), fails its whole fetch, and leaves every ISR."""
    assert _anomalies(CI, [Fault(2.0, "clock-step", (2,), arg=-7200)], [1]) == []


def test_audit1_a_follower_copies_batches_larger_than_a_lowered_max_message_bytes():
    """A follower down while max.message.bytes is lowered under the size of batches already written
    cannot copy them when it returns, and stays out of the ISR."""
    plan = [Fault(2.0, "kill", (1,), duration=8.0), Fault(4.0, "config", arg=("max.message.bytes", "70"))]
    assert _anomalies(CI, plan, [1]) == []


def test_audit1_a_follower_copies_keyless_records_of_a_topic_turned_compacted():
    """Seeds 31, 111, 156 (ci): cleanup.policy=compact while a follower is down; back, it
    refuses the records without keys written before, and never returns to the ISR."""
    plan = [Fault(2.0, "kill", (1,), duration=8.0), Fault(4.0, "config", arg=("cleanup.policy", "compact"))]
    assert _anomalies(CI, plan, [1]) == []


# ----------------------------------------------------------------- audit §4
def test_audit4_end_offsets_never_go_backwards_across_leader_changes():
    """Seeds 58, 61, 141, 213, 256 (ci): right after a leader change the new leader answers
    ListOffsets(latest) with its high watermark, which may lag what the old leader answered."""
    rotations = [Fault(float(t), "reassign", partition=0, arg="rotate") for t in range(2, 14)]
    fast_poller = dataclasses.replace(CI, workload=dataclasses.replace(CI.workload, poll_interval=0.05))
    found = _anomalies(fast_poller, rotations, list(range(1, 7)))
    assert [a for a in found if "end-offset-backwards" in a] == []


# ----------------------------------------------------------------- issue 25 point 1: clean answers
def test_a_deposed_controller_answers_a_reassignment_with_an_error_code():
    """Seed 176 (ci), 1007, 1116 (full): the controller, cut from ZooKeeper past its session, handles an
    AlterPartitionReassignments; its write is fenced by the new controller's epoch and
    `Deposed` escapes the handler: the admin's connection is closed with an internal error
    instead of an answer with NOT_CONTROLLER."""
    plan = [
        Fault(2.0, "zk-cut", target="controller", arg="both", duration=8.0),
        Fault(9.0, "reassign", partition=0, arg="rotate"),
    ]
    found = _anomalies(CI, plan, [1, 2, 3, 4, 5, 6, 7, 8])
    assert [a for a in found if "internal-error" in a] == []


# ----------------------------------------------------------------- the producer (fixed: producer-retry)
def test_idempotent_producer_never_duplicates_a_batch_retried_across_a_leader_change():
    """Seed 106 (ci), 1106 (full): the oldest in-flight batch of a partition times out against a paused
    leader and was retried there (stale metadata) while the later batches went to the new leader
    and were acknowledged; the late retry, now older than the broker's window of five batches,
    got OUT_OF_ORDER_SEQUENCE_NUMBER, and the epoch bump sent it again: it was written twice,
    after records sent later. As Java's producer, a partition's retries now go one at a time in
    sequence order (client/producer/sequences.py)."""
    plan = [Fault(1.93, "kill", (2,), duration=10.0), Fault(3.71, "pause", (3,), duration=18.9)]
    found = _anomalies(CI, plan, [1, 3, 6, 92])
    assert [a for a in found if "duplicate" in a or "reordered" in a] == []


# ----------------------------------------------------------------- the simulated network (fixed: txn-hang)
def test_markers_reach_a_leader_back_from_a_power_cut_over_the_connection_it_forgot():
    """Seeds 9, 125, 291 (ci): the transaction coordinator's `txn-markers` connection to b1 was
    opened before b1 lost power; b1 restarts on the same address and leads again (here by a
    preferred election), and the next WriteTxnMarkers goes out on the old connection. A real
    host back from a power cut answers a segment of a connection it no longer knows with RST,
    so the coordinator reconnects and retries at once (Kafka's NetworkClient sees the
    disconnect, TransactionMarkerRequestCompletionHandler re-enqueues the markers); the
    simulated host dropped it silently, the request waited out request.timeout.ms (30 s) and
    the run ended with the transaction committed but its partition still open."""
    plan = [Fault(5.0, "power", (1,), duration=2.0), Fault(12.0, "elect")]
    found = _anomalies(CI, plan, [3, 4, 7])
    assert found == []


# ----------------------------------------------------------------- the controller (fixed: restarted-leader)
def test_a_leader_back_from_a_power_cut_does_not_lead_with_its_shorter_log():
    """Seed 160 (ci), 1096, 1125 (full): the leader of p0 loses power (its unflushed log is gone) and comes
    back while the controller is cut from ZooKeeper, so the controller sees it only as
    restarted (a new registration), never as gone. The controller kept a restarted broker in
    the ISR and elected it again as the first replica in sync, and the broker itself led the
    state it found at its old leader epoch: the followers truncated to its empty log and every
    acknowledged record of p0 was lost. Now the state records the broker epoch each ISR member
    was admitted with: the broker does not lead a state given to its previous registration, and
    the controller (this one, or a new one that never saw the restart) fails it first, as
    Kafka's controller does a bounced broker (out of the ISR, another leader)."""
    plan = [
        Fault(2.0, "power", partition=0, target="leader", duration=1.0),
        Fault(7.5, "zk-cut", target="controller", arg="both", duration=2.5),
    ]
    found = _anomalies(CI, plan, [3, 4, 5, 6])
    assert [a for a in found if a.split(": ", 1)[1].startswith("lost")] == []


# ----------------------------------------------------------------- storage (fixed: power-gap)
def test_a_power_cut_between_a_roll_and_its_flush_leaves_no_hole_in_the_log():
    """Seeds 410, 554, 574, 585 (ci, issue 25): a broker loses power a few ms after a roll, before
    the flush the roll asked for (seed 410: t-0 on b1 rolls to 24 at 6.364 s, power cut at
    6.412 s). The rolled segment (12.log) lost its bytes, the new one's empty file survived,
    and recovery took the log end to be 24: a hole over 12-23, the replica looked caught up and
    diverged from its leader (or lost acknowledged records). Recovery now ends the log at a
    segment above the recovery point that ends before the next one's base offset."""
    found, ends = [], 0
    for seed in (410, 554, 574, 585):
        r = run_seed(seed, CI)
        found += [f"seed {seed}: {a}" for a in r.anomalies]
        ends += sum(n for t, n in r.templates.items() if "the log ends there" in t)
    assert found == []
    assert ends > 0  # the hole was there, and recovery ended the log at it


# ----------------------------------------------------------------- the controller (fixed: session-window)
# Seed 26's faults: b2 and b3 cut one way (b3 leaves the ISRs b2 leads), then b2 (the controller,
# leading) paused and b1 (its only in-sync follower) losing power at once; both back together.
SEED_26 = [
    Fault(1.81, "oneway", (2, 3), duration=12.873),
    Fault(3.485, "leader-kill", partition=2, target="leader", duration=1.23),
    Fault(6.03, "clock-step", (2,), arg=7200),
    Fault(10.401, "pause", (2,), duration=16.409),
    Fault(10.403, "power", (1,), duration=5.644),
]


def test_a_replica_back_from_a_power_cut_before_its_session_ends_is_not_admitted_with_its_shorter_log():
    """Seeds 26 and 162 (ci): a broker back from a power cut while its previous ZooKeeper session
    still stood counted as live and in sync with the log the cut left. Seed 26: its leader,
    paused across the cut, proposed an ISR expansion keeping it, and the controller applied it
    (the broker epoch named was the registration still there). Seed 162: no controller acted
    while b3 lost power and b1 and b2 were killed; the next one found all three restarted and
    elected b3, first in the assignment, with its shorter log. Now a broker starting ends its
    previous run's registration first and registers once the controller has fenced that
    epoch, every controller write checks that its ISR members are still registered, and
    among restarted in-sync replicas one whose host kept its page cache leads. Seed 26's
    faults under other workloads (seeds 1, 2, 3, 5, 8 lost records before the fix)."""
    bad = ("lost", "isr-without-acked", "leader-without-acked")
    lost = []
    for seed in (26, 162):
        r = run_seed(seed, CI)
        lost += [f"{seed}: {a}" for a in r.anomalies if a.kind in bad]
    lost += [a for a in _anomalies(CI, SEED_26, [1, 2, 3, 5, 8]) if a.split(": ", 1)[1].startswith(bad)]
    assert lost == []


def test_every_known_bug_has_a_regression_test():
    from odradek.testing.sim.known import KNOWN

    shown: dict[str, str] = {}  # a known bug's id -> the prefix of its regression test's name
    assert {b.id for b in KNOWN} == set(shown)
    names = [n for n in globals() if n.startswith("test_")]
    for prefix in shown.values():
        assert any(n.startswith(prefix) for n in names)


def test_known_bugs_explain_what_they_claim():
    """The signatures are honest: a clean run matches none."""
    clean = run_seed(5, CI, faults=[])
    assert clean.ok and explain(clean) == ([], [])


def test_a_workload_without_faults_is_clean():
    opts = dataclasses.replace(CI, workload=WorkloadSpec(rate=8.0, txn_interval=0.5, readers=(True, False)))
    r = run_seed(3, opts, faults=[])
    assert r.ok, r.report()
    assert r.stats["acked"] > 150 and r.stats["committed"] > 5 and r.stats["reads"] > 100
