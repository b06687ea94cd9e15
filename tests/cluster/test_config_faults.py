"""A topic setting changed under replication: followers still copy what the leader accepted.

Issue 25's reproduction (replication audit §1, scenario A): a topic's `max.message.bytes` is
lowered after larger batches were written to it; a follower that has to copy those batches
again (here: its disk replaced, its log directory wiped) must append them as the leader wrote
them, and the other partitions it follows from the same leader must not wait on that one. It
returns to the ISR everywhere; then another broker is killed and acks=all writes go on with
the two left. Three brokers and a real ZooKeeper, replication factor 3, min.insync.replicas=2,
idempotent acks=all producers (librdkafka and Java) and a reader on the other topic throughout,
the history checked at the end (tests/support/checker.py).
"""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from support.fault_workload import ClusterFactory, Workload, create_topic, partition_size, produce_one

# serial, the whole module: a follower brought back into the ISR within bounds, as the other fault
# modules (scripts/test.sh)
pytestmark = [pytest.mark.cluster, pytest.mark.serial]

BIG = "big"
TOPIC = "t"  # the names of the reproduction
PARTITIONS = 12  # with BIG's one: the 13 partitions of the reproduction, all led by broker 1


@pytest.fixture
def make_cluster(tmp_path):
    with ClusterFactory(tmp_path) as make:
        yield make


def out_of_isr(cluster, broker: int) -> list[str]:  # noqa: ANN001
    snap = cluster.snapshot()
    return [f"{t}-{p.partition}" for t in (BIG, TOPIC) for p in snap.topics[t].partitions if broker not in p.isr]


@pytest.mark.parametrize(
    "kind",
    ["odradek", pytest.param("kafka39", marks=pytest.mark.kafka_case)],
)
def test_a_follower_refetching_batches_above_a_lowered_max_message_bytes(make_cluster, kind):
    c = make_cluster(kind)
    create_topic(c, BIG, [[1, 2, 3]], {"max.message.bytes": "2000000"})
    create_topic(c, TOPIC, [[1, 2, 3]] * PARTITIONS)
    big = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "message.max.bytes": 3000000})
    acked: list[int] = []
    for i in range(3):
        big.produce(
            BIG,
            bytes([i]) * 1_500_000,
            partition=0,
            on_delivery=lambda e, m: acked.append(m.offset()) if e is None else None,
        )
    big.flush(30)
    assert len(acked) == 3, "the 1.5 MB records were not acknowledged"

    with Workload(c.bootstrap, TOPIC, PARTITIONS) as w:
        time.sleep(2)
        # broker 3's disk replaced: killed, its log directory gone
        c.brokers[3].kill()
        shutil.rmtree(data_dir(c, 3))
        c.wait(
            lambda s: s.broker(3) is None and s.controller_id not in (3, -1),
            c.session_ms / 1000 + 15,
            "broker 3 gone, a controller elsewhere",
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        lowered = ConfigResource(
            ConfigResource.Type.TOPIC,
            BIG,
            incremental_configs=[
                ConfigEntry("max.message.bytes", "1000000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for f in admin.incremental_alter_configs([lowered], request_timeout=30).values():
            f.result()
        for i in range(5):  # more to BIG, under the new limit (and to TOPIC all along)
            assert produce_one(c.brokers[1].bootstrap, BIG, 0, b"small-%d" % i, acks=-1, timeout_ms=10000) == 0
        time.sleep(1)

        c.brokers[3].start(timeout=90)  # copies everything again from broker 1
        deadline = time.monotonic() + 45
        while missing := out_of_isr(c, 3):
            assert time.monotonic() < deadline, f"broker 3 not back in the ISR of {len(missing)} of 13: {missing}"
            time.sleep(0.2)

        c.brokers[2].kill()  # the ISR: broker 1 and broker 3 everywhere
        c.wait(
            lambda s: all(2 not in p.isr for t in (BIG, TOPIC) for p in s.topics[t].partitions),
            c.session_ms / 1000 + 15,
            "broker 2 out of every ISR",
        )
        since = time.monotonic()
        while (n := len({p for t, p in w.history.ack_times if t > since})) < PARTITIONS:
            assert time.monotonic() < since + 30, f"acks=all writes went on in {n} of {PARTITIONS} partitions"
            time.sleep(0.1)
        assert produce_one(c.brokers[1].bootstrap, BIG, 0, b"after", acks=-1, timeout_ms=10000) == 0
        c.brokers[2].start(timeout=90)
        time.sleep(2)
    w.check(c.logs(40))


def data_dir(cluster, broker: int):  # noqa: ANN001, ANN201
    b = cluster.brokers[broker]
    return b.data_dir if hasattr(b, "data_dir") else b.log_dirs


DISK = "disk"
BUSY = "busy"


def _write_until(bootstrap: str, topic: str, stop: threading.Event) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 1})
    while not stop.is_set():
        try:
            p.produce(topic, b"busy")
        except BufferError:
            pass
        p.poll(0.001)
    p.flush(10)


@pytest.mark.parametrize(
    "kind",
    ["odradek", pytest.param("kafka39", marks=pytest.mark.kafka_case)],
)
def test_a_replaced_disk_is_not_back_in_the_isr_before_it_is_copied(make_cluster, kind):
    """A follower's disk replaced (killed, its log directory wiped, started again) must copy the
    partition before it counts as in sync: the first moment ZooKeeper lists it in the ISR
    again, its copy is whole. Otherwise the ISR holds a replica without the acknowledged
    records, and losing the other two elects it (a clean election that loses everything)."""
    c = make_cluster(kind)
    create_topic(c, DISK, [[1, 2, 3]])
    create_topic(c, BUSY, [[1, 2]])
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20, "compression.type": "none"})
    record = bytes(range(256)) * 400  # 100 KB, incompressible enough
    for _ in range(500):  # 50 MB: copying it takes a follower a while
        while True:
            try:
                p.produce(DISK, record, partition=0)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    full = partition_size(c.brokers[1].bootstrap, DISK, 0)
    assert full >= 50_000_000, full
    c.brokers[3].kill()
    c.wait(
        lambda s: 3 not in s.topics[DISK].partitions[0].isr and s.controller_id not in (3, -1),
        c.session_ms / 1000 + 15,
        "broker 3 out of the ISR",
    )
    shutil.rmtree(data_dir(c, 3))
    # broker 2 fetching from broker 1 all the time (another topic written meanwhile), as on a
    # busy cluster: the leader reconsiders its ISR on each of those fetches
    busy = threading.Thread(target=_write_until, args=(c.bootstrap, BUSY, stop := threading.Event()), daemon=True)
    busy.start()
    try:
        c.brokers[3].start(timeout=90)
        snap = c.wait(lambda s: 3 in s.topics[DISK].partitions[0].isr, 60, "broker 3 back in the ISR")
        copied = partition_size(c.brokers[3].bootstrap, DISK, 0)
    finally:
        stop.set()
        busy.join(30)
    assert copied >= full, f"broker 3 in the ISR {snap.topics[DISK].partitions[0].isr} with {copied} of {full} bytes"
