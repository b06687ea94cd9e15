"""A broker back from a power cut before its previous ZooKeeper session expired (issue 25).

Three brokers and a real ZooKeeper, a topic of replication factor 3 with min.insync.replicas=2,
idempotent acks=all producers (librdkafka and Java) and a reader throughout, the history
checked at the end (tests/support/checker.py). A broker is killed (-9) and its copy of one
partition deleted, the extreme of what a power cut takes (its whole active segment
unflushed), and it is started again at once, well within its session. Until that session
expires its previous run's registration still stands, and the controller would count it live
and in sync with the log it found. It must end that registration first (the controller fails
that broker epoch: out of the ISR, leadership moved) and register only once that epoch is
fenced (docs/cluster.md, "A broker that restarted"):
- the leader, with the controller stopped (SIGSTOP) across its restart: the controller sees
  its previous registration end only when it resumes, and the broker waits for it. Before the
  restarted-leader fix, the controller, seeing only a new registration, let it lead again at
  its old leader epoch and the followers truncated to its empty log;
- a follower, restarted while its leader's ISR still counts it: before this fix it waited for
  its previous session to expire, in the ISR all that time with an empty copy.
"""

from __future__ import annotations

import shutil
import time

import pytest
from kazoo.client import KazooClient
from support.fault_workload import ClusterFactory, Workload, create_topic, elect_preferred

from odradek.cluster import zk_layout as L

# serial, the whole module: a broker back within its 10 s ZooKeeper session: a second cluster's load
# could let it expire
pytestmark = [pytest.mark.cluster, pytest.mark.serial]

TOPIC = "acked"
SPREAD = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # partition p led by broker p+1, its preferred leader
# ZooKeeper's longest session with ticks of 500 ms (20 ticks). A session ends between 2/3 of
# it and all of it (plus a tick) after the broker was last heard (kazoo pings every third of
# it): the killed broker's registration would go 6.7-10.5 s after its kill, time enough for a
# broker process to start again under load (a 5 s session was past before a restarted broker
# reached ZooKeeper on a loaded machine: not the scenario); the controller, stopped for PAUSE_S
# from its SIGSTOP to its SIGCONT, keeps its own session (which lasts 6.7 s at least). Nothing
# slow runs while it is stopped: the test reads one znode then, over a connection made before
# (a snapshot reads every znode: under load, with another cluster beside it, that kept the
# controller stopped past its session).
SESSION_MS = 10000
TICK_MS = 500
PAUSE_S = 3.0
ENDED = "ended the registration of broker {}'s previous run"


@pytest.fixture
def make_cluster(tmp_path):
    with ClusterFactory(tmp_path) as make:
        yield make


def _restarted_within_its_session(c, b: int, killed: float) -> None:  # noqa: ANN001
    """Broker `b` ended its previous run's registration (so before that session expired)."""
    line = ENDED.format(b)
    while line not in c.brokers[b].log_path.read_text(errors="replace"):
        assert time.monotonic() - killed < SESSION_MS / 1000 + 5, (
            f"broker {b} did not end its previous registration:\n{c.brokers[b].log_tail()}"
        )
        time.sleep(0.05)


def _whole_again_and_writes_go_on(c, w, p: int, b: int, epoch: int) -> None:  # noqa: ANN001
    c.brokers[b].wait_ready(60)
    after = c.wait(lambda s: (x := s.broker(b)) is not None and x.epoch != epoch, 30, f"broker {b} registered again")
    assert after.broker(b).epoch > epoch
    c.wait(lambda s: all(len(q.isr) == 3 for q in s.topics[TOPIC].partitions), 60, "the ISR whole again")
    since = time.monotonic()
    deadline = since + 30
    while w.history.acks_since(since, {p}) < 20:
        assert time.monotonic() < deadline, f"writes to partition {p} did not go on"
        time.sleep(0.1)
    time.sleep(1)


def test_a_leader_back_from_a_power_cut_within_its_session_does_not_lead_its_empty_log(make_cluster):
    c = make_cluster(overrides={"zookeeper.session.timeout.ms": SESSION_MS}, zookeeper_tick_ms=TICK_MS)
    create_topic(c, TOPIC, SPREAD)
    with Workload(c.bootstrap, TOPIC, 3) as w:
        time.sleep(4)  # acknowledged records in every partition
        elect_preferred(c, TOPIC, 3)
        snap = c.snapshot()
        k = snap.controller_id
        a = next(b for b in (1, 2, 3) if b != k)
        p = a - 1
        assert snap.topics[TOPIC].partitions[p].leader == a
        epoch = snap.broker(a).epoch
        killed = time.monotonic()
        c.brokers[a].kill()
        shutil.rmtree(c.brokers[a].log_dirs / f"{TOPIC}-{p}")  # the power cut took it all
        zk = KazooClient(hosts=c.zookeeper_connect)
        zk.start(10)
        try:
            paused = time.monotonic()
            c.pause(k)
            try:
                c.brokers[a].spawn()
                time.sleep(max(0.0, paused + PAUSE_S - 0.5 - time.monotonic()))
                registration = zk.exists(L.broker_path(a))
            finally:
                c.resume(k)
        finally:
            zk.stop()
            zk.close()
        # the controller stopped, nobody fenced A's previous epoch: A has not registered
        assert registration is None or registration.czxid == epoch
        _restarted_within_its_session(c, a, killed)
        old_epoch = snap.topics[TOPIC].partitions[p].leader_epoch
        after = c.wait(
            lambda s: s.topics[TOPIC].partitions[p].leader_epoch > old_epoch, 15, f"partition {p}'s next leader"
        )
        assert after.controller_id == k, "the controller lost its session: not the scenario this test is about"
        assert after.topics[TOPIC].partitions[p].leader != a, f"broker {a} leads again with its empty log"
        _whole_again_and_writes_go_on(c, w, p, a, epoch)
    w.check(c.logs(60))


def test_a_follower_back_from_a_power_cut_within_its_session_leaves_the_isr_until_it_caught_up(make_cluster):
    c = make_cluster(overrides={"zookeeper.session.timeout.ms": SESSION_MS}, zookeeper_tick_ms=TICK_MS)
    create_topic(c, TOPIC, SPREAD)
    with Workload(c.bootstrap, TOPIC, 3) as w:
        time.sleep(4)
        elect_preferred(c, TOPIC, 3)
        snap = c.snapshot()
        k = snap.controller_id
        f = next(b for b in (1, 2, 3) if b != k)
        p = next(q.partition for q in snap.topics[TOPIC].partitions if q.leader != f and f in q.isr)
        epoch = snap.broker(f).epoch
        killed = time.monotonic()
        c.brokers[f].kill()
        shutil.rmtree(c.brokers[f].log_dirs / f"{TOPIC}-{p}")
        c.brokers[f].spawn()
        _restarted_within_its_session(c, f, killed)
        _whole_again_and_writes_go_on(c, w, p, f, epoch)
    w.check(c.logs(60))
