"""Reading transactional data: Fetch's aborted transactions and last stable offset, ListOffsets
under read_committed, DescribeProducers, and a real client (confluent-kafka) over TCP.

Transactional batches are produced as a client would (Produce); markers are appended as the
transaction coordinator appends them (the replica manager, origin COORDINATOR), since the
coordinator is another branch's work."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from support.inprocess import InProcessBroker

from odradek.broker.registry import make
from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    iter_batches,
)
from odradek.storage import AppendOrigin

MS = datetime.timedelta(milliseconds=1)
NOW = 1_700_000_000_000


def nested(api_key: int, version: int, class_name: str, /, **fields):
    return make(getattr(messages.module_of(messages.request_class(api_key, version)), class_name), **fields)


def txn_batch(pid: int, seq: int, values: list[bytes], epoch: int = 0) -> bytes:
    recs = [Record(-1, NOW + i, None, v) for i, v in enumerate(values)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def plain(values: list[bytes]) -> bytes:
    return build_batch([Record(-1, NOW + i, None, v) for i, v in enumerate(values)])


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 3) -> bytes:
    ctype = CONTROL_COMMIT if commit else CONTROL_ABORT
    return build_control_batch(
        ctype,
        producer_id=pid,
        producer_epoch=epoch,
        timestamp=int(time.time() * 1000),
        coordinator_epoch=coordinator_epoch,
    )


async def create(b: InProcessBroker, name: str) -> object:
    t = nested(19, 7, "CreatableTopic", name=name, num_partitions=1, replication_factor=-1, assignments=(), configs=())
    r = await b.call(19, 7, topics=(t,), timeout=1000 * MS, validate_only=False)
    assert r.topics[0].error_code == 0
    return r.topics[0]


async def produce(b: InProcessBroker, topic: str, records: bytes) -> tuple[int, int]:
    pd = nested(0, 9, "PartitionProduceData", index=0, records=records)
    td = nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    r = await b.call(0, 9, transactional_id=None, acks=-1, timeout=1000 * MS, topic_data=(td,))
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


async def write_marker(b: InProcessBroker, topic: str, pid: int, commit: bool) -> None:
    rm = b.services.replica_manager
    (r,) = await rm.append_records([(topic, 0, marker(pid, commit))], -1, 1000, origin=AppendOrigin.COORDINATOR)
    assert r.error_code == 0, r.error_message


async def fetch(b: InProcessBroker, version: int, topic, offset: int, isolation: int):
    """One partition's Fetch answer, as the client reads it."""
    fp = nested(
        1,
        version,
        "FetchPartition",
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    ft = nested(1, version, "FetchTopic", topic=topic.name, topic_id=topic.topic_id, partitions=(fp,))
    r = await b.call(
        1,
        version,
        replica_id=-1,
        max_wait=0 * MS,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=(ft,),
        forgotten_topics_data=(),
        rack_id="",
    )
    return r.responses[0].partitions[0]


async def list_latest(b: InProcessBroker, topic: str, isolation: int) -> int:
    p = nested(2, 5, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1, timestamp=-1)
    t = nested(2, 5, "ListOffsetsTopic", name=topic, partitions=(p,))
    r = await b.call(2, 5, replica_id=-1, isolation_level=isolation, topics=(t,))
    return r.topics[0].partitions[0].offset


async def scenario(b: InProcessBroker, topic: str) -> dict[str, int]:
    """0: plain; 1-2 producer 100 (committed at 7); 3-4 producer 200 (aborted at 6); 5 plain;
    6 abort 200; 7 commit 100; 8 producer 300 (left open); 9 plain."""
    assert await produce(b, topic, plain([b"p0"])) == (0, 0)
    assert await produce(b, topic, txn_batch(100, 0, [b"c1", b"c2"])) == (0, 1)
    assert await produce(b, topic, txn_batch(200, 0, [b"a3", b"a4"])) == (0, 3)
    assert await produce(b, topic, plain([b"p5"])) == (0, 5)
    await write_marker(b, topic, 200, commit=False)  # 6
    await write_marker(b, topic, 100, commit=True)  # 7
    assert await produce(b, topic, txn_batch(300, 0, [b"o8"])) == (0, 8)
    assert await produce(b, topic, plain([b"p9"])) == (0, 9)
    return {"lso": 8, "hw": 10}


@pytest.mark.parametrize("version", [4, 5, 11, 12, 13, 16, 17, 18])
def test_fetch_answers_aborted_transactions_and_the_last_stable_offset(tmp_path, version):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            topic = await create(b, "tx")
            await scenario(b, "tx")
            committed = await fetch(b, version, topic, 0, isolation=1)
            assert committed.error_code == 0
            assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
            assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(200, 3)]
            assert committed.records is not None and committed.records  # up to the LSO
            batches = list(iter_batches(committed.records))
            assert batches[-1].last_offset == 7  # nothing at or past the LSO
            uncommitted = await fetch(b, version, topic, 0, isolation=0)
            assert uncommitted.aborted_transactions is None  # null, as Kafka, under read_uncommitted
            assert uncommitted.last_stable_offset == 8
            assert list(iter_batches(uncommitted.records))[-1].last_offset == 9
            # a read past the abort: an empty list, not null
            later = await fetch(b, version, topic, 7, isolation=1)
            assert later.aborted_transactions == () or later.aborted_transactions == []
            # nothing visible yet (at the LSO): an empty list too
            at_lso = await fetch(b, version, topic, 8, isolation=1)
            assert list(at_lso.aborted_transactions) == [] and not at_lso.records

    asyncio.run(main())


def test_list_offsets_latest_is_the_last_stable_offset_under_read_committed(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            await create(b, "tx")
            await scenario(b, "tx")
            assert await list_latest(b, "tx", 0) == 10
            assert await list_latest(b, "tx", 1) == 8
            await write_marker(b, "tx", 300, commit=True)
            assert await list_latest(b, "tx", 1) == 11

    asyncio.run(main())


def test_produced_control_batches_are_refused(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            await create(b, "tx")
            assert await produce(b, "tx", txn_batch(100, 0, [b"x"])) == (0, 0)
            code, _ = await produce(b, "tx", marker(100, commit=False))
            assert code == ErrorCode.invalid_record
            assert b.services.replica_manager.get_partition("tx", 0).log.log_end_offset == 1

    asyncio.run(main())


def test_describe_producers(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            await create(b, "tx")
            await scenario(b, "tx")
            t = nested(61, 0, "TopicRequest", name="tx", partition_indexes=(0, 7))
            r = await b.call(61, 0, topics=(t,))
            p0, p7 = r.topics[0].partitions
            assert p0.error_code == 0 and p7.error_code == ErrorCode.unknown_topic_or_partition
            by_id = {p.producer_id: p for p in p0.active_producers}
            assert sorted(by_id) == [100, 200, 300]
            assert (by_id[100].last_sequence, by_id[100].coordinator_epoch, by_id[100].current_txn_start_offset) == (
                1,
                3,
                -1,
            )
            assert by_id[200].current_txn_start_offset == -1 and by_id[200].coordinator_epoch == 3
            assert (by_id[300].last_sequence, by_id[300].current_txn_start_offset, by_id[300].coordinator_epoch) == (
                0,
                8,
                -1,
            )
            assert by_id[300].producer_epoch == 0 and by_id[300].last_timestamp == NOW
            t = nested(61, 0, "TopicRequest", name="nope", partition_indexes=(0,))
            r = await b.call(61, 0, topics=(t,))
            assert r.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition

    asyncio.run(main())


# ------------------------------------------------------------------ a real client over TCP
ck = pytest.importorskip("confluent_kafka")


def _consume(bootstrap: str, topic: str, isolation: str, want: int, settle_s: float) -> list[tuple[int, bytes]]:
    """Read from offset 0 until ``want`` records came, then ``settle_s`` more seconds (nothing
    else may come)."""
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 20
        settle_until = None
        while time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None:
                assert m.error() is None, m.error()
                out.append((m.offset(), m.value()))
            if len(out) >= want and settle_until is None:
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() >= settle_until:
                break
        return out
    finally:
        c.close()


def test_confluent_kafka_read_committed_and_read_uncommitted(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            await create(b, "tx")
            await scenario(b, "tx")
            host, port = b.broker.bound[0]
            bootstrap = f"{host}:{port}"
            uncommitted = await asyncio.to_thread(_consume, bootstrap, "tx", "read_uncommitted", 8, 0.5)
            assert uncommitted == [
                (0, b"p0"),
                (1, b"c1"),
                (2, b"c2"),
                (3, b"a3"),
                (4, b"a4"),
                (5, b"p5"),
                (8, b"o8"),
                (9, b"p9"),
            ]
            # aborted records filtered, markers hidden, nothing at or past the LSO (8)
            committed = await asyncio.to_thread(_consume, bootstrap, "tx", "read_committed", 4, 1.0)
            assert committed == [(0, b"p0"), (1, b"c1"), (2, b"c2"), (5, b"p5")]
            # producer 300 aborts too: read_committed now reads past it, skipping its record
            await write_marker(b, "tx", 300, commit=False)  # 10
            assert await produce(b, "tx", plain([b"p11"])) == (0, 11)
            committed = await asyncio.to_thread(_consume, bootstrap, "tx", "read_committed", 6, 0.5)
            assert committed == [(0, b"p0"), (1, b"c1"), (2, b"c2"), (5, b"p5"), (9, b"p9"), (11, b"p11")]

    asyncio.run(main())
