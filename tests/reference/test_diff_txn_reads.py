"""Transactional data read back as Apache Kafka 4.x reads it: the same batches give the same
``.txnindex`` bytes and the same read_committed Fetch answer.

Kafka's own transactional producers (confluent-kafka) write interleaved transactions to Kafka:
one aborted while another producer's is open, a plain record, commits, a final abort. The
partition's batches, markers included, are read back from Kafka and appended to an in-process
odradek broker in the same order (data as Produce appends it, markers as the transaction
coordinator does: origin COORDINATOR), so both logs hold the same batches at the same offsets.
Then Kafka's ``.txnindex`` file equals odradek's byte for byte (the last stable offsets Kafka
computed included), and a read_committed Fetch from each offset gets the same high watermark,
last stable offset, aborted transactions and batches from both; read_uncommitted gets null
aborted transactions from both. DescribeProducers answers the same producer states."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.inprocess import InProcessBroker
from support.raw import RawConnection, nested

from odradek.protocol.records import iter_batches
from odradek.storage import AppendOrigin

pytestmark = pytest.mark.reference

FETCH_V = 12


def fetch_request(topic: str, offset: int, isolation: int) -> dict:
    fp = nested(
        1,
        FETCH_V,
        "FetchPartition",
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    ft = nested(1, FETCH_V, "FetchTopic", topic=topic, partitions=(fp,))
    return dict(
        replica_id=-1,
        max_wait=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=(ft,),
        forgotten_topics_data=(),
        rack_id="",
    )


def summary(part) -> tuple:
    aborted = (
        None
        if part.aborted_transactions is None
        else [(a.producer_id, a.first_offset) for a in part.aborted_transactions]
    )
    offsets = [(h.base_offset, h.last_offset, h.is_control) for h in iter_batches(part.records or b"")]
    return part.error_code, part.high_watermark, part.last_stable_offset, aborted, offsets


def producers(response) -> list[tuple]:
    (part,) = response.topics[0].partitions
    assert part.error_code == 0
    return sorted(
        (
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            p.last_timestamp,
            p.coordinator_epoch,
            p.current_txn_start_offset,
        )
        for p in part.active_producers
    )


def write_transactions(bootstrap: str, topic: str) -> None:
    def txn_producer(tid: str) -> Producer:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
        p.init_transactions(30)
        return p

    p1 = txn_producer(f"{topic}-p1")
    p2 = txn_producer(f"{topic}-p2")
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def send(p: Producer, value: bytes) -> None:
        p.produce(topic, value, partition=0)
        assert p.flush(30) == 0

    p1.begin_transaction()
    send(p1, b"p1-aborted-a")
    send(p1, b"p1-aborted-b")
    p2.begin_transaction()
    send(p2, b"p2-committed-x")
    p1.abort_transaction(30)  # while p2's transaction is open: its entry's LSO is p2's first offset
    send(plain, b"plain")
    p2.commit_transaction(30)
    p1.begin_transaction()
    send(p1, b"p1-committed-c")
    p1.commit_transaction(30)
    p1.begin_transaction()
    send(p1, b"p1-aborted-d")
    p1.abort_transaction(30)


def test_txnindex_and_read_committed_fetch_match_kafka(kafka4, tmp_path):
    topic = f"txr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka4.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    write_transactions(kafka4.bootstrap, topic)
    with RawConnection(kafka4.bootstrap) as kc:
        deadline = time.monotonic() + 30
        while True:  # until the last marker is below Kafka's high watermark and its LSO caught up
            k_all = kc.call(1, FETCH_V, **fetch_request(topic, 0, 0)).responses[0].partitions[0]
            if k_all.last_stable_offset == k_all.high_watermark or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert k_all.error_code == 0 and k_all.last_stable_offset == k_all.high_watermark
        batches = list(iter_batches(k_all.records))
        assert [h.is_control for h in batches].count(True) == 4  # two aborts, two commits
        end = k_all.high_watermark
        kafka_fetches = {
            (o, iso): summary(kc.call(1, FETCH_V, **fetch_request(topic, o, iso)).responses[0].partitions[0])
            for o in range(end + 1)
            for iso in (0, 1)
        }
        describe = {"topics": (nested(61, 0, "TopicRequest", name=topic, partition_indexes=(0,)),)}
        kafka_producers = producers(kc.call(61, 0, **describe))
    assert len(kafka_producers) == 2
    kafka_index = Path(kafka4.nodes[0].data_dir, f"{topic}-0", "00000000000000000000.txnindex").read_bytes()
    assert len(kafka_index) == 2 * 34

    async def odradek() -> tuple[bytes, dict, list]:
        async with InProcessBroker(tmp_path / "odradek") as b:
            t = nested(
                19, 7, "CreatableTopic", name=topic, num_partitions=1, replication_factor=-1, assignments=(), configs=()
            )
            assert (await b.call(19, 7, topics=(t,), timeout=1000, validate_only=False)).topics[0].error_code == 0
            rm = b.services.replica_manager
            raw = bytes(k_all.records)
            for h in batches:
                origin = AppendOrigin.COORDINATOR if h.is_control else AppendOrigin.CLIENT
                (r,) = await rm.append_records(
                    [(topic, 0, raw[h.position : h.position + h.size])], -1, 1000, origin=origin
                )
                assert (r.error_code, r.base_offset) == (0, h.base_offset), r.error_message
            lg = rm.get_partition(topic, 0).log
            index = b"".join(e.encode() for s in lg.segments for e in s.txn_index.entries)
            assert Path(lg.active_segment.txn_index.path).read_bytes() == index
            got = {}
            for o in range(end + 1):
                for iso in (0, 1):
                    r = await b.call(1, FETCH_V, **fetch_request(topic, o, iso))
                    got[(o, iso)] = summary(r.responses[0].partitions[0])
            return index, got, producers(await b.call(61, 0, **describe))

    index, odradek_fetches, odradek_producers = asyncio.run(odradek())
    assert index == kafka_index
    assert odradek_fetches == kafka_fetches
    assert odradek_producers == kafka_producers
