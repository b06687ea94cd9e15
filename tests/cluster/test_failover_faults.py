"""Failovers under load: nothing acknowledged lost, end offsets never going backwards.

Three brokers and a real ZooKeeper, a topic of replication factor 3 with min.insync.replicas=2,
idempotent acks=all producers (librdkafka and Java) and a reader throughout, and the history
checked at the end (tests/support/checker.py: lost, duplicated, reordered, phantom records, high
watermarks and ListOffsets answers going backwards). Faults (docs/cluster.md, "What survives
what"; notes: replication-audit §3, §4, §10):
- two quick successive failovers, the second before the new leader has written in its epoch;
- every broker killed at once, restarted in different orders;
- a partition reassignment whose leader is killed while the new replica copies the log;
- ListOffsets(latest) asked of every broker in a tight loop while leaders are killed.
Rounds per test: ODRADEK_FAULT_ROUNDS (3 in CI; bench/cluster/soak.sh runs more); Kafka's
cases ODRADEK_REFERENCE_FAULT_ROUNDS (1 in CI).
"""

from __future__ import annotations

import collections
import itertools
import os
import random
import time

import pytest
from support.checker import History
from support.fault_workload import (
    ROUNDS,
    ClusterFactory,
    Workload,
    create_topic,
    elect_preferred,
    list_latest,
    produce_one,
    reassign,
    reassignments_in_progress,
    rounds_of,
)

# serial, the whole module: failovers: a new leader, and acks resuming, within bounds a second
# cluster beside it broke (scripts/test.sh)
pytestmark = [pytest.mark.cluster, pytest.mark.serial]

TOPIC = "acked"


SEED = int(os.environ.get("ODRADEK_FAULT_SEED", "0")) or random.randrange(1 << 30)
#: partition p led by broker p+1 (its preferred leader), the others following in order
SPREAD = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


@pytest.fixture
def make_cluster(tmp_path):
    with ClusterFactory(tmp_path) as make:
        yield make


def leader_of(cluster, partition: int) -> int:  # noqa: ANN001
    return cluster.snapshot().topics[TOPIC].partitions[partition].leader


def whole(cluster, timeout: float = 30) -> None:  # noqa: ANN001
    cluster.wait(lambda s: all(len(p.isr) == 3 for p in s.topics[TOPIC].partitions), timeout, "the ISR whole again")


@pytest.mark.parametrize(
    "kind",
    [pytest.param("odradek"), pytest.param("kafka39", marks=pytest.mark.kafka_case)],
)
def test_end_offsets_never_go_backwards_across_failovers(make_cluster, kind):
    """Each round kills -9 the leader of every partition at once (broker 1, the preferred leader
    of all three, elected again before each round), while a poller asks every broker for every
    partition's end offset about every 2 ms: a new leader's first answers must not be below the
    old leader's last."""
    c = make_cluster(kind)
    create_topic(c, TOPIC, [[1, 2, 3], [1, 3, 2], [1, 2, 3]])
    with Workload(c.bootstrap, TOPIC, 3, end_offsets=c.client_bootstraps) as w:
        time.sleep(3)
        for _ in range(rounds_of(kind)):
            elect_preferred(c, TOPIC, 3)
            time.sleep(1)
            victim = 1
            c.brokers[victim].kill()
            c.wait(
                lambda s, v=victim: all(p.leader not in (v, -1) for p in s.topics[TOPIC].partitions),
                c.session_ms / 1000 + 10,
                "new leaders",
            )
            time.sleep(1)
            c.brokers[victim].start(timeout=90)
            whole(c, 60)
        time.sleep(2)
    # answers that mean something: every partition answered under each round's new leader (a
    # round moves leadership twice, by the kill and by the preferred election), not a count of
    # answers, which measures the machine's load (1,469 against a bound of 1,500 once)
    assert w.poller is not None
    seen = {p: sorted(w.poller.epochs[p]) for p in range(3)}
    assert all(len(e) > rounds_of(kind) for e in seen.values()), f"leader epochs the poller was answered under: {seen}"
    # A new leader's Fetch responses carry its follower-time high watermark for a moment, so the
    # reader's (librdkafka's cached) high watermark may step back: Kafka 3.9 does it too, here
    # (KIP-207 covers ListOffsets only). ListOffsets must not, on either (KIP-207), and
    # test_a_new_leader_answers_no_end_offset_below_the_old_leaders makes that moment certain.
    # (librdkafka's re-sends under a bumped epoch, librdkafka#4953, Workload.check knows by the
    # batches' producer epochs: seen here against odradek and against Kafka 3.9.)
    known = {"hw_backwards": "parity: Kafka 3.9's Fetch high watermark steps back after a leader change too"}
    w.check(c.logs(40), known=known)


PROBE = "probe"


@pytest.mark.parametrize(
    "kind",
    ["odradek", pytest.param("kafka39", marks=pytest.mark.kafka_case)],
)
def test_a_new_leader_answers_no_end_offset_below_the_old_leaders(make_cluster, kind):
    """The moment of replication audit §4 made certain, each round: a partition led by b with
    followers a and f, written only by this test. One acks=all record is acknowledged by b (its
    high watermark, asked of b, is past it); a and f learn that high watermark only with their
    next fetch response, which waits replica.fetch.wait.max.ms for data that does not come. f is
    paused and a becomes leader (a preferred election): a new leader whose high watermark is
    the one it had as follower, and cannot move until f fetches. Asked ListOffsets(latest) then,
    it must not answer an offset below b's (Kafka: OFFSET_NOT_AVAILABLE until its high watermark
    reaches its epoch's start, KIP-207). Once f is resumed the end offset is b's again."""
    c = make_cluster(kind, overrides={"replica.fetch.wait.max.ms": 1500})
    create_topic(c, PROBE, [[1, 2, 3]])
    history = History()
    codes: list[int] = []
    for r in range(rounds_of(kind)):
        snap = c.snapshot()
        b = snap.topics[PROBE].partitions[0].leader
        a, f = sorted((x for x in (1, 2, 3) if x != b), key=lambda x: x != snap.controller_id)  # f: not the controller
        reassign(c, PROBE, 0, [a, b, f])  # a preferred, b leading still
        c.wait(
            lambda s, want=(a, b, f): (
                s.topics[PROBE].partitions[0].replicas == want
                and s.topics[PROBE].partitions[0].leader == want[1]
                and len(s.topics[PROBE].partitions[0].isr) == 3
            ),
            30,
            f"{PROBE}-0 on {[a, b, f]}, led by {b}",
        )
        v = f"probe-{r}".encode()
        history.attempt(v)
        assert produce_one(c.brokers[b].bootstrap, PROBE, 0, v, acks=-1, timeout_ms=10000) == 0
        code, end, epoch = list_latest(c.brokers[b].bootstrap, PROBE, 0)
        assert code == 0, code
        history.end_offset(f"broker {b}", 0, end, epoch)
        c.pause(f)
        try:
            elect_preferred(c, PROBE, 1)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                code, end, epoch = list_latest(c.brokers[a].bootstrap, PROBE, 0)
                codes.append(code)
                if code == 0:
                    history.end_offset(f"broker {a}", 0, end, epoch)
            assert c.snapshot().topics[PROBE].partitions[0].leader == a
        finally:
            c.resume(f)
        deadline = time.monotonic() + 15  # f fetches again: a's high watermark reaches b's
        while (answer := list_latest(c.brokers[a].bootstrap, PROBE, 0))[:2] != (0, history.end_offsets[0][0]):
            assert time.monotonic() < deadline, f"broker {a}'s end offset after f came back: {answer}"
            time.sleep(0.05)
    report = history.check()
    print(report, f"error codes of the new leaders' answers while f was paused: {collections.Counter(codes)}")
    assert not report.end_offset_backwards, report


@pytest.mark.serial  # timed: B must lead, and C lead alone, within a session plus 10 s (tests/README.md)
def test_two_quick_failovers_the_second_before_the_new_leader_wrote(make_cluster):
    """Replication audit §3's schedule, each round on another partition with replicas [A, B, C]:
    B paused while A writes (C copies it, B does not), A killed, B resumed; nobody can reach B's
    replication listener (a proxy cut), so C never follows B; B leads a new epoch and writes in
    it, and is killed before anyone copies that; C leads a third epoch, alone in the ISR, with
    A's records that B never had. B restarted (A still down) must truncate to C's log, rejoin
    the ISR and let acks=all writes through again, as in Kafka, whose new leader records its
    epoch when elected; then A comes back and nothing acknowledged is lost."""
    c = make_cluster(replication_proxies=True)
    create_topic(c, TOPIC, SPREAD)
    probe = 0

    def write_probe(broker: int, p: int, acks: int) -> int:
        nonlocal probe
        v = f"probe-{probe}".encode()
        probe += 1
        w.history.attempt(v)  # may survive or not: never acknowledged by all replicas
        return produce_one(c.brokers[broker].bootstrap, TOPIC, p, v, acks=acks, timeout_ms=300)

    with Workload(c.bootstrap, TOPIC, 3) as w:
        time.sleep(3)
        for r in range(ROUNDS):
            p = r % 3
            a, b, c3 = SPREAD[p]
            elect_preferred(c, TOPIC, 3)
            # ZooKeeper shows A leading a moment before A itself has applied it (its watch):
            # NOT_LEADER_OR_FOLLOWER (6) until then, as while Kafka's LeaderAndIsr is in flight
            deadline = time.monotonic() + 10
            while (code := write_probe(a, p, acks=1)) == 6 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert code == 0, code
            c.pause(b)
            try:
                time.sleep(0.3)
                assert write_probe(a, p, acks=1) == 0
                time.sleep(0.3)  # C copies it; B, paused, does not
                c.brokers[a].kill()
                c.proxies[b].cut()
            finally:
                c.resume(b)  # paused 0.6 s: within its session, still in the ISR
            c.wait(lambda s, p=p, b=b: s.topics[TOPIC].partitions[p].leader == b, c.session_ms / 1000 + 10, "B leads")
            write_probe(b, p, acks=-1)  # appended in B's epoch, copied by nobody (times out)
            c.brokers[b].kill()
            c.proxies[b].heal()
            c.wait(
                lambda s, p=p, c3=c3: (
                    (s.topics[TOPIC].partitions[p].leader, s.topics[TOPIC].partitions[p].isr) == (c3, (c3,))
                ),
                c.session_ms / 1000 + 10,
                "C leading alone",
            )
            c.brokers[b].start(timeout=60)
            c.wait(
                lambda s, p=p, b=b: b in s.topics[TOPIC].partitions[p].isr,
                30,
                f"broker {b} back in partition {p}'s ISR (A still down)",
            )
            since = time.monotonic()
            deadline = since + 30
            while w.history.acks_since(since, {p}) == 0:
                assert time.monotonic() < deadline, f"no acks=all write to partition {p} acknowledged with A down"
                time.sleep(0.1)
            c.brokers[a].start(timeout=60)
            whole(c)
        time.sleep(2)
    w.check(c.logs(40))


def test_every_broker_killed_at_once_and_restarted_in_different_orders(make_cluster):
    """Each round SIGKILLs all three brokers at once and starts them again one by one, in an
    order of its own (all six over six rounds, in a seeded sequence: ODRADEK_FAULT_SEED replays
    one), a random pause between starts; writes stall meanwhile, then go on, and nothing
    acknowledged is lost (the page cache survives a process kill)."""
    rng = random.Random(SEED)
    orders = list(itertools.permutations((1, 2, 3)))
    rng.shuffle(orders)
    print(f"seed {SEED}: restart orders {[orders[r % 6] for r in range(ROUNDS)]}")
    c = make_cluster()
    create_topic(c, TOPIC, SPREAD)
    with Workload(c.bootstrap, TOPIC, 3) as w:
        time.sleep(3)
        for r in range(ROUNDS):
            c.kill_all()
            time.sleep(rng.uniform(0, 1))
            for b in orders[r % 6]:
                c.brokers[b].start(timeout=60)
                time.sleep(rng.uniform(0, 1.5))
            whole(c, 60)
            since = time.monotonic()
            deadline = since + 30
            while w.history.acks_since(since) < 50:
                assert time.monotonic() < deadline, f"writes did not go on after round {r} ({orders[r % 6]})"
                time.sleep(0.1)
        time.sleep(2)
    w.check(c.logs(40))


def test_a_reassignment_completes_though_its_leader_is_killed(make_cluster):
    """Each round moves one partition off a follower ([A, B, C] -> [A, B]) and back ([A, B, C]:
    C copies the log from scratch), killing the leader A right after the move back is accepted,
    before C has copied anything (C is stopped for that moment): B leads, alone in the ISR until
    C catches up from it; A comes back; the reassignment completes with all three in the ISR,
    and nothing acknowledged is lost."""
    c = make_cluster()
    create_topic(c, TOPIC, SPREAD)
    with Workload(c.bootstrap, TOPIC, 3) as w:
        time.sleep(4)
        for r in range(ROUNDS):
            p = r % 3
            snap = c.snapshot()
            part = snap.topics[TOPIC].partitions[p]
            a = part.leader
            b, c3 = sorted(
                (x for x in part.replicas if x != a), key=lambda x: x != snap.controller_id
            )  # c3: not the controller
            reassign(c, TOPIC, p, [a, b])
            c.wait(
                lambda s, p=p, ab=(a, b): (
                    s.topics[TOPIC].partitions[p].replicas == ab and reassignments_in_progress(c) == 0
                ),
                30,
                f"partition {p} on {[a, b]}",
            )
            time.sleep(0.5)
            c.pause(c3)  # (briefly, within its session) so that it is still copying when a dies
            try:
                reassign(c, TOPIC, p, [a, b, c3])
                c.brokers[a].kill()
            finally:
                c.resume(c3)
            c.wait(
                lambda s, p=p, a=a: s.topics[TOPIC].partitions[p].leader not in (a, -1),
                c.session_ms / 1000 + 10,
                f"a leader for partition {p} other than {a}",
            )
            c.brokers[a].start(timeout=60)
            c.wait(
                lambda s, p=p, want=(a, b, c3): (
                    s.topics[TOPIC].partitions[p].replicas == want
                    and len(s.topics[TOPIC].partitions[p].isr) == 3
                    and reassignments_in_progress(c) == 0
                ),
                60,
                f"partition {p}'s reassignment to {[a, b, c3]} complete",
            )
            whole(c)
        time.sleep(2)
    w.check(c.logs(40))
