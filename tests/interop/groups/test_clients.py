"""Consumer groups end to end with every real client (project issue #4).

Each member is its own process (tests/support/group_member.py has the contract and the
Python members; tests/clients/java/GroupCli.java and tests/clients/node/kafkajs_group.js the
others), so a member can be killed with SIGKILL. Session timeouts are 6 s.

* split / leave / kill -9: three members split a 6-partition topic, every partition owned by
  exactly one member; one leaves (LeaveGroup), one is killed: the survivors own everything
  again within the session timeout, and every record was delivered.
* committed offsets survive a broker restart: one client consumes and commits, the broker
  restarts, a member of another client resumes with no record missed and none repeated.
* static membership: a member with group.instance.id is killed and restarted without a
  rebalance (same generation, the other member keeps its partitions, no revocation).
* ten groups of two confluent consumers rebalancing at once all converge.
"""

from __future__ import annotations

import threading
import time

import pytest
from support.clients import unavailable_reason
from support.group_member import OVERRIDES, Member, create_topic, produce, split_ok, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.serial]  # timing: alone in its tier (tests/README.md)

SESSION_MS = 6000
#: after a kill, the coordinator notices within session.timeout.ms; the survivors then need one
#: heartbeat (1 s) to learn of the rebalance and one join/sync round trip
KILL_MARGIN_S = 4.0


def _skip_unless(kind: str) -> None:
    base = {
        "java": "java",
        "kafkajs": "kafkajs",
        "confluent": "confluent",
        "kafka_python": "kafka_python",
        "aiokafka": "aiokafka",
    }[kind]
    reason = unavailable_reason(base)
    if reason:
        pytest.skip(f"{kind}: {reason}")
    if kind == "java":
        from support.clients import JAVA_DIR

        if not (JAVA_DIR / "classes" / "GroupCli.class").is_file():
            pytest.skip("GroupCli not built: run scripts/install-test-deps.sh")


def _stop_all(members) -> None:
    for m in members:
        try:
            if m.proc.poll() is None:
                m.kill()
        except Exception:  # noqa: BLE001
            pass


# --------------------------------------------------------------------------- split, leave, kill -9

VARIANTS = [
    ("java", "range"),
    ("java", "cooperative-sticky"),
    ("confluent", "range"),
    ("confluent", "cooperative-sticky"),
    ("kafka_python", "range"),
    ("aiokafka", "range"),
    ("kafkajs", "roundrobin"),
]


@pytest.mark.parametrize("kind,assignor", VARIANTS, ids=[f"{k}-{a}" for k, a in VARIANTS])
def test_members_split_leave_and_kill(broker_factory, tmp_path, kind, assignor):
    _skip_unless(kind)
    b = broker_factory(overrides=OVERRIDES)
    n_parts = 6
    create_topic(b.bootstrap, "split", n_parts)
    first = [f"a{i}" for i in range(60)]
    produce(b.bootstrap, "split", first, n_parts)
    ms = [
        Member(
            kind,
            b.bootstrap,
            "split",
            "g-split",
            f"m{i}",
            assignor=assignor,
            session_timeout_ms=SESSION_MS,
            log_dir=tmp_path,
        )
        for i in range(3)
    ]
    try:
        wait_until(lambda: split_ok(ms, n_parts), 60, lambda: f"3-way split: {ms}", ms)
        wait_until(lambda: set(first) <= {v for m in ms for v in m.values}, 30, "the first 60 records", ms)

        # a member leaves: the two others own everything, quickly (LeaveGroup, no session wait)
        leaver, rest = ms[0], ms[1:]
        kept = {m.client_id: set(m.assignment) for m in rest}
        t_leave = time.monotonic()
        leaver.stop()
        assert leaver.closed_cleanly, leaver.errors()
        took = wait_until(lambda: split_ok(rest, n_parts), SESSION_MS / 1000, lambda: f"2-way split: {rest}", rest)
        print(f"{kind}/{assignor}: reassigned {took:.1f}s after a LeaveGroup")
        if assignor == "cooperative-sticky":
            # incremental rebalancing: the survivors keep what they had and revoke nothing
            for m in rest:
                assert kept[m.client_id] <= m.assignment
                assert not [ev for ev in m.rebalance_events(t_leave) if ev["ev"] == "revoked" and ev["partitions"]], m
        second = [f"b{i}" for i in range(30)]
        produce(b.bootstrap, "split", second, n_parts)
        wait_until(lambda: set(second) <= {v for m in ms for v in m.values}, 30, "the next 30 records", rest)

        # kill -9: no LeaveGroup; the coordinator expires the session
        victim, last = rest
        victim.kill()
        took = wait_until(
            lambda: last.assignment == set(range(n_parts)),
            SESSION_MS / 1000 + KILL_MARGIN_S + 6,
            lambda: f"the survivor to own all: {last}",
            [last],
        )
        print(f"{kind}/{assignor}: reassigned {took:.1f}s after kill -9")
        assert took <= SESSION_MS / 1000 + KILL_MARGIN_S, f"took {took:.1f}s after kill -9"
        third = [f"c{i}" for i in range(30)]
        produce(b.bootstrap, "split", third, n_parts)
        wait_until(lambda: set(third) <= set(last.values), 30, "the last 30 records", [last])
        last.stop()
        assert last.closed_cleanly, last.errors()
        for m in ms:
            assert not m.errors(), (m, m.errors())
        # every record delivered (committed) by some member
        assert set(first + second + third) <= {v for m in ms for v in m.values}
    finally:
        _stop_all(ms)


# --------------------------------------------------------------------------- offsets survive a restart

PAIRS = [
    ("java", "confluent"),
    ("confluent", "kafka_python"),
    ("kafka_python", "aiokafka"),
    ("aiokafka", "kafkajs"),
    ("kafkajs", "java"),
]


def test_committed_offsets_survive_restart_no_loss_no_repeat(broker_factory, tmp_path):
    """Five groups at once, one per (committer, resumer) client pair, on one broker restart."""
    kinds = {k for p in PAIRS for k in p}
    missing = {
        k
        for k in kinds
        if unavailable_reason(k)
        or (
            k == "java"
            and not (
                __import__("support.clients", fromlist=["JAVA_DIR"]).JAVA_DIR / "classes" / "GroupCli.class"
            ).is_file()
        )
    }
    pairs = [p for p in PAIRS if not set(p) & missing]
    if not pairs:
        pytest.skip(f"clients missing: {missing}")
    b = broker_factory(overrides=OVERRIDES)
    n_parts = 4
    first = {}
    for i, (_a, _r) in enumerate(pairs):
        t = f"resume{i}"
        create_topic(b.bootstrap, t, n_parts)
        first[t] = [f"{t}-a{j}" for j in range(40)]
        produce(b.bootstrap, t, first[t], n_parts)
    ms = [
        Member(
            a, b.bootstrap, f"resume{i}", f"g-resume{i}", f"first-{a}", session_timeout_ms=SESSION_MS, log_dir=tmp_path
        )
        for i, (a, _r) in enumerate(pairs)
    ]
    try:
        for i, m in enumerate(ms):
            t = f"resume{i}"
            wait_until(lambda t=t, m=m: set(first[t]) <= set(m.values), 60, lambda t=t, m=m: f"{m} to consume {t}", [m])
        for m in ms:
            m.stop()
            assert m.closed_cleanly, m.errors()
            assert len(m.values) == len(set(m.values)), f"{m} got duplicates"
    finally:
        _stop_all(ms)

    b.restart()
    second = {}
    for i, _ in enumerate(pairs):
        t = f"resume{i}"
        second[t] = [f"{t}-b{j}" for j in range(40)]
        produce(b.bootstrap, t, second[t], n_parts)
    rs = [
        Member(
            r, b.bootstrap, f"resume{i}", f"g-resume{i}", f"second-{r}", session_timeout_ms=SESSION_MS, log_dir=tmp_path
        )
        for i, (_a, r) in enumerate(pairs)
    ]
    try:
        for i, m in enumerate(rs):
            t = f"resume{i}"
            wait_until(
                lambda t=t, m=m: set(second[t]) <= set(m.values), 60, lambda t=t, m=m: f"{m} to resume on {t}", [m]
            )
        time.sleep(1.0)  # anything repeated would arrive by now
        for i, m in enumerate(rs):
            t = f"resume{i}"
            assert sorted(m.values) == sorted(second[t]), (
                pairs[i],
                "resumed with repeats or extras",
                sorted(set(m.values) - set(second[t]))[:10],
            )
        for m in rs:
            m.stop()
            assert not m.errors(), m.errors()
    finally:
        _stop_all(rs)


# --------------------------------------------------------------------------- static membership


@pytest.mark.parametrize("kind", ["java", "confluent"])
def test_static_member_restarts_without_rebalance(broker_factory, tmp_path, kind):
    _skip_unless(kind)
    b = broker_factory(overrides=OVERRIDES)
    n_parts = 4
    create_topic(b.bootstrap, "static", n_parts)
    session = 15000  # the restart (a JVM start) must fit in the session timeout

    def member(inst):
        return Member(
            kind,
            b.bootstrap,
            "static",
            "g-static",
            inst,
            instance_id=inst,
            session_timeout_ms=session,
            log_dir=tmp_path,
        )

    s1, s2 = member("inst-1"), member("inst-2")
    ms = [s1, s2]
    try:
        wait_until(lambda: split_ok([s1, s2], n_parts), 60, lambda: f"2-way split {ms}", ms)
        if kind == "java":
            wait_until(lambda: s1.gen == s2.gen and s1.gen > 0, 10, "a common generation", ms)
        gen, owned1, owned2 = s2.gen, set(s1.assignment), set(s2.assignment)
        time.sleep(2.5)  # settle: both members past their first heartbeats
        t_kill = time.monotonic()
        s1.kill()  # a static member's crash: no LeaveGroup
        s1b = member("inst-1")
        ms.append(s1b)
        wait_until(lambda: s1b.assignment == owned1, 30, lambda: f"restarted {s1b} to get {owned1} back", ms)
        if kind == "java":
            wait_until(lambda: s1b.gen >= 0, 10, "the restarted member's generation", ms)
            assert s1b.gen == gen, f"generation moved {gen} -> {s1b.gen}: a rebalance happened"
        vals = [f"s{i}" for i in range(40)]
        produce(b.bootstrap, "static", vals, n_parts)
        wait_until(lambda: set(vals) <= set(s1b.values) | set(s2.values), 30, "records after the restart", ms)
        time.sleep(2.5)  # would a delayed rebalance show up?
        assert s2.rebalance_events(t_kill) == [], f"the other member saw a rebalance: {s2.rebalance_events(t_kill)}"
        assert s2.assignment == owned2
        if kind == "java":
            assert s2.gen == gen and s1b.gen == gen
        assert {v for v in s1b.values} == {f"s{i}" for i in range(40) if i % n_parts in owned1}
        for m in (s1b, s2):
            m.stop()
            assert not m.errors(), m.errors()
    finally:
        _stop_all(ms)


# --------------------------------------------------------------------------- ten groups at once


def test_ten_groups_rebalance_at_once(broker_factory):
    ck = pytest.importorskip("confluent_kafka")
    b = broker_factory(overrides=OVERRIDES)
    n_groups, n_parts = 10, 4
    create_topic(b.bootstrap, "ten", n_parts)
    vals = [f"t{i}" for i in range(40)]
    produce(b.bootstrap, "ten", vals, n_parts)

    class C(threading.Thread):
        def __init__(self, g, i):
            super().__init__(daemon=True)
            self.g, self.i, self.stop, self.values, self.assignment, self.error = (
                g,
                i,
                threading.Event(),
                [],
                set(),
                None,
            )
            self.left = threading.Event()

        def run(self):
            try:
                c = ck.Consumer(
                    {
                        "bootstrap.servers": b.bootstrap,
                        "group.id": f"ten-{self.g}",
                        "client.id": f"ten-{self.g}-{self.i}",
                        "auto.offset.reset": "earliest",
                        "session.timeout.ms": SESSION_MS,
                        "heartbeat.interval.ms": 1000,
                    }
                )

                def on_assign(_c, ps):
                    self.assignment = {p.partition for p in ps}

                def on_revoke(_c, ps):
                    self.assignment = set()

                c.subscribe(["ten"], on_assign=on_assign, on_revoke=on_revoke)
                while not self.stop.is_set():
                    m = c.poll(0.1)
                    if m is not None and m.error() is None:
                        self.values.append(m.value().decode())
                c.close()
                self.left.set()
            except BaseException as e:  # noqa: BLE001
                self.error = e

    cs = [C(g, i) for g in range(n_groups) for i in range(2)]
    for c in cs:
        c.start()
    try:
        groups = [cs[2 * g : 2 * g + 2] for g in range(n_groups)]
        wait_until(
            lambda: all(split_ok(g, n_parts) for g in groups) or any(c.error for c in cs),
            60,
            lambda: f"every group split: {[(c.g, sorted(c.assignment)) for c in cs]}",
        )
        assert not [c.error for c in cs if c.error]
        wait_until(
            lambda: all(set(vals) <= set(g[0].values + g[1].values) for g in groups),
            30,
            "every group to read every record",
        )
        # one member of each group leaves at once: ten rebalances at the same time
        for g in groups:
            g[0].stop.set()
        wait_until(
            lambda: all(g[1].assignment == set(range(n_parts)) for g in groups),
            SESSION_MS / 1000 + 4,
            lambda: f"every survivor owns all: {[(c.g, sorted(c.assignment)) for c in cs]}",
        )
    finally:
        for c in cs:
            c.stop.set()
        for c in cs:
            c.join(20)
    assert not [c.error for c in cs if c.error]
