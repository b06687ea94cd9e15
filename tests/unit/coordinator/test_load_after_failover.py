"""A coordinator elected on a follower loads its partition up to the log end offset, not the
high watermark it knows (Kafka's loaders read with FetchIsolation.LOG_END).

A follower learns the high watermark from the leader's next fetch response, so right after
the leader dies its own high watermark can lag its log: the tail holds records the old
leader had committed and answered for (here the transaction's COMMIT marker that followed
a TxnOffsetCommit). A load that stopped at the high watermark left those offsets pending
forever (OffsetFetch with require_stable answered UNSTABLE_OFFSET_COMMIT, and a later ABORT
marker of the same producer dropped them: the consume-transform-produce loop restarted
from older offsets and duplicated its output; tests/cluster/test_transaction_faults.py).

The tail may as well hold records no leader committed: the old leader appended them and
died before every in-sync follower had them (simulator seed 12391: broker 3, elected with
offsets committed by a member above its high watermark, answered OffsetFetch with them; the
next coordinator, elected cleanly from a follower without them, answered the older ones). So
the coordinator answers reads from such a shard COORDINATOR_LOAD_IN_PROGRESS until the high
watermark reaches what it loaded (coordinator/runtime.py, "Reads of committed state").

Real parts: a ReplicaManager over a real LogManager, the replica appended as a follower
(the fetcher's path), then leadership moved to this broker through a metadata delta.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import EMPTY_SNAPSHOT, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.coordinator.group import GroupConfig, GroupCoordinator
from odradek.coordinator.group.records import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_value,
    encode_offset_value,
)
from odradek.coordinator.group.records import encode_key as encode_offset_key
from odradek.coordinator.group.requests import HeartbeatRequest, SyncRequest
from odradek.coordinator.txn import TransactionCoordinator, TxnConfig
from odradek.coordinator.txn.records import TXN_STATE_TOPIC, TxnLogValue
from odradek.coordinator.txn.records import encode_key as encode_txn_key
from odradek.coordinator.txn.records import encode_value as encode_txn_value
from odradek.coordinator.txn.state import TxnState
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.records import CONTROL_COMMIT, Record, build_batch, build_control_batch
from odradek.storage import LogConfig, LogManager

PID, EPOCH = 1000, 0
TOPIC_IDS = {OFFSETS_TOPIC: uuid.uuid4(), TXN_STATE_TOPIC: uuid.uuid4()}


@pytest.fixture
def log_manager(tmp_path):
    m = LogManager([str(tmp_path / "logs")], LogConfig())
    m.load()
    yield m
    m.shutdown()


def snapshot(topic: str, leader: int, leader_epoch: int) -> ClusterSnapshot:
    part = PartitionInfo(0, leader, (1, 2), (1, 2), leader_epoch=leader_epoch)
    return ClusterSnapshot("c", 1, (), {topic: TopicInfo(topic, TOPIC_IDS[topic], (part,), {})})


def replica_manager(log_manager: LogManager) -> ReplicaManager:
    return ReplicaManager(1, log_manager, TopicConfigs(BrokerConfig({})), log_dirs=log_manager.log_dirs)


async def follow_then_lead(rm: ReplicaManager, topic: str, records: bytes, leader_hw: int) -> None:
    """Broker 1 follows broker 2, takes `records` with the leader's high watermark `leader_hw`
    (as a fetch response brings them), then becomes the leader (broker 2 died)."""
    s1 = snapshot(topic, 2, 0)
    await rm.on_metadata(MetadataDelta(EMPTY_SNAPSHOT, s1))
    part = rm.get_partition(topic, 0)
    assert part is not None and not part.is_leader
    part.append_as_follower(records, leader_hw, 0)
    assert part.high_watermark == leader_hw < part.log_end_offset
    await rm.on_metadata(MetadataDelta(s1, snapshot(topic, 1, 1)))
    assert part.is_leader


def catch_up(rm: ReplicaManager, topic: str) -> None:
    """Broker 2, the other in-sync replica, fetches to broker 1's log end: the high watermark follows."""
    part = rm.get_partition(topic, 0)
    assert part is not None and part.is_leader
    part.fetch_records(part.log_end_offset, 1 << 20, min_one=True, replica_id=2, now_ms=int(time.time() * 1000))
    assert part.high_watermark == part.log_end_offset


def offset_batch(base: int, group: str, offset: int, now: int, **txn) -> bytes:
    value = encode_offset_value(OffsetCommitValue(offset, "", now))
    record = Record(base, now, encode_offset_key(OffsetCommitKey(group, "in", 0)), value, ())
    return build_batch([record], base_offset=base, partition_leader_epoch=0, **txn)


async def until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_group_coordinator_loads_the_marker_past_the_high_watermark(log_manager):
    async def main():
        rm = replica_manager(log_manager)
        groups = GroupCoordinator(GroupConfig(num_partitions=1), rm, lambda: asyncio.sleep(0))
        await groups.start()
        rm.add_leadership_listener(groups)
        now = int(time.time() * 1000)
        offsets = build_batch(
            [
                Record(
                    0,
                    now,
                    encode_offset_key(OffsetCommitKey("g", "in", 0)),
                    encode_offset_value(OffsetCommitValue(40, "", now)),
                    (),
                )
            ],
            base_offset=0,
            producer_id=PID,
            producer_epoch=EPOCH,
            base_sequence=0,
            is_transactional=True,
            partition_leader_epoch=0,
        )
        marker = build_control_batch(
            CONTROL_COMMIT,
            producer_id=PID,
            producer_epoch=EPOCH,
            timestamp=now,
            base_offset=1,
            partition_leader_epoch=0,
        )
        # the follower has both; the leader's last fetch response said only the offsets are committed
        await follow_then_lead(rm, OFFSETS_TOPIC, offsets + marker, leader_hw=1)
        await until(lambda: groups.group_error("g") == 0)
        # the marker is not known to be committed yet: reads wait (retriable)
        assert groups.fetch_offsets("g", [("in", [0])], require_stable=True) == (14, [])
        catch_up(rm, OFFSETS_TOPIC)
        await until(lambda: groups.fetch_offsets("g", [("in", [0])])[0] == 0)
        err, result = groups.fetch_offsets("g", [("in", [0])], require_stable=True)
        assert err == 0
        # committed (not pending: UNSTABLE_OFFSET_COMMIT, offset -1)
        assert result == [("in", [(0, 40, -1, "", 0)])]
        await groups.stop()

    asyncio.run(main())


def test_offsets_above_the_high_watermark_are_not_answered_until_committed(log_manager):
    """Seed 12391 in one broker: 16 committed (below the high watermark), then 18 appended by
    the old coordinator, which died before every in-sync follower had it. Before the fix the new
    coordinator answered 18 at once, an offset the next coordinator may never have."""

    async def main():
        rm = replica_manager(log_manager)
        groups = GroupCoordinator(GroupConfig(num_partitions=1), rm, lambda: asyncio.sleep(0))
        await groups.start()
        rm.add_leadership_listener(groups)
        now = int(time.time() * 1000)
        log = offset_batch(0, "g", 16, now) + offset_batch(1, "g", 18, now)
        await follow_then_lead(rm, OFFSETS_TOPIC, log, leader_hw=1)
        await until(lambda: groups.group_error("g") == 0)  # loaded: writes are served
        for stable in (False, True):
            assert groups.fetch_offsets("g", [("in", [0])], require_stable=stable) == (14, [])
            assert groups.fetch_offsets("g", None, require_stable=stable) == (14, [])
        assert groups.describe_group("g").error == 14
        await asyncio.sleep(0.1)
        assert groups.fetch_offsets("g", [("in", [0])])[0] == 14  # still: nothing committed it
        catch_up(rm, OFFSETS_TOPIC)
        await until(lambda: groups.fetch_offsets("g", [("in", [0])])[0] == 0)
        assert groups.fetch_offsets("g", [("in", [0])]) == (0, [("in", [(0, 18, -1, "", 0)])])
        assert groups.describe_group("g").error == 0
        await groups.stop()

    asyncio.run(main())


def group_batch(base: int, group: str, generation: int, assignment: bytes, now: int) -> bytes:
    member = MemberMetadata("m1", None, "c", "/h", 60000, 30000, b"sub", assignment)
    value = GroupMetadataValue("consumer", generation, "range", "m1", now, (member,))
    record = Record(base, now, encode_offset_key(GroupMetadataKey(group)), encode_group_value(value), ())
    return build_batch([record], base_offset=base, partition_leader_epoch=0)


def test_answers_that_write_nothing_wait_for_the_loaded_tail(log_manager):
    """The old coordinator completed a rebalance (generation 2, member m1 assigned "new") and
    died before every in-sync follower had that record. The new coordinator, elected with it
    above its high watermark, answered SyncGroup with that assignment, and Heartbeat 0 at
    generation 2, at once (before the fix): a member consumed by an assignment the next
    coordinator, elected without the record, never gave. Now they answer once the tail is
    committed, as Kafka's runtime answers once its last written offset is."""

    async def main():
        rm = replica_manager(log_manager)
        groups = GroupCoordinator(GroupConfig(num_partitions=1), rm, lambda: asyncio.sleep(0))
        await groups.start()
        rm.add_leadership_listener(groups)
        now = int(time.time() * 1000)
        log = group_batch(0, "g", 1, b"old", now) + group_batch(1, "g", 2, b"new", now)
        await follow_then_lead(rm, OFFSETS_TOPIC, log, leader_hw=1)
        await until(lambda: groups.group_error("g") == 0)
        sync = asyncio.ensure_future(groups.sync(SyncRequest("g", 2, "m1")))
        beat = asyncio.ensure_future(groups.heartbeat(HeartbeatRequest("g", "m1", None, 2)))
        await asyncio.sleep(0.05)
        assert not sync.done() and not beat.done()  # before: SyncResult(0, ..., b"new") and 0
        catch_up(rm, OFFSETS_TOPIC)
        await until(lambda: sync.done() and beat.done())
        assert (sync.result().error, sync.result().assignment) == (0, b"new") and beat.result() == 0
        await groups.stop()

    asyncio.run(main())


def test_answers_that_write_nothing_from_a_tail_never_committed_are_not_coordinator(log_manager):
    async def main():
        rm = replica_manager(log_manager)
        groups = GroupCoordinator(GroupConfig(num_partitions=1), rm, lambda: asyncio.sleep(0))
        await groups.start()
        rm.add_leadership_listener(groups)
        now = int(time.time() * 1000)
        log = group_batch(0, "g", 1, b"old", now) + group_batch(1, "g", 2, b"new", now)
        await follow_then_lead(rm, OFFSETS_TOPIC, log, leader_hw=1)
        await until(lambda: groups.group_error("g") == 0)
        sync = asyncio.ensure_future(groups.sync(SyncRequest("g", 2, "m1")))
        await asyncio.sleep(0.05)
        groups.on_resigned(OFFSETS_TOPIC, 0, 1)  # leadership moved on: the tail may be truncated
        await until(sync.done)
        assert sync.result().error == E.not_coordinator and not sync.result().assignment
        await groups.stop()

    asyncio.run(main())


def test_list_groups_does_not_list_a_group_only_in_an_uncommitted_tail(log_manager):
    """Before the fix ListGroups answered (0, [g, h]): h, created by a record above the high
    watermark, is a group the next coordinator may never have."""

    async def main():
        rm = replica_manager(log_manager)
        groups = GroupCoordinator(GroupConfig(num_partitions=1), rm, lambda: asyncio.sleep(0))
        await groups.start()
        rm.add_leadership_listener(groups)
        now = int(time.time() * 1000)
        log = group_batch(0, "g", 1, b"a", now) + group_batch(1, "h", 1, b"a", now)
        await follow_then_lead(rm, OFFSETS_TOPIC, log, leader_hw=1)
        await until(lambda: groups.group_error("g") == 0)
        assert groups.list_groups() == (E.coordinator_load_in_progress, [])
        catch_up(rm, OFFSETS_TOPIC)
        await until(lambda: groups.list_groups()[0] == 0)
        assert sorted(g for g, _t, _s in groups.list_groups()[1]) == ["g", "h"]
        await groups.stop()

    asyncio.run(main())


class RecordingMarkers:
    """The transaction coordinator's marker channel, recording what it is asked to write."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool, frozenset]] = []

    async def write_markers(self, producer_id, producer_epoch, coordinator_epoch, commit, partitions, still_valid):
        self.calls.append((producer_id, producer_epoch, commit, partitions))
        return True


def test_transaction_coordinator_loads_the_record_past_the_high_watermark(log_manager):
    async def main():
        rm = replica_manager(log_manager)
        markers = RecordingMarkers()

        async def next_pid() -> int:
            return PID

        txns = TransactionCoordinator(TxnConfig(num_partitions=1), rm, lambda: asyncio.sleep(0), next_pid, markers)
        await txns.start()
        rm.add_leadership_listener(txns)
        now = int(time.time() * 1000)

        def record(i: int, state: TxnState, partitions: tuple[tuple[str, int], ...]) -> Record:
            value = TxnLogValue(PID, EPOCH, 60000, int(state), partitions, now, now)
            return Record(i, now, encode_txn_key("tx"), encode_txn_value(value), ())

        log = b"".join(
            build_batch([record(i, state, parts)], base_offset=i, partition_leader_epoch=0)
            for i, (state, parts) in enumerate(
                [(TxnState.PREPARE_COMMIT, (("out", 0),)), (TxnState.COMPLETE_COMMIT, ())]
            )
        )
        # the old coordinator wrote the markers and CompleteCommit; this follower knew only PrepareCommit committed
        await follow_then_lead(rm, TXN_STATE_TOPIC, log, leader_hw=1)
        await until(lambda: not txns.runtime.loading)
        # not answered (nor acted on) until the follower's fetch shows the tail committed
        assert txns.describe("tx").error_code == E.coordinator_load_in_progress
        catch_up(rm, TXN_STATE_TOPIC)
        await until(lambda: txns.describe("tx").error_code == 0)
        assert txns.describe("tx").state == "CompleteCommit"
        await asyncio.sleep(0.05)
        assert markers.calls == []  # nothing to send again: the transaction is complete
        await txns.stop()

    asyncio.run(main())


def txn_log(now: int, *states: tuple[TxnState, tuple[tuple[str, int], ...]]) -> bytes:
    def record(i: int, state: TxnState, partitions: tuple[tuple[str, int], ...]) -> Record:
        value = TxnLogValue(PID, EPOCH, 60000, int(state), partitions, now, now)
        return Record(i, now, encode_txn_key("tx"), encode_txn_value(value), ())

    return b"".join(
        build_batch([record(i, state, parts)], base_offset=i, partition_leader_epoch=0)
        for i, (state, parts) in enumerate(states)
    )


async def txn_coordinator(rm: ReplicaManager, markers: RecordingMarkers) -> TransactionCoordinator:
    async def next_pid() -> int:
        return PID

    txns = TransactionCoordinator(TxnConfig(num_partitions=1), rm, lambda: asyncio.sleep(0), next_pid, markers)
    await txns.start()
    rm.add_leadership_listener(txns)
    return txns


@pytest.mark.parametrize("committed", [True, False])
def test_transaction_coordinator_acts_on_a_loaded_tail_only_once_it_is_committed(log_manager, committed):
    """The old coordinator appended PrepareCommit and died before every in-sync follower had
    it. Before the fix the new coordinator, elected with it above its high watermark, wrote the
    COMMIT markers at once, and answered from it (DescribeTransactions PrepareCommit, EndTxn
    CONCURRENT_TRANSACTIONS, AddPartitionsToTxn of a partition already in: 0): the next
    coordinator, elected without that record, has the transaction Ongoing and may abort it on
    its timeout, a transaction committed on some partitions and aborted on others. Now it
    answers COORDINATOR_LOAD_IN_PROGRESS and writes nothing until the tail is committed; if
    leadership moves on first, it never acts on it."""

    async def main():
        rm = replica_manager(log_manager)
        markers = RecordingMarkers()
        txns = await txn_coordinator(rm, markers)
        now = int(time.time() * 1000)
        out = (("out", 0),)
        log = txn_log(now, (TxnState.ONGOING, out), (TxnState.PREPARE_COMMIT, out))
        await follow_then_lead(rm, TXN_STATE_TOPIC, log, leader_hw=1)
        await until(lambda: not txns.runtime.loading)
        await asyncio.sleep(0.05)
        assert markers.calls == []  # before: [(PID, EPOCH, True, {("out", 0)})]
        assert txns.describe("tx").error_code == E.coordinator_load_in_progress  # before: 0, PrepareCommit
        assert await txns.add_partitions("tx", PID, EPOCH, out) == E.coordinator_load_in_progress  # before: 0
        assert (await txns.end_txn("tx", PID, EPOCH, True))[0] == E.coordinator_load_in_progress
        assert txns.list_transactions()[0] == E.coordinator_load_in_progress
        if not committed:
            txns.on_resigned(TXN_STATE_TOPIC, 0, 1)
            await asyncio.sleep(0.05)
            assert markers.calls == []
        else:
            catch_up(rm, TXN_STATE_TOPIC)
            await until(lambda: markers.calls != [])
            assert markers.calls == [(PID, EPOCH, True, frozenset(out))]
            await asyncio.sleep(0.05)  # CompleteCommit appended
            catch_up(rm, TXN_STATE_TOPIC)  # and committed
            await until(lambda: txns.describe("tx").state == "CompleteCommit")
        await txns.stop()

    asyncio.run(main())
