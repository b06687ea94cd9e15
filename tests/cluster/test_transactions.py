"""The transaction coordinator in a three-broker cluster: the coordinator of the
transactional id on one broker, the partitions of the transaction led by the others, so
the markers go out as WriteTxnMarkers and KIP-890's verification as AddPartitionsToTxn
v4 `verify_only` between brokers; then the coordinator's broker stops and the next
leader of its `__transaction_state` partition replays the state and serves the id.

A read_committed reader sees exactly the committed records: those of the aborted transaction
(and of the fenced zombie's) come before later committed ones in every partition, so reading
the expected count of records would return them first if they were visible."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.odradek_cluster import OdradekCluster
from support.prometheus import scrape, val

from odradek.coordinator.txn.records import TXN_STATE_TOPIC, partition_for

pytestmark = pytest.mark.cluster

TOPIC = "txn-cl"
TXN_PARTITIONS = 5


@pytest.fixture
def cluster(tmp_path):
    c = OdradekCluster(
        tmp_path,
        brokers=3,
        metrics=True,
        overrides={
            "default.replication.factor": 3,
            "transaction.state.log.num.partitions": TXN_PARTITIONS,
            "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2,
        },
    )
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    yield c
    c.stop()


def read_committed(bootstrap: str, *, expect: int, timeout: float = 20) -> set[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
    got: set[bytes] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(got) < expect:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.add(m.value())
    finally:
        c.close()
    return got


def transaction(p: Producer, tag: str, commit: bool = True) -> None:
    p.begin_transaction()
    for i in range(3):
        p.produce(TOPIC, value=f"{tag}-{i}".encode(), partition=i)
    if commit:
        p.commit_transaction(30)
    else:
        p.flush(30)
        p.abort_transaction(30)


def test_coordinator_and_partition_leaders_on_different_brokers(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    snap = cluster.wait(lambda s: TOPIC in s.topics and all(len(p.isr) == 3 for p in s.topics[TOPIC].partitions), 30)
    assert sorted(p.leader for p in snap.topics[TOPIC].partitions) == [1, 2, 3]
    txn_id = "cluster-tx"
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    p.init_transactions(60)
    snap = cluster.snapshot()
    coordinator = snap.partition(TXN_STATE_TOPIC, partition_for(txn_id, TXN_PARTITIONS)).leader
    assert coordinator in (1, 2, 3)  # two of the three partitions are led elsewhere
    transaction(p, "c1")
    transaction(p, "a", commit=False)
    transaction(p, "c2")
    committed = {f"{t}-{i}".encode() for t in ("c1", "c2") for i in range(3)}
    assert read_committed(cluster.bootstrap, expect=6) == committed
    # the other leaders got their markers as WriteTxnMarkers from the coordinator, and checked
    # the producer's first batches with it (AddPartitionsToTxn v4 verify_only: counted with the
    # producer's own AddPartitionsToTxn on the coordinator, none of which reach the others)
    for broker_id in {1, 2, 3} - {coordinator}:
        m = scrape(cluster.metrics_ports[broker_id])
        assert val(m, "odradek_requests_total", api="write_txn_markers") >= 3, broker_id
    m = scrape(cluster.metrics_ports[coordinator])
    assert val(m, "odradek_requests_total", api="write_txn_markers") == 0  # its own partition: written directly
    assert val(m, "odradek_requests_total", api="add_partitions_to_txn") >= 3 + 2 * 3

    # the coordinator's broker goes away: another replica of its __transaction_state partition
    # leads it, replays the id's state, and the producer carries on
    cluster.brokers[coordinator].stop()
    cluster.wait(
        lambda s: s.partition(TXN_STATE_TOPIC, partition_for(txn_id, TXN_PARTITIONS)).leader not in (-1, coordinator),
        30,
        "a new transaction coordinator",
    )
    for attempt in range(3):
        try:
            transaction(p, "c3")
            break
        except KafkaException as e:  # a partition whose leader was the stopped broker moves meanwhile
            if not e.args[0].retriable() or attempt == 2:
                raise
            time.sleep(1)
    committed |= {b"c3-0", b"c3-1", b"c3-2"}
    assert read_committed(cluster.bootstrap, expect=9, timeout=30) == committed
    # a second producer with the same id fences the first through the new coordinator
    q = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    q.init_transactions(60)
    with pytest.raises(KafkaException) as e:
        transaction(p, "zombie")
    assert e.value.args[0].fatal(), e.value
    transaction(q, "c4")
    committed |= {b"c4-0", b"c4-1", b"c4-2"}
    assert read_committed(cluster.bootstrap, expect=12, timeout=30) == committed
