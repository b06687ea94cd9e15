"""A leader back from a power cut while the controller did not see it go (issue 25).

Three brokers and a real ZooKeeper, a topic of replication factor 3 with min.insync.replicas=2,
idempotent acks=all producers (librdkafka and Java) and a reader throughout, the history
checked at the end (tests/support/checker.py). A leader A is killed (-9) and its copy of the
partition it leads is deleted, the extreme of what a power cut takes (its whole active segment
unflushed); it is started again at once, and registers once its previous session has expired.
The controller is stopped (SIGSTOP) from just before that expiry until just after the new
registration, shorter than its own session: it sees A only as registered again (a new broker
epoch), never as gone. Before the fix A led again at its old leader epoch, the followers
truncated to its empty log and every acknowledged record of the partition was lost; as Kafka's
controller handles a bounced broker, A must be failed first (out of the ISR, another replica
leading), and A itself must not lead a state given to its previous registration
(docs/cluster.md, "A broker that restarted").
"""

from __future__ import annotations

import shutil
import time

import pytest
from support.fault_workload import ClusterFactory, Workload, create_topic, elect_preferred

pytestmark = pytest.mark.cluster

TOPIC = "acked"
SPREAD = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # partition p led by broker p+1, its preferred leader
# ZooKeeper's longest session here (20 ticks of 250 ms). A session ends between 2/3 of it and
# all of it (plus a tick) after the broker was last heard (kazoo pings every third of it):
# A's registration goes 3.3-5.25 s after its kill and comes back within 0.5 s; the controller,
# stopped at 3.0 s for at most 3.2 s, keeps its own session (which lasts 3.3 s at least).
SESSION_MS = 5000
PAUSE_AT_S = 3.0


@pytest.fixture
def make_cluster(tmp_path):
    with ClusterFactory(tmp_path) as make:
        yield make


def test_a_leader_back_from_a_power_cut_unseen_by_the_controller_does_not_lead_its_empty_log(make_cluster):
    c = make_cluster(overrides={"zookeeper.session.timeout.ms": SESSION_MS})
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
        c.brokers[a].spawn()  # it waits for its previous registration to expire
        waiting = f"waiting for the previous registration of broker {a} to expire"
        while waiting not in c.brokers[a].log_path.read_text(errors="replace"):
            # it must be in that loop before the controller stops: then it registers within
            # 0.5 s of the old registration's end, inside the controller's pause
            assert time.monotonic() - killed < PAUSE_AT_S, f"broker {a} started too slowly:\n{c.brokers[a].log_tail()}"
            time.sleep(0.05)
        time.sleep(max(0.0, PAUSE_AT_S - (time.monotonic() - killed)))
        c.pause(k)
        stopped = time.monotonic()
        try:
            try:
                c.wait(
                    lambda s: (b := s.broker(a)) is not None and b.epoch != epoch,
                    SESSION_MS / 1000 + 1 - PAUSE_AT_S,
                    f"broker {a} registered again",
                )
            except AssertionError as e:
                raise AssertionError(f"{e}\n{c.logs(40)}") from None
            time.sleep(0.2)  # A acts on the state it finds; the followers fetch from it
        finally:
            c.resume(k)
        print(f"controller {k} stopped {time.monotonic() - stopped:.2f} s across broker {a}'s restart")
        c.brokers[a].wait_ready(60)
        old_epoch = snap.topics[TOPIC].partitions[p].leader_epoch
        after = c.wait(
            lambda s: s.topics[TOPIC].partitions[p].leader_epoch > old_epoch, 15, f"partition {p}'s next leader"
        )
        assert after.controller_id == k, "the controller lost its session: not the scenario this test is about"
        assert after.topics[TOPIC].partitions[p].leader != a, f"broker {a} leads again with its empty log"
        c.wait(
            lambda s: all(len(q.isr) == 3 for q in s.topics[TOPIC].partitions),
            60,
            "the ISR whole again",
        )
        since = time.monotonic()
        deadline = since + 30
        while w.history.acks_since(since, {p}) < 20:
            assert time.monotonic() < deadline, f"writes to partition {p} did not go on"
            time.sleep(0.1)
        time.sleep(1)
    w.check(c.logs(60))
