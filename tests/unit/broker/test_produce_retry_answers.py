"""What a new leader answers an idempotent producer's retries (issue 25), as Kafka answers them.

Over real logs in a temporary directory: this broker copied, as a follower, what the old leader
wrote of one producer, then leads with the other replica out of the ISR (min.insync.replicas=2).

While its ISR is below min.insync.replicas, every acks=all request is NOT_ENOUGH_REPLICAS, the
retry of a batch it already has included: the ISR is checked before the producer state, as in
Kafka's Partition.appendRecordsToLeader. When the ISR grows back between two requests the
producer had in flight, the first was refused and the second, whose sequence follows the first's,
is OUT_OF_ORDER_SEQUENCE_NUMBER. Kafka answers the same. librdkafka takes that second answer for
a gap ("skipped sequence numbers", rdkafka_request.c) and bumps its producer epoch, renumbering
every partition's unacknowledged records from sequence 0, those a leader wrote but never answered
included: duplicates no broker can tell from new records (librdkafka#4953; the Java client
retries such a batch under the same epoch, and so does librdkafka's proposed fix, #4972).

Issue 25's run fits that (its brokers' logs and final logs): on partition 1 the writer's
unanswered batch reached no surviving replica and its records go on under epoch 1 from sequence
0; on partition 0 the batch the new leader had copied (epoch 0, sequences 1768-1769) follows
again under epoch 1. Both re-sends went to broker 1 while it led both partitions (09:24:43.0 to
52.2), and within that time the ISRs of all three partitions grew back from broker 1 alone to two
replicas within 7 ms of each other (43.821-43.828). The writer's own log, which would say which
answer it bumped on, was not kept then; the fault tests keep it now (`Writer.epoch_bumps`).
"""

from __future__ import annotations

import asyncio

from support.batches import batch

from odradek.broker.config import BrokerConfig
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.protocol.errors import ErrorCode
from odradek.storage import LogConfig, LogManager

PID = 7


def pbatch(seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return batch(n, producer_id=PID, producer_epoch=epoch, base_sequence=seq)


def snapshot(*infos: PartitionInfo) -> ClusterSnapshot:
    topic = TopicInfo("t", None, infos, {"min.insync.replicas": "2"})  # type: ignore[arg-type]
    return ClusterSnapshot("c", 1, (), {"t": topic})


def old_leaders_log(tmp_path, partition: int) -> tuple[bytes, list[tuple[int, int]]]:
    """What the old leader wrote: another producer's batch, then PID's sequences 0-9 in 5
    batches; returns its bytes and each of PID's batches' (first offset, last offset)."""
    m = LogManager([str(tmp_path / f"old-leader-{partition}")], LogConfig())
    m.load()
    try:
        lg = m.create_log("t", partition, LogConfig())
        lg.append(batch(1))
        offsets = []
        for seq in range(0, 10, 2):
            info = lg.append(pbatch(seq))
            offsets.append((info.first_offset, info.last_offset))
        return lg.read_bytes(0, 1 << 30, max_offset=lg.log_end_offset), offsets
    finally:
        m.shutdown()


def test_a_new_leader_answers_a_producers_retries_as_kafka(tmp_path, log_manager):
    """Partition 0: this broker copied PID's batches up to sequence 7; sequences 8-9 (r1) were
    written by the old leader alone and never answered, 10-11 (r2) were in flight after them.
    Partition 1: this broker copied everything, 8-9 included, also unanswered."""
    data0, offsets0 = old_leaders_log(tmp_path, 0)
    data1, offsets1 = old_leaders_log(tmp_path, 1)

    async def produce(rm: ReplicaManager, partition: int, records: bytes) -> tuple[int, int]:
        (r,) = await rm.append_records([("t", partition, records)], -1, 50)
        return r.error_code, r.base_offset

    async def main() -> None:
        rm = ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)
        following = snapshot(*(PartitionInfo(p, 2, (2, 1), (2, 1), leader_epoch=0) for p in (0, 1)))
        await rm.on_metadata(MetadataDelta(EMPTY_SNAPSHOT, following))
        p0, p1 = rm.partitions[("t", 0)], rm.partitions[("t", 1)]
        p0.append_as_follower(data0[: len(data0) - len(pbatch(8))], leader_hw=offsets0[-2][1] + 1, leader_log_start=0)
        p1.append_as_follower(data1, leader_hw=offsets1[-1][1] + 1, leader_log_start=0)
        assert p0.log_end_offset == offsets0[-1][0] and p1.log_end_offset == offsets1[-1][1] + 1
        # broker 2 died; this broker leads both, alone in the ISR
        alone = snapshot(*(PartitionInfo(p, 1, (2, 1), (1,), leader_epoch=1, partition_epoch=1) for p in (0, 1)))
        await rm.on_metadata(MetadataDelta(following, alone))
        assert p0.is_leader and p1.is_leader and p0.min_insync_replicas == 2
        r1, r2 = pbatch(8), pbatch(10)
        # below min.insync.replicas every acks=all append is refused, a batch it has included
        assert await produce(rm, 1, r1) == (ErrorCode.not_enough_replicas, -1)
        assert await produce(rm, 0, r1) == (ErrorCode.not_enough_replicas, -1)
        # broker 2 back in the ISR before r2 is handled: r2 follows r1, which was refused
        whole = snapshot(*(PartitionInfo(p, 1, (2, 1), (1, 2), leader_epoch=1, partition_epoch=2) for p in (0, 1)))
        await rm.on_metadata(MetadataDelta(alone, whole))
        assert (await produce(rm, 0, r2))[0] == ErrorCode.out_of_order_sequence_number
        # retried in order (Kafka's Java client; librdkafka with its fix, #4972): r1 written
        # once on partition 0 and answered with its original offset on partition 1
        code, base = await produce(rm, 0, r1)
        assert code in (0, ErrorCode.request_timed_out) and base == offsets0[-1][0]  # broker 2 never fetches here
        leo1 = p1.log_end_offset
        assert await produce(rm, 1, r1) == (0, offsets1[-1][0]) and p1.log_end_offset == leo1
        # librdkafka's way instead: its epoch bumped, partition 1's r1 renumbered from sequence
        # 0, which any broker must append as new records (Kafka's rule): written twice
        code, base = await produce(rm, 1, pbatch(0, epoch=1))
        assert code in (0, ErrorCode.request_timed_out) and base == leo1

    asyncio.run(main())
