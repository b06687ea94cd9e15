"""The replica manager: partitions from metadata deltas, appends with acks, reads, purgatories."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from support.batches import batch

from odradek.broker.config import BrokerConfig
from odradek.broker.partition import Isolation
from odradek.broker.replica_manager import ReplicaManager, error_for
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import CorruptRecordError, InvalidRecordError
from odradek.storage import errors as serr

TOPIC_ID = uuid.uuid4()


class Hooks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int, int]] = []

    def on_elected(self, topic: str, partition: int, leader_epoch: int) -> None:
        self.calls.append(("elected", topic, partition, leader_epoch))

    def on_resigned(self, topic: str, partition: int, leader_epoch: int) -> None:
        self.calls.append(("resigned", topic, partition, leader_epoch))


def snapshot(*partitions: PartitionInfo, configs: dict | None = None) -> ClusterSnapshot:
    topics = {"t": TopicInfo("t", TOPIC_ID, tuple(partitions), configs or {})} if partitions else {}
    return ClusterSnapshot("c", 1, (), topics)


def manager(log_manager) -> tuple[ReplicaManager, Hooks]:
    rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)
    hooks = Hooks()
    rm.add_leadership_listener(hooks)
    return rm, hooks


async def apply(rm: ReplicaManager, before: ClusterSnapshot, after: ClusterSnapshot) -> ClusterSnapshot:
    await rm.on_metadata(MetadataDelta(before, after))
    return after


def test_partitions_follow_the_metadata(log_manager):
    async def main():
        rm, hooks = manager(log_manager)
        s1 = await apply(rm, EMPTY_SNAPSHOT, snapshot(PartitionInfo(0, 1, (1,), (1,)), PartitionInfo(1, 2, (2,), (2,))))
        # only the partition with a replica here is hosted; it has a log and leads
        assert list(rm.partitions) == [("t", 0)] and log_manager.get_log("t", 0) is not None
        assert log_manager.get_log("t", 1) is None
        assert hooks.calls == [("elected", "t", 0, 0)]
        s2 = await apply(
            rm, s1, snapshot(PartitionInfo(0, 2, (1, 2), (1, 2), leader_epoch=1), s1.topics["t"].partitions[1])
        )
        assert not rm.partitions[("t", 0)].is_leader
        assert hooks.calls[-1] == ("resigned", "t", 0, 0)
        s3 = await apply(
            rm, s2, snapshot(PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=2), s1.topics["t"].partitions[1])
        )
        assert rm.partitions[("t", 0)].is_leader and hooks.calls[-1] == ("elected", "t", 0, 2)
        await apply(rm, s3, EMPTY_SNAPSHOT)
        assert not rm.partitions and log_manager.get_log("t", 0) is None
        assert hooks.calls[-1] == ("resigned", "t", 0, 2)

    asyncio.run(main())


def test_topic_config_changes_reach_the_log_and_min_isr(log_manager):
    async def main():
        rm, _ = manager(log_manager)
        p0 = PartitionInfo(0, 1, (1,), (1,))
        s1 = await apply(rm, EMPTY_SNAPSHOT, snapshot(p0))
        await apply(rm, s1, snapshot(p0, configs={"retention.ms": "1000", "min.insync.replicas": "2"}))
        part = rm.partitions[("t", 0)]
        assert part.log.config.retention_ms == 1000 and part.min_insync_replicas == 2
        (r,) = await rm.append_records([("t", 0, batch(1))], -1, 1000)
        assert r.error_code == ErrorCode.not_enough_replicas

    asyncio.run(main())


def test_acks_all_waits_for_the_isr_and_a_consumer_sees_only_what_it_has(log_manager):
    async def main():
        rm, _ = manager(log_manager)
        await apply(rm, EMPTY_SNAPSHOT, snapshot(PartitionInfo(0, 1, (1, 2), (1, 2))))
        produce = asyncio.ensure_future(rm.append_records([("t", 0, batch(3))], -1, 5000))
        await asyncio.sleep(0.01)
        assert not produce.done() and len(rm.produce_purgatory) == 1
        # a consumer sees nothing yet and waits in the fetch purgatory; the append did not wake it
        r = rm.read("t", 0, 0, 1 << 20, min_one=True)
        assert r.error_code == 0 and r.regions == [] and r.high_watermark == 0
        fetch = rm.fetch_purgatory.watch([("t", 0)], 5.0, target=1)
        await asyncio.sleep(0.01)
        assert not fetch.done
        # the follower fetches from offset 3: it has the batch; the high watermark moves
        f = rm.read("t", 0, 3, 1 << 20, min_one=True, replica_id=2)
        assert f.error_code == 0
        (result,) = await asyncio.wait_for(produce, 1)
        assert (result.error_code, result.base_offset, result.last_offset) == (0, 0, 2)
        assert await fetch.wait() is True
        r = rm.read("t", 0, 0, 1 << 20, min_one=True)
        assert r.high_watermark == 3 and r.first_offset == 0 and r.next_offset == 3

    asyncio.run(main())


def test_acks_all_times_out_and_fails_on_lost_leadership(log_manager):
    async def main():
        rm, _ = manager(log_manager)
        s1 = await apply(rm, EMPTY_SNAPSHOT, snapshot(PartitionInfo(0, 1, (1, 2), (1, 2))))
        (r,) = await rm.append_records([("t", 0, batch(1))], -1, 20)
        assert r.error_code == ErrorCode.request_timed_out
        waiting = asyncio.ensure_future(rm.append_records([("t", 0, batch(1))], -1, 5000))
        await asyncio.sleep(0.01)
        await apply(rm, s1, snapshot(PartitionInfo(0, 2, (1, 2), (1, 2), leader_epoch=1)))
        (r,) = await asyncio.wait_for(waiting, 1)
        assert r.error_code == ErrorCode.not_leader_or_follower
        (r,) = await rm.append_records([("t", 0, batch(1))], 1, 20)
        assert r.error_code == ErrorCode.not_leader_or_follower

    asyncio.run(main())


def test_reads_offsets_and_deletes_are_fenced_and_need_the_leader(log_manager):
    async def main():
        rm, _ = manager(log_manager)
        await apply(rm, EMPTY_SNAPSHOT, snapshot(PartitionInfo(0, 1, (1,), (1,), leader_epoch=4)))
        now = int(time.time() * 1000)  # (older records would go by retention.ms when records are deleted)
        await rm.append_records([("t", 0, batch(2, ts=now))], 1, 1000)
        assert rm.read("t", 0, 0, 100, min_one=True, current_leader_epoch=3).error_code == ErrorCode.fenced_leader_epoch
        assert (
            rm.read("t", 0, 0, 100, min_one=True, current_leader_epoch=5).error_code == ErrorCode.unknown_leader_epoch
        )
        assert rm.read("t", 0, 9, 100, min_one=True).error_code == ErrorCode.offset_out_of_range
        assert rm.read("t", 9, 0, 100, min_one=True).error_code == ErrorCode.unknown_topic_or_partition
        assert rm.list_offset("t", 0, now + 1, Isolation.HIGH_WATERMARK, 4) == (0, now + 1, 1, 4)
        assert rm.list_offset("t", 0, -1, Isolation.HIGH_WATERMARK, 3)[0] == ErrorCode.fenced_leader_epoch
        assert rm.last_offset_for_leader_epoch("t", 0, 4, 4) == (0, 4, 2)
        assert rm.delete_records("t", 0, 1) == (0, 1)
        assert rm.delete_records("t", 0, 5)[0] == ErrorCode.offset_out_of_range

    asyncio.run(main())


@pytest.mark.parametrize(
    "exc,code",
    [
        (serr.StorageOffsetOutOfRangeError(), ErrorCode.offset_out_of_range),
        (CorruptRecordError("crc"), ErrorCode.corrupt_message),
        (InvalidRecordError("key"), ErrorCode.invalid_record),
        (serr.StorageRecordTooLargeError(), ErrorCode.message_too_large),
        (serr.StorageOutOfOrderSequenceError(), ErrorCode.out_of_order_sequence_number),
        (serr.StorageInvalidProducerEpochError(), ErrorCode.invalid_producer_epoch),
        (serr.StorageInvalidTimestampError(), ErrorCode.invalid_timestamp),
        (serr.KafkaStorageError(), ErrorCode.kafka_storage_error),
        (serr.StorageError(), ErrorCode.kafka_storage_error),
        (RuntimeError("a bug"), ErrorCode.unknown_server_error),
    ],
)
def test_storage_errors_map_to_codes_by_class(exc, code):
    assert error_for(exc) == code


def test_describe_log_dirs_lists_hosted_partitions(log_manager):
    async def main():
        rm, _ = manager(log_manager)
        await apply(rm, EMPTY_SNAPSHOT, snapshot(PartitionInfo(0, 1, (1,), (1,)), PartitionInfo(1, 1, (1,), (1,))))
        await rm.append_records([("t", 1, batch(1))], 1, 1000)
        (d,) = rm.describe_log_dirs(None)
        assert not d.offline and [(t, p) for t, p, _ in d.partitions] == [("t", 0), ("t", 1)]
        assert d.partitions[1][2] > 0 == d.partitions[0][2] and d.total_bytes > 0
        (d,) = rm.describe_log_dirs({"t": {1}})
        assert [(t, p) for t, p, _ in d.partitions] == [("t", 1)]

    asyncio.run(main())


def test_a_broker_leads_the_state_given_to_it_once_its_registration_is_in_the_metadata(log_manager):
    """Issue 25: a broker started again applies the states before it registers (its epoch
    unknown, -1); one whose ISR admitted the registration it then creates (epoch 77) is led
    as soon as the metadata shows that registration, though the state itself did not change."""
    from odradek.cluster.metadata import BrokerInfo

    async def main():
        rm, hooks = manager(log_manager)
        state = PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=3, isr_epochs=(77, 55))
        before = ClusterSnapshot("c", 2, (BrokerInfo(1, "h", 1, epoch=-1), BrokerInfo(2, "h", 2, epoch=55)), {})
        before = ClusterSnapshot("c", 2, before.brokers, snapshot(state).topics)
        await apply(rm, EMPTY_SNAPSHOT, before)
        assert not rm.partitions[("t", 0)].is_leader and hooks.calls == []
        registered = ClusterSnapshot("c", 2, (BrokerInfo(1, "h", 1, epoch=77), before.brokers[1]), before.topics)
        await apply(rm, before, registered)
        assert rm.partitions[("t", 0)].is_leader and hooks.calls == [("elected", "t", 0, 3)]

    asyncio.run(main())
