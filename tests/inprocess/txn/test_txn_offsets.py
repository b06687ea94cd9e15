"""TxnOffsetCommit end to end: a broker in this process listening on a real port, a raw
protocol client over TCP sending TxnOffsetCommit and OffsetFetch, and the transaction's end
done the way the broker's WriteTxnMarkers does it (the transaction coordinator is another
branch's work): a COMMIT/ABORT control batch appended through the replica manager's
coordinator path, then GroupCoordinator.complete_transaction. A restart reloads the log."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from support.apache_kafka import tool_command, unavailable_reason
from support.inprocess import InProcessBroker
from support.inprocess_groups import broker, create_topic_t, find_coordinator, loaded
from support.raw import RawConnection, nested

from odradek.coordinator.group.records import OFFSETS_TOPIC, partition_for
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.records import iter_batches

PID, EPOCH = 4000, 0
GROUP = "txn-group"


def txn_topics(version: int, offsets: dict[tuple[str, int], int]):
    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        fields = dict(partition_index=p, committed_offset=o, committed_metadata="md")
        if version >= 2:
            fields["committed_leader_epoch"] = 3
        by_topic.setdefault(t, []).append(nested(28, version, "TxnOffsetCommitRequestPartition", **fields))
    return tuple(
        nested(28, version, "TxnOffsetCommitRequestTopic", name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
    )


def txn_commit(conn: RawConnection, offsets: dict[tuple[str, int], int], *, version: int = 3, **kw) -> dict:
    fields = dict(transactional_id="tx", group_id=GROUP, producer_id=PID, producer_epoch=EPOCH)
    if version >= 3:
        fields.update(generation_id=-1, member_id="", group_instance_id=None)
    fields.update(kw)
    r = conn.call(28, version, topics=txn_topics(version, offsets), **fields)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def fetch(conn: RawConnection, partitions: list[int], *, require_stable: bool, version: int = 7) -> dict:
    """OffsetFetch of topic t: {partition: (offset, error)}."""
    if version >= 8:
        topic = nested(9, version, "OffsetFetchRequestTopics", name="t", partition_indexes=tuple(partitions))
        group = nested(9, version, "OffsetFetchRequestGroup", group_id=GROUP, topics=(topic,))
        r = conn.call(9, version, groups=(group,), require_stable=require_stable)
        parts = r.groups[0].topics[0].partitions
    else:
        topic = nested(9, version, "OffsetFetchRequestTopic", name="t", partition_indexes=tuple(partitions))
        r = conn.call(9, version, group_id=GROUP, topics=(topic,), require_stable=require_stable)
        parts = r.topics[0].partitions
    return {p.partition_index: (p.committed_offset, p.error_code) for p in parts}


async def end_transaction(b: InProcessBroker, commit: bool) -> None:
    """What WriteTxnMarkers does for the group's partition: the marker, committed, then the group coordinator."""
    p = partition_for(GROUP, 5)
    assert await b.services.replica_manager.write_txn_marker(OFFSETS_TOPIC, p, PID, EPOCH, 0, commit, 5000) == 0
    b.services.group_coordinator.complete_transaction(p, PID, EPOCH, commit)


def test_txn_offset_commit_pending_until_marker_then_reloaded(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b, GROUP)
        conn = RawConnection(f"127.0.0.1:{b.broker.bound[0][1]}")
        call = asyncio.to_thread
        try:
            assert await call(txn_commit, conn, {("t", 0): 42, ("t", 1): 43}) == {("t", 0): 0, ("t", 1): 0}

            # one transactional batch of the producer, without sequence numbers
            log = b.services.replica_manager.get_partition(OFFSETS_TOPIC, partition_for(GROUP, 5)).log
            (h,) = list(iter_batches(log.read_bytes(0, 1 << 20)))
            assert (h.producer_id, h.producer_epoch, h.base_sequence) == (PID, EPOCH, 0)
            assert h.is_transactional and not h.is_control and h.record_count == 2

            # pending: not returned; require_stable answers UNSTABLE_OFFSET_COMMIT
            assert await call(fetch, conn, [0, 1], require_stable=False) == {0: (-1, 0), 1: (-1, 0)}
            unstable = (-1, E.unstable_offset_commit)
            assert await call(fetch, conn, [0, 1], require_stable=True) == {0: unstable, 1: unstable}
            assert await call(fetch, conn, [0], require_stable=True, version=8) == {0: unstable}

            await end_transaction(b, commit=True)
            assert await call(fetch, conn, [0, 1], require_stable=True) == {0: (42, 0), 1: (43, 0)}
            assert await call(fetch, conn, [0, 1], require_stable=True, version=9) == {0: (42, 0), 1: (43, 0)}

            # the producer's next transaction is aborted: the committed offsets stay
            assert await call(txn_commit, conn, {("t", 0): 50}, version=0) == {("t", 0): 0}
            assert await call(fetch, conn, [0, 1], require_stable=True) == {0: unstable, 1: (43, 0)}
            await end_transaction(b, commit=False)
            assert await call(fetch, conn, [0, 1], require_stable=True) == {0: (42, 0), 1: (43, 0)}

            # a third one stays open across a restart
            assert await call(txn_commit, conn, {("t", 1): 60}, version=4) == {("t", 1): 0}
        finally:
            conn.close()
        await b.stop()

        b2 = await broker(tmp_path).start()
        await loaded(b2)
        conn = RawConnection(f"127.0.0.1:{b2.broker.bound[0][1]}")
        try:
            assert await call(fetch, conn, [0, 1], require_stable=False) == {0: (42, 0), 1: (43, 0)}
            assert await call(fetch, conn, [0, 1], require_stable=True) == {0: (42, 0), 1: unstable}
            await end_transaction(b2, commit=True)
            assert await call(fetch, conn, [0, 1], require_stable=True) == {0: (42, 0), 1: (60, 0)}
        finally:
            conn.close()
        await b2.stop()

    asyncio.run(main())


def test_txn_offset_commit_checks(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b, GROUP)
        conn = RawConnection(f"127.0.0.1:{b.broker.bound[0][1]}")
        call = asyncio.to_thread
        try:
            # unknown topic or partition: refused before the group is consulted
            assert await call(txn_commit, conn, {("nope", 0): 1, ("t", 9): 1}) == {
                ("nope", 0): E.unknown_topic_or_partition,
                ("t", 9): E.unknown_topic_or_partition,
            }
            # an unknown group with a generation (KIP-447 fields, v3+)
            errs = await call(txn_commit, conn, {("t", 0): 1}, generation_id=2, member_id="m")
            assert errs == {("t", 0): E.illegal_generation}
            assert await call(txn_commit, conn, {("t", 0): 1}, group_id="") == {("t", 0): E.invalid_group_id}
            assert await call(fetch, conn, [0], require_stable=True) == {0: (-1, 0)}
        finally:
            conn.close()
        await b.stop()

    asyncio.run(main())


def test_transaction_completed_while_the_partition_loads(tmp_path):
    """WriteTxnMarkers may complete a transaction while the group's partition is still being
    loaded: the completion is applied once the load is done (whether or not the load read the
    marker), never lost to a load that started before the marker."""

    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b, GROUP)
        conn = RawConnection(f"127.0.0.1:{b.broker.bound[0][1]}")
        try:
            assert await asyncio.to_thread(txn_commit, conn, {("t", 0): 7}) == {("t", 0): 0}
        finally:
            conn.close()
        await b.stop()

        b2 = await broker(tmp_path).start()
        gc = b2.services.group_coordinator
        p = partition_for(GROUP, 5)
        # the load runs in the background; nothing has yielded to it yet
        assert gc.group_error(GROUP) == E.coordinator_load_in_progress
        gc.complete_transaction(p, PID, EPOCH, True)  # as if its marker were appended after the load's read
        await loaded(b2)
        assert gc.fetch_offsets(GROUP, [("t", [0])], require_stable=True) == (0, [("t", [(0, 7, 3, "md", 0)])])
        gc.complete_transaction(p + 1, PID, EPOCH, False)  # a partition with nothing of it: nothing happens
        await b2.stop()

    asyncio.run(main())


@pytest.mark.reference
def test_kafkas_dump_log_segments_reads_the_transactional_offsets_and_markers(tmp_path):
    """Kafka 4.4's DumpLogSegments (--offsets-decoder) reads the group's partition: the offsets
    in a transactional batch of the producer (base sequence 0, as Kafka's), then its COMMIT; again, ABORT."""
    if reason := unavailable_reason("4"):
        pytest.skip(reason)

    async def main():
        b = await broker(tmp_path).start()
        await create_topic_t(b)
        await find_coordinator(b, GROUP)
        conn = RawConnection(f"127.0.0.1:{b.broker.bound[0][1]}")
        try:
            await asyncio.to_thread(txn_commit, conn, {("t", 0): 42, ("t", 1): 43})
            await end_transaction(b, commit=True)
            await asyncio.to_thread(txn_commit, conn, {("t", 0): 50})
            await end_transaction(b, commit=False)
        finally:
            conn.close()
        await b.stop()

    asyncio.run(main())
    logs = sorted((tmp_path / "data" / f"{OFFSETS_TOPIC}-{partition_for(GROUP, 5)}").glob("*.log"))
    cmd = tool_command("4", "DumpLogSegments", "--deep-iteration", "--print-data-log", "--offsets-decoder")
    p = subprocess.run([*cmd, "--files", ",".join(map(str, logs))], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and "Exception" not in p.stderr, p.stderr[-3000:]
    batches = [ln for ln in p.stdout.splitlines() if ln.startswith("baseOffset:")]
    records = [ln for ln in p.stdout.splitlines() if ln.startswith("| offset:")]
    txn = f"producerId: {PID} producerEpoch: {EPOCH}"
    assert len(batches) == 4 and all(txn in ln and "isTransactional: true" in ln for ln in batches), batches
    assert ["isControl: true" in ln for ln in batches] == [False, True, False, True]
    # offsets batches start at sequence 0, as Kafka's coordinator writes them; markers have none
    assert ["baseSequence: 0 " in ln for ln in batches] == [True, False, True, False], batches
    assert all("isvalid: true" in ln for ln in batches)
    assert ['"offset":42' in records[0], '"offset":43' in records[1]] == [True, True]
    assert '"group":"txn-group","topic":"t","partition":0' in records[0]
    assert "endTxnMarker: COMMIT" in records[2] and '"offset":50' in records[3] and "endTxnMarker: ABORT" in records[4]
