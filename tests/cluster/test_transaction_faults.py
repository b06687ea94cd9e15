"""Exactly-once in a 3-broker cluster under kill -9 (issue #15): the consume-transform-produce
loop of tests/interop/txn/test_faults.py (read_committed, one transaction per poll; with the Java
client and with odradek's client)
over topics with replication factor 3 and min.insync.replicas=2, while the broker that is the
loop's transaction coordinator, then the broker leading an output partition, is killed and
restarted; then the read_committed output is checked (tests/support/txn_checker.py).

Against Apache Kafka 4.4 (3 KRaft nodes; the Java loop only unless ODRADEK_TXN_FAULT_ALL=1, for
CI's time) and odradek (3 brokers + ZooKeeper).
"""

from __future__ import annotations

import os
import random
import time

import pytest
from support.odradek_cluster import OdradekCluster
from support.txn_clients import unavailable_reason
from support.txn_pipeline import (
    LOOP_CLIENTS,
    Pipeline,
    partition_leader,
    skip_odradek_loop_on_kafka,
    transaction_coordinator,
)

# serial, the whole module: a coordinator and leaders killed under a transactional loop, as the
# other fault modules (scripts/test.sh)
pytestmark = [pytest.mark.cluster, pytest.mark.serial]

RECORDS = int(os.environ.get("ODRADEK_TXN_FAULT_RECORDS", "1200"))


class Cluster:
    """Three brokers of either kind, each to kill -9 and restart by node id."""

    def __init__(self, kind: str, handle) -> None:
        self.kind = kind
        self.handle = handle

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    def node(self, node_id: int):
        if self.kind == "kafka4":
            return next(n for n in self.handle.nodes if n.node_id == node_id)
        return self.handle.brokers[node_id]


@pytest.fixture(
    params=[
        pytest.param("kafka4", id="kafka4", marks=pytest.mark.kafka_case),
        pytest.param("odradek", id="odradek"),
    ]
)
def cluster(request, tmp_path):
    reason = unavailable_reason("java")
    if reason:
        pytest.skip(f"java: {reason}")
    skip_odradek_loop_on_kafka(request.getfixturevalue("client"), request.param)  # before Kafka starts
    if request.param == "kafka4":
        yield Cluster("kafka4", request.getfixturevalue("kafka_factory")(brokers=3))
        return
    c = OdradekCluster(tmp_path / "odradek", brokers=3).start()
    try:
        yield Cluster("odradek", c)
    finally:
        c.stop()


@pytest.mark.parametrize("client", LOOP_CLIENTS, ids=[f"{c}-loop" for c in LOOP_CLIENTS])
def test_coordinator_and_leader_killed(client, cluster, tmp_path):
    rng = random.Random(int(os.environ.get("ODRADEK_FAULT_SEED", "0")) or None)
    pipe = Pipeline(cluster.bootstrap, tmp_path / "pipe", records=RECORDS, replication_factor=3, client=client)
    killed = []
    try:
        loop = pipe.start_loop()
        for victim in ("coordinator", "leader"):
            loop = pipe.run_until(loop, rng.randint(2, 5), timeout=120)
            if victim == "coordinator":
                node_id = transaction_coordinator(cluster.bootstrap, pipe.transactional_id)
            else:
                node_id = partition_leader(cluster.bootstrap, pipe.output, 0)
            killed.append((victim, node_id))
            node = cluster.node(node_id)
            node.kill()
            time.sleep(rng.uniform(1.0, 3.0))  # the loop runs on with the other two meanwhile
            node.start(timeout=120)
        loop.kill()
        pipe.drain(timeout=240)
        report = pipe.check()
        print(killed, report)
        assert report.ok, f"{report}\nkilled {killed}\nloops: {pipe.describe()}"
        assert report.transactions.get("aborted", 0) >= 1
        assert pipe.committed_offsets() == pipe.input_ends(), pipe.describe()
    finally:
        pipe.stop()
