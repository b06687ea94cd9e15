"""Leadership: preferred and unclean elections (ElectLeaders), the automatic return to
preferred leaders, and unclean election's price measured."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.odradek_cluster import SESSION_MS, OdradekCluster
from support.prometheus import scrape, val
from support.raw import RawConnection

from odradek.protocol import messages

pytestmark = pytest.mark.cluster


def start(tmp_path, **overrides) -> OdradekCluster:
    c = OdradekCluster(tmp_path, brokers=3, overrides={"replica.lag.time.max.ms": 1500, **overrides})
    try:
        return c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise


def create(c: OdradekCluster, name: str, partitions: int, rf: int, **config: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, rf, config=config)], operation_timeout=20).values():
        f.result()
    return admin


def test_preferred_leader_election_brings_leaders_back(tmp_path):
    c = start(tmp_path, **{"auto.leader.rebalance.enable": "false"})
    try:
        admin = create(c, "pref", 3, 3)
        c.brokers[1].stop()  # controlled: broker 1's leadership moves away
        stopped = c.brokers[1].log_tail(200)
        assert "controlled shutdown: leadership moved away" in stopped, stopped  # asked, answered, seen moved
        c.brokers[1].start(timeout=40)
        snap = c.wait(lambda s: all(len(p.isr) == 3 for p in s.topics["pref"].partitions), 30, "broker 1 in sync")
        away = [p.partition for p in snap.topics["pref"].partitions if p.replicas[0] == 1 and p.leader != 1]
        assert away, "broker 1 should have lost its preferred leadership"
        parts = [TopicPartition("pref", p) for p in range(3)]
        result = admin.elect_leaders(ElectionType.PREFERRED, parts).result()
        errors = {tp.partition: (e.code() if e else 0) for tp, e in result.items()}
        assert all(errors[p] == 0 for p in away), errors
        snap = c.wait(lambda s: all(p.leader == p.replicas[0] for p in s.topics["pref"].partitions), 10)
        again = admin.elect_leaders(ElectionType.PREFERRED, parts).result()
        assert all(e is not None and e.name() == "ELECTION_NOT_NEEDED" for e in again.values()), again
    finally:
        c.stop()


def test_auto_rebalance_returns_leadership_to_a_restarted_broker(tmp_path):
    c = start(tmp_path, **{"leader.imbalance.check.interval.seconds": 1, "leader.imbalance.per.broker.percentage": 0})
    try:
        create(c, "auto", 3, 3)
        c.brokers[2].stop()
        c.brokers[2].start(timeout=40)
        c.wait(lambda s: all(p.leader == p.replicas[0] for p in s.topics["auto"].partitions), 20, "preferred leaders")
    finally:
        c.stop()


def test_unclean_election_trades_acknowledged_records_for_availability(tmp_path):
    """Replication factor 2, acks=1: the follower falls out of sync and dies, the leader takes
    writes alone, then dies too; the stale follower comes back. Clean election keeps the
    partition offline (nothing is lost, nothing is served); unclean election (ElectLeaders)
    serves again and loses what only the dead leader had: the count is reported."""
    c = start(tmp_path, **{"auto.leader.rebalance.enable": "false"})
    try:
        create(c, "unclean", 1, 2)
        snap = c.snapshot().topics["unclean"].partitions[0]
        leader, follower = snap.leader, next(r for r in snap.replicas if r != snap.leader)
        acked = []

        def send(n: int, tag: str, acks: str) -> None:
            p = Producer({"bootstrap.servers": c.bootstrap, "acks": acks, "linger.ms": 1})
            for i in range(n):
                p.produce(
                    "unclean", f"{tag}-{i}".encode(), on_delivery=lambda e, m: e is None and acked.append(m.value())
                )
            assert p.flush(30) == 0

        send(100, "both", "all")  # on both replicas
        c.brokers[follower].kill()
        c.wait(lambda s: s.topics["unclean"].partitions[0].isr == (leader,), SESSION_MS / 1000 + 5, "ISR shrink")
        send(100, "leader-only", "1")  # acks=1 with the ISR down to the leader
        c.brokers[leader].kill()
        c.brokers[follower].start(timeout=40)
        time.sleep(SESSION_MS / 1000 + 1)
        assert c.snapshot().topics["unclean"].partitions[0].leader == -1  # clean: stays offline
        c.wait(lambda s: s.controller_id in {b.node_id for b in s.brokers}, 10, "a live controller")
        admin = AdminClient({"bootstrap.servers": c.bootstrap})  # (librdkafka waits on a cached dead controller)
        result = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("unclean", 0)]).result()
        assert all(e is None for e in result.values()), result
        c.wait(lambda s: s.topics["unclean"].partitions[0].leader == follower, 10, "the unclean leader")
        from confluent_kafka import Consumer

        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "u", "auto.offset.reset": "earliest"})
        cons.assign([TopicPartition("unclean", 0, 0)])
        got = set()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value())
            elif m is None and len(got) >= 100:
                break
        cons.close()
        lost = [v for v in acked if v not in got]
        print(f"unclean election: {len(acked)} acknowledged, {len(lost)} lost (those written with acks=1 alone)")
        assert all(v.startswith(b"leader-only") for v in lost) and len(lost) == 100
        assert all(v in got for v in acked if v.startswith(b"both"))
    finally:
        c.stop()


def test_unclean_election_enabled_dynamically_brings_an_offline_partition_back(tmp_path):
    """`unclean.leader.election.enable` as a dynamic default for every broker (what
    kafka-configs.sh --entity-default writes): the controller applies it at once to a partition
    that is offline because its only in-sync replica died."""
    c = start(tmp_path, **{"auto.leader.rebalance.enable": "false"})
    try:
        create(c, "dyn", 1, 2)
        snap = c.snapshot().topics["dyn"].partitions[0]
        leader, follower = snap.leader, next(r for r in snap.replicas if r != snap.leader)
        c.brokers[follower].kill()
        c.wait(lambda s: s.topics["dyn"].partitions[0].isr == (leader,), SESSION_MS / 1000 + 5, "ISR shrink")
        c.brokers[leader].kill()
        c.brokers[follower].start(timeout=40)
        time.sleep(SESSION_MS / 1000 + 1)
        assert c.snapshot().topics["dyn"].partitions[0].leader == -1  # clean by default: offline
        c.wait(lambda s: s.controller_id in {b.node_id for b in s.brokers}, 10, "a live controller")
        # IncrementalAlterConfigs of the default broker entity ("": confluent-kafka cannot name it)
        mod = messages.module_of(messages.request_class(44, 1))
        op = mod.AlterableConfig(name="unclean.leader.election.enable", config_operation=0, value="true")
        res = mod.AlterConfigsResource(resource_type=4, resource_name="", configs=(op,))
        with RawConnection(c.brokers[follower].bootstrap) as conn:
            r = conn.call(44, 1, resources=(res,), validate_only=False)
        assert int(r.responses[0].error_code) == 0
        c.wait(lambda s: s.topics["dyn"].partitions[0].leader == follower, 10, "the unclean leader")
    finally:
        c.stop()


def _settles(read, want, timeout: float = 10):  # noqa: ANN001, ANN202
    """What `read()` returns once it returns `want`, or after `timeout` s: the caller asserts it."""
    deadline = time.monotonic() + timeout
    while (got := read()) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def test_replication_metrics_follow_a_follower_leaving_and_returning(tmp_path):
    c = OdradekCluster(tmp_path, brokers=3, overrides={"replica.lag.time.max.ms": 1500}, metrics=True)
    c.start()
    try:
        create(c, "watched", 3, 3)
        snap = c.snapshot()
        controller = snap.controller_id
        victim = next(b for b in (1, 2, 3) if b != controller)
        c.brokers[victim].kill()
        c.wait(lambda s: all(victim not in p.isr for p in s.topics["watched"].partitions), SESSION_MS / 1000 + 5)
        leaders = {p.leader for p in c.snapshot().topics["watched"].partitions}
        # the leaders learn the ISR ZooKeeper holds from its watch: their gauges follow within moments
        assert (
            _settles(
                lambda: sum(val(scrape(c.metrics_ports[b]), "odradek_under_replicated_partitions") for b in leaders), 3
            )
            == 3
        )
        m = scrape(c.metrics_ports[controller])
        assert val(m, "odradek_active_controller") == 1 and val(m, "odradek_offline_partitions") == 0
        assert sum(val(scrape(c.metrics_ports[b]), "odradek_isr_shrinks_total") for b in leaders) >= 1
        c.brokers[victim].start(timeout=40)
        c.wait(lambda s: all(len(p.isr) == 3 for p in s.topics["watched"].partitions), 30, "the ISR whole")
        leaders = {p.leader for p in c.snapshot().topics["watched"].partitions}
        assert sum(val(scrape(c.metrics_ports[b]), "odradek_isr_expands_total") for b in leaders) >= 1
        assert (
            _settles(
                lambda: sum(val(scrape(c.metrics_ports[b]), "odradek_under_replicated_partitions") for b in leaders), 0
            )
            == 0
        )
        lags = [k for b in leaders for k in scrape(c.metrics_ports[b]) if k[0] == "odradek_replica_lag_records"]
        assert len(lags) == 6  # two followers of each of the three partitions
    finally:
        c.stop()


@pytest.mark.serial  # timed: alone in its tier (tests/README.md)
def test_a_leadership_change_reaches_every_broker_within_a_second(tmp_path):
    """Issue 13's bound: once the controller has written a partition's new leader to ZooKeeper
    (the state znode's mtime), every broker's Metadata answers with it within 1 s. Measured
    for a preferred election moving 12 leaders at once, from ZooKeeper's clock to the moment
    this test, polling every broker, saw it (its own polling included: the bound is loose
    only in the test's disfavour)."""
    from kazoo.client import KazooClient

    c = start(tmp_path, **{"auto.leader.rebalance.enable": "false"})
    try:
        admin = create(c, "prop", 12, 3)
        c.brokers[1].stop()  # controlled: broker 1's leadership moves away
        c.brokers[1].start(timeout=40)
        c.wait(lambda s: all(len(p.isr) == 3 for p in s.topics["prop"].partitions), 30, "broker 1 in sync")
        moving = {p.partition for p in c.snapshot().topics["prop"].partitions if p.replicas[0] != p.leader}
        assert moving
        conns = {b: RawConnection(c.brokers[b].bootstrap) for b in c.brokers}
        mod = messages.module_of(messages.request_class(3, 12))
        seen: dict[tuple[int, int], float] = {}
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("prop", p) for p in moving]).result()
        assert all(e is None for e in result.values()), result
        preferred = {p.partition: p.replicas[0] for p in c.snapshot().topics["prop"].partitions}
        deadline = time.monotonic() + 10
        while len(seen) < len(moving) * len(conns) and time.monotonic() < deadline:
            for b, conn in conns.items():
                r = conn.call(
                    3,
                    12,
                    topics=(mod.MetadataRequestTopic(name="prop", topic_id=None),),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
                now = time.time()
                for p in r.topics[0].partitions:
                    i = int(p.partition_index)
                    if i in moving and int(p.leader_id) == preferred[i]:
                        seen.setdefault((b, i), now)
            time.sleep(0.01)
        for conn in conns.values():
            conn.close()
        assert len(seen) == len(moving) * len(conns), f"not every broker saw every move: {sorted(seen)}"
        zk = KazooClient(hosts=c.zookeeper.connect)
        zk.start()
        try:
            written = {i: zk.get(f"/brokers/topics/prop/partitions/{i}/state")[1].mtime / 1000 for i in moving}
        finally:
            zk.stop()
        delays = {k: at - written[k[1]] for k, at in seen.items()}
        print(f"leadership change -> every broker's Metadata: max {max(delays.values()) * 1000:.0f} ms")
        assert max(delays.values()) < 1.0, delays
    finally:
        c.stop()
