"""The fault workload's tracing of duplicates (tests/support/fault_workload.py): the batches
that hold each copy, and which duplicates are a librdkafka epoch bump rather than the broker's."""

from __future__ import annotations

from confluent_kafka import Producer
from support.fault_workload import batch_origins, epoch_bumped


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
