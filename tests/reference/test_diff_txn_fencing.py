"""A fenced producer's KIP-360 epoch bump, answered as Apache Kafka 4.x answers it.

A transactional producer replaced by a new one with the same transactional.id (the zombie) may
send InitProducerId carrying its old producer id and epoch: clients that answer a produce error
with an epoch bump do (kafka-python 3.x after INVALID_PRODUCER_EPOCH). The coordinator checks
only the producer id before acting on the state (Kafka's ``prepareInitProducerIdTransit``):
while the new producer's transaction is open it fences that transaction with a bumped epoch and
answers CONCURRENT_TRANSACTIONS, so the new producer's EndTxn gets PRODUCER_FENCED; once the
transaction has ended, the old epoch matches neither the current nor the last one and the bump
itself is answered PRODUCER_FENCED. tests/interop/txn/test_clients.py::test_zombie_is_fenced
closes the zombie before the new producer begins for this reason.
"""

from __future__ import annotations

import time

import pytest
from support.diff import Pair, Target, unique

pytestmark = pytest.mark.reference

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN, FIND_COORDINATOR, CREATE_TOPICS = 22, 24, 26, 10, 19
RETRIABLE = {14, 15, 16, 51}  # coordinator load in progress / not available, not coordinator, concurrent


def _retry(call, error_of, attempts: int = 100):
    for _ in range(attempts):
        r = call()
        if error_of(r) not in RETRIABLE:
            return r
        time.sleep(0.2)
    return r


def _scenario(t: Target, topic: str, tid: str, end_new_first: bool) -> dict:
    from support.raw import nested

    with t.raw() as c:
        topic_req = nested(
            CREATE_TOPICS,
            7,
            "CreatableTopic",
            name=topic,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        c.call(CREATE_TOPICS, 7, topics=(topic_req,), timeout=15000, validate_only=False)
        _retry(
            lambda: c.call(FIND_COORDINATOR, 4, key_type=1, coordinator_keys=[tid]),
            lambda r: r.coordinators[0].error_code,
        )

        def init(pid: int = -1, epoch: int = -1, retry: bool = True):
            def call():
                return c.call(
                    INIT_PRODUCER_ID,
                    4,
                    transactional_id=tid,
                    transaction_timeout=60000,
                    producer_id=pid,
                    producer_epoch=epoch,
                )

            return _retry(call, lambda r: r.error_code) if retry else call()

        def add(pid: int, epoch: int) -> int:
            part = nested(ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic", name=topic, partitions=[0])

            def call():
                return c.call(
                    ADD_PARTITIONS_TO_TXN,
                    3,
                    v3_and_below_transactional_id=tid,
                    v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=[part],
                )

            r = _retry(call, lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
            return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)

        def end(pid: int, epoch: int) -> int:
            return int(
                c.call(
                    END_TXN, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
                ).error_code
            )

        old = init()
        new_first = None
        out = {"old add": add(old.producer_id, old.producer_epoch)}
        new = init()  # fences the old producer: its transaction is aborted, the epoch bumped twice
        out["new init"] = (int(new.error_code), new.producer_epoch - old.producer_epoch)
        out["new add"] = add(new.producer_id, new.producer_epoch)
        if end_new_first:
            new_first = end(new.producer_id, new.producer_epoch)
            out["new commit before the bump"] = new_first
        bump = init(old.producer_id, old.producer_epoch, retry=end_new_first)
        out["zombie bump"] = int(bump.error_code)
        if not end_new_first:
            time.sleep(1)  # the fencing abort's markers
            out["new commit after the bump"] = end(new.producer_id, new.producer_epoch)
        return out


def test_a_zombie_epoch_bump_during_the_new_producers_transaction_fences_it(pair: Pair):
    topic, tid = unique("fence-bump"), unique("fence-bump-tid")
    got = pair.same(lambda t: _scenario(t, topic, tid, end_new_first=False))
    assert got == {
        "old add": 0,
        "new init": [0, 2],
        "new add": 0,
        "zombie bump": 51,  # CONCURRENT_TRANSACTIONS: the new producer's transaction is being aborted
        "new commit after the bump": 90,  # PRODUCER_FENCED
    }


def test_a_zombie_epoch_bump_after_the_new_producers_transaction_is_fenced(pair: Pair):
    topic, tid = unique("fence-bump-late"), unique("fence-bump-late-tid")
    got = pair.same(lambda t: _scenario(t, topic, tid, end_new_first=True))
    assert got == {
        "old add": 0,
        "new init": [0, 2],
        "new add": 0,
        "new commit before the bump": 0,
        "zombie bump": 90,
    }
