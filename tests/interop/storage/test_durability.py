"""Acknowledged data survives: a graceful stop, and kill -9 in the middle of a produce load."""

from __future__ import annotations

import os
import threading
import time

import pytest

pytestmark = pytest.mark.interop
confluent_kafka = pytest.importorskip("confluent_kafka")


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, from the start to the current end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "verify",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    ends = {}
    for p in range(partitions):
        _low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        ends[p] = high
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.time() + 60
    while any(len(out[p]) < ends[p] for p in out) and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out[m.partition()].append((m.offset(), m.value()))
    c.close()
    return out


def _create(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(15)


def test_kill_9_during_produce_keeps_every_acknowledged_record(broker_factory):
    b = broker_factory(overrides={"log.flush.interval.messages": "1"})
    topic, partitions = "crash", 3
    _create(b.bootstrap, topic, partitions)
    from confluent_kafka import Producer

    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 5000,
                "retries": 0,
                "enable.idempotence": False,
            }
        )

        def done(err, msg):
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))

        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, f"record-{i}".encode(), key=str(i % 17).encode(), on_delivery=done)
                i += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        p.flush(6)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    deadline = time.time() + 30
    while len(acked) < 3000 and time.time() < deadline:
        time.sleep(0.05)
    b.kill()  # SIGKILL mid-load: no flush, no checkpoints, no clean-shutdown marker
    stop.set()
    t.join(20)
    assert len(acked) >= 3000, "the load never got going"
    b.start()
    assert "after an unclean stop" in b.log_tail(200)
    got = _read_all(b.bootstrap, topic, partitions)
    stored = {(p, off): v for p, recs in got.items() for off, v in recs}
    missing = [(p, off) for p, off, v in acked if stored.get((p, off)) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:5]}"
    for _p, recs in got.items():  # dense offsets: nothing garbled in between
        assert [off for off, _ in recs] == list(range(len(recs)))


def test_sigterm_is_clean_and_restart_serves_everything(broker_factory):
    b = broker_factory()
    topic = "graceful"
    _create(b.bootstrap, topic, 2)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(1000):
        p.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert p.flush(15) == 0
    assert b.stop() == 0
    data_dir = str(b.log_dirs)
    assert os.path.exists(os.path.join(data_dir, ".kafka_cleanshutdown"))
    b.start()
    assert "(clean shutdown)" in b.log_tail(200)  # recovery trusted the marker
    got = _read_all(b.bootstrap, topic, 2)
    assert sum(len(v) for v in got.values()) == 1000
    assert sorted(v for recs in got.values() for _o, v in recs) == sorted(f"v{i}".encode() for i in range(1000))


def test_log_append_time_topic(broker_factory):
    b = broker_factory()
    topic = "lat"
    _create(b.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": b.bootstrap})
    before = int(time.time() * 1000)
    p.produce(topic, b"x", timestamp=1_000_000)  # a create time far in the past
    p.flush(10)
    after = int(time.time() * 1000)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    m = None
    deadline = time.time() + 15
    while m is None and time.time() < deadline:
        m = c.poll(0.5)
    c.close()
    assert m is not None and not m.error()
    ts_type, ts = m.timestamp()
    assert ts_type == TIMESTAMP_LOG_APPEND_TIME
    assert before - 1000 <= ts <= after + 1000


def test_unknown_setting_stops_startup_naming_it(broker_factory):
    from support.broker import BrokerStartError

    with pytest.raises(BrokerStartError) as err:
        broker_factory(overrides={"log.retention.hourz": "5"})
    assert "log.retention.hourz" in str(err.value)
    with pytest.raises(BrokerStartError) as err:
        broker_factory(overrides={"num.partitions": "lots"})
    assert "num.partitions" in str(err.value)


@pytest.mark.serial  # timed: alone in its tier (tests/README.md)
def test_sigterm_answers_a_waiting_long_poll_and_exits_promptly(broker):
    from support.raw import RawConnection, nested

    with RawConnection(broker.bootstrap) as c:
        t = nested(
            19, 7, "CreatableTopic", name="lp", num_partitions=1, replication_factor=1, assignments=(), configs=()
        )
        c.call(19, 7, topics=(t,), timeout=10000, validate_only=False)
        fp = nested(
            1,
            12,
            "FetchPartition",
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        ft = nested(1, 12, "FetchTopic", topic="lp", partitions=(fp,))
        from support.raw import request

        c.send(
            1,
            12,
            request(
                1,
                12,
                replica_id=-1,
                max_wait=60_000,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(ft,),
                forgotten_topics_data=(),
                rack_id="",
            ),
        )
        time.sleep(0.5)  # the fetch is now waiting in the purgatory
        started = time.time()
        assert broker.stop() == 0
        assert time.time() - started < 8  # not the fetch's 60 s max wait
        _corr, resp = c.recv(1, 12)  # the in-flight request got its answer before the close
        assert int(resp.responses[0].partitions[0].error_code) == 0
