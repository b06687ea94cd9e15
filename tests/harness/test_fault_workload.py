"""The fault workload's tracing of duplicates (tests/support/fault_workload.py): the batches
that hold each copy, which duplicates are a librdkafka epoch bump rather than the broker's, and
why librdkafka bumped (its eos log, kept by each writer)."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.checker import History
from support.fault_workload import Writer, batch_origins, epoch_bumped


def test_an_epoch_bump_is_one_producer_id_under_rising_epochs():
    assert epoch_bumped([(7, 0, 12), (7, 1, 0)])
    assert epoch_bumped([(7, 0, 12), (7, 1, 0), (7, 3, 4)])
    assert not epoch_bumped([(7, 0, 12), (7, 0, 12)])  # one epoch: the broker's idempotence failed
    assert not epoch_bumped([(7, 1, 0), (7, 0, 12)])  # the later copy under the older epoch
    assert not epoch_bumped([(7, 0, 12), (8, 0, 12)])  # two producer ids
    assert not epoch_bumped([(7, 0, 12), None])  # a copy not traced


def test_batch_origins_name_each_records_producer_epoch_and_sequence(broker):
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(30):
        p.produce("origins", str(i).encode(), partition=0)
        if i == 9:
            p.flush(10)  # a second batch
    assert p.flush(10) == 0
    found = batch_origins(broker.bootstrap, "origins", 0, [0, 9, 10, 29, 30])
    assert sorted(found) == [0, 9, 10, 29]  # 30 is past the end
    assert {pid for pid, _e, _s in found.values()} == {found[0][0]} and found[0][0] >= 0
    assert [found[o][1:] for o in (0, 9, 10, 29)] == [(0, 0), (0, 9), (0, 10), (0, 29)]


def test_a_writer_keeps_why_librdkafka_bumped_its_producer_epoch(broker):
    """acks=all on a topic whose min.insync.replicas is above its replicas: NOT_ENOUGH_REPLICAS
    until message.timeout.ms, and a message timeout makes librdkafka bump its producer epoch
    (rdkafka_broker.c: the sequence would have a gap). The writer keeps the lines saying so."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic("stuck", 1, 1, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])["stuck"].result(20)
    w = Writer(broker.bootstrap, History(), "w", "stuck", 1, message_timeout_ms=1500)
    w.start()
    try:
        deadline = time.monotonic() + 30
        while not any("bumped epoch" in line for line in w.epoch_bumps):
            assert time.monotonic() < deadline, f"no epoch bump logged: {w.epoch_bumps}, errors {w.errors[:3]}"
            time.sleep(0.2)
    finally:
        w.abort()
        w.join(20)
    assert any("timed out" in line for line in w.epoch_bumps), w.epoch_bumps
    assert w.errors and "timed out" in w.errors[0], w.errors[:3]
