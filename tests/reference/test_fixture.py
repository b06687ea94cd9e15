"""The Apache Kafka fixtures themselves (tests/support/apache_kafka.py): each mode starts and is the Kafka
it claims to be, real clients round-trip records through it, the 3-broker clusters place replicas
on three brokers, and Kafka's own tools run from the same classpath.

Session-scoped fixtures (started once, shared with every other reference test): topics here have
unique names.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid

import pytest
from support.clients import Rec, java_partition, make_client, unavailable_reason

pytestmark = pytest.mark.reference


def _one_worker(name: str):  # noqa: ANN202
    """`name`'s tests on one xdist worker (--dist loadgroup): a session-scoped Kafka starts once per
    worker that asks for it, 20 s (one broker) to 90 s (a cluster) of a loaded machine each. The
    few tests of the tier that use kafka39, kafka39_zk or a cluster are grouped by it; kafka4,
    which most use, starts on every worker anyway."""
    return name if name == "kafka4" else pytest.param(name, marks=pytest.mark.xdist_group(name))


SINGLE = [_one_worker(name) for name in ["kafka39", "kafka4", "kafka39_zk"]]
CLUSTERS = [_one_worker(name) for name in ["kafka_cluster", "kafka39_zk_cluster"]]
EXPECTED = {  # fixture -> (line, mode, brokers)
    "kafka39": ("3.9", "kraft", 1),
    "kafka4": ("4", "kraft", 1),
    "kafka39_zk": ("3.9", "zookeeper", 1),
    "kafka_cluster": ("4", "kraft", 3),
    "kafka39_zk_cluster": ("3.9", "zookeeper", 3),
}


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _records(n: int) -> list[Rec]:
    return [Rec(key=f"k{i}".encode(), value=f"value-{i}".encode(), headers=[("i", str(i).encode())]) for i in range(n)]


def _run(cmd: list[str], timeout: float = 120) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd[-8:]} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def _partitions_when_known(admin, topic: str, count: int, timeout: float = 15) -> dict:
    """The topic's partitions once the broker asked knows all of them (a new topic reaches each
    broker's metadata a moment after CreateTopics returns)."""
    deadline = time.monotonic() + timeout
    while True:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        parts = t.partitions if t is not None and t.error is None else {}
        if sorted(parts) == list(range(count)) or time.monotonic() > deadline:
            assert sorted(parts) == list(range(count)), f"{topic}: partitions {sorted(parts)}"
            return parts
        time.sleep(0.1)


@pytest.mark.parametrize("name", SINGLE + CLUSTERS)
def test_is_the_kafka_it_claims_to_be(request, name):
    k = request.getfixturevalue(name)
    line, mode, brokers = EXPECTED[name]
    assert (k.line, k.mode, len(k.nodes)) == (line, mode, brokers)
    assert k.version.startswith("3.9." if line == "3.9" else "4.")
    assert (k.zookeeper is not None) == (mode == "zookeeper")
    for n in k.nodes:
        log = n.log_path.read_text(errors="replace")
        assert f"Kafka version: {k.version}" in log
        # KRaft nodes run KafkaRaftServer; ZooKeeper-mode brokers run KafkaServer
        assert ("KafkaRaftServer" in log) == (mode == "kraft")
        assert ("[KafkaServer id=" in log) == (mode == "zookeeper")


@pytest.mark.parametrize("name", SINGLE)
def test_confluent_round_trip(request, name):
    k = request.getfixturevalue(name)
    c = make_client("confluent", k.bootstrap)
    topic = _topic("ref")
    c.create_topic(topic, 2)
    assert topic in c.list_topics()
    assert c.describe_topic(topic) == {0: 1, 1: 1}
    sent = _records(20)
    placed = c.produce(topic, sent)
    assert [p for p, _ in placed] == [java_partition(r.key, 2) for r in sent]
    got = c.consume(topic, expected=len(sent), timeout=30)
    assert sorted(r.content() for r in got) == sorted(r.content() for r in sent)
    assert {(r.partition, r.offset) for r in got} == set(placed)


def test_java_client_round_trip(kafka4):
    reason = unavailable_reason("java")
    if reason:
        pytest.skip(f"java: {reason}")
    c = make_client("java", kafka4.bootstrap)
    topic = _topic("ref-java")
    c.create_topic(topic, 1)
    sent = _records(10)
    assert [o for _, o in c.produce(topic, sent)] == list(range(10))
    got = c.consume(topic, expected=10, timeout=30)
    assert [r.content() for r in got] == [r.content() for r in sent]


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_places_replication_factor_3(request, name):
    from confluent_kafka.admin import AdminClient

    k = request.getfixturevalue(name)
    admin = AdminClient({"bootstrap.servers": k.bootstrap})
    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == set(k.bootstrap.split(","))

    c = make_client("confluent", k.bootstrap)
    topic = _topic("ref-rf3")
    c.create_topic(topic, 3, replication_factor=3)
    parts = _partitions_when_known(admin, topic, 3)
    for p in parts.values():
        assert sorted(p.replicas) == [1, 2, 3]
    assert {p.leader for p in parts.values()} == {1, 2, 3}  # Kafka spreads the preferred leaders

    sent = _records(30)
    c.produce(topic, sent, acks=-1)
    got = c.consume(topic, expected=30, timeout=30)
    assert sorted(r.content() for r in got) == sorted(r.content() for r in sent)
    isr = _partitions_when_known(admin, topic, 3)
    assert all(sorted(p.isrs) == [1, 2, 3] for p in isr.values())


@pytest.mark.parametrize("name", [_one_worker("kafka39"), "kafka4"])
def test_dump_log_segments_reads_what_was_written(request, name):
    """Kafka's DumpLogSegments (kafka.tools in 3.9, org.apache.kafka.tools in 4.x) from the same
    classpath reads the broker's own segment."""
    k = request.getfixturevalue(name)
    c = make_client("confluent", k.bootstrap)
    topic = _topic("ref-dump")
    c.create_topic(topic, 1)
    c.produce(topic, _records(5))
    segment = k.nodes[0].data_dir / f"{topic}-0" / "00000000000000000000.log"
    out = _run(k.tool_command("DumpLogSegments", "--files", str(segment), "--print-data-log"))
    assert f"Dumping {segment}" in out
    offsets = [int(m) for m in re.findall(r"\| offset: (\d+) ", out)]
    assert offsets == list(range(5))
    assert re.findall(r"payload: (\S+)", out) == [f"value-{i}" for i in range(5)]


def test_performance_tools_run(kafka4):
    topic = _topic("ref-perf")
    b = kafka4.bootstrap
    out = _run(
        kafka4.tool_command(
            "ProducerPerformance",
            *("--bootstrap-server", b, "--topic", topic),
            *("--num-records", "500", "--record-size", "100", "--throughput", "-1"),
        )
    )
    assert re.search(r"^500 records sent", out, re.M), out

    out = _run(
        kafka4.tool_command("ConsumerPerformance", "--bootstrap-server", b, "--topic", topic, "--messages", "500")
    )
    header, values = [ln for ln in out.splitlines() if ln.strip()][-2:]
    row = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in values.split(",")]))
    assert row["data.consumed.in.nMsg"] == "500", out

    out = _run(kafka4.tool_command("EndToEndLatency", b, _topic("ref-e2e"), "50", "all", "100"))
    assert re.search(r"Avg latency: [\d.]+ ms", out), out
