"""The transaction coordinator in a real broker in this process (no sockets): requests go
through the real handlers as kio entities, `__transaction_state` records and markers
through the replica manager into real logs, and a broker restarted on the same directory
replays them."""

from __future__ import annotations

import asyncio
import datetime

from support.inprocess import InProcessBroker

from odradek.coordinator.txn.records import TXN_STATE_TOPIC, decode_key, decode_value, partition_for
from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode as E
from odradek.protocol.records import Record, build_batch, decode_control_record, decode_records, iter_batches

CONFIG = {
    "node.id": "3",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "50",
    "transaction.max.timeout.ms": "60000",
}


def broker(tmp_path, **overrides: str) -> InProcessBroker:
    return InProcessBroker(tmp_path / "data", {**CONFIG, **overrides})


def run(coro):
    return asyncio.run(coro)


def ms(v: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=v)


async def create_topic(b: InProcessBroker, name: str = "t", partitions: int = 3) -> None:
    mod = messages.module_of(messages.request_class(19, 7))
    t = mod.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1, assignments=(), configs=())
    r = await b.call(19, 7, topics=(t,), timeout=ms(10000), validate_only=False)
    assert r.topics[0].error_code == 0, r.topics[0].error_message


async def coordinator(b: InProcessBroker, txn_id: str) -> None:
    r = await b.call(10, 4, key_type=1, coordinator_keys=(txn_id,))
    assert r.coordinators[0].error_code == E.none, r.coordinators[0]
    assert r.coordinators[0].node_id == 3
    await settled(b)


async def settled(b: InProcessBroker) -> None:
    """Every shard loaded and every transaction's markers and completion written."""
    runtime = b.services.txn_coordinator.runtime
    for _ in range(200):
        busy = runtime.loading or any(
            md.pending is not None for shard in runtime.shards.values() for md in shard.transactions.values()
        )
        if not busy:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the transaction coordinator did not settle")


async def init(b, txn_id="tx", timeout=30000, version=4, pid=-1, epoch=-1):
    r = await b.call(
        22, version, transactional_id=txn_id, transaction_timeout=ms(timeout), producer_id=pid, producer_epoch=epoch
    )
    return r.error_code, r.producer_id, r.producer_epoch


async def add(b, pid, epoch, parts, txn_id="tx", version=3):
    mod = messages.module_of(messages.request_class(24, version))
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    topics = tuple(mod.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    r = await b.call(
        24,
        version,
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=topics,
    )
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


async def end(b, pid, epoch, commit, txn_id="tx", version=3):
    r = await b.call(26, version, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit)
    return r.error_code


async def produce(b, pid, epoch, seq, parts, value=b"v", *, version=9, txn_id="tx", control=False):
    """One transactional batch to each partition through the Produce handler."""
    mod = messages.module_of(messages.request_class(0, version))
    topics = []
    for t, p in parts:
        batch = build_batch(
            [Record(0, 1, None, value, ())],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
            is_control=control,
        )
        topics.append(mod.TopicProduceData(name=t, partition_data=(mod.PartitionProduceData(index=p, records=batch),)))
    r = await b.call(0, version, transactional_id=txn_id, acks=-1, timeout=ms(5000), topic_data=tuple(topics))
    return [p.error_code for t in r.responses for p in t.partition_responses]


def batches(b: InProcessBroker, topic: str, partition: int):
    """(is_control, control type or None, producer id, epoch) of every batch in the partition's log."""
    lg = b.services.replica_manager.get_partition(topic, partition).log
    data = lg.read_bytes(0, 1 << 20, max_offset=lg.log_end_offset)
    out = []
    for h in iter_batches(data):
        ctype = decode_control_record(data, h.position)[1] if h.is_control else None
        out.append((h.is_control, ctype, h.producer_id, h.producer_epoch))
    return out


def txn_log(b: InProcessBroker, txn_id: str):
    """The (state, epoch, partitions) of every record of the id in __transaction_state."""
    p = partition_for(txn_id, 4)
    lg = b.services.replica_manager.get_partition(TXN_STATE_TOPIC, p).log
    data = lg.read_bytes(0, 1 << 20, max_offset=lg.log_end_offset)
    out = []
    for h in iter_batches(data):
        for rec in decode_records(data, h.position):
            if decode_key(rec.key) == txn_id:
                v = decode_value(rec.value)
                out.append(None if v is None else (v.state, v.producer_epoch, v.partitions))
    return out


def test_commit_and_abort_write_markers_then_complete(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        await coordinator(b, "tx")
        assert b.services.snapshot.topics[TXN_STATE_TOPIC].configs["cleanup.policy"] == "compact"
        err, pid, epoch = await init(b)
        assert (err, epoch) == (E.none, 0) and pid >= 0
        assert await add(b, pid, epoch, [("t", 0), ("t", 1)]) == {("t", 0): E.none, ("t", 1): E.none}
        assert await produce(b, pid, epoch, 0, [("t", 0), ("t", 1)]) == [E.none, E.none]
        lso_before = b.services.replica_manager.get_partition("t", 0).log.last_stable_offset
        assert lso_before == 0  # the open transaction holds the last stable offset
        assert await end(b, pid, epoch, True) == E.none
        await settled(b)
        assert batches(b, "t", 0) == [(False, None, pid, 0), (True, 1, pid, 0)]
        assert batches(b, "t", 2) == []  # not in the transaction
        assert b.services.replica_manager.get_partition("t", 0).log.last_stable_offset == 2
        # a retried EndTxn of a completed commit succeeds; the other way round is INVALID_TXN_STATE
        assert await end(b, pid, epoch, True) == E.none
        assert await end(b, pid, epoch, False) == E.invalid_txn_state
        # an abort
        assert await add(b, pid, epoch, [("t", 2)]) == {("t", 2): E.none}
        assert await produce(b, pid, epoch, 0, [("t", 2)]) == [E.none]
        assert await end(b, pid, epoch, False) == E.none
        await settled(b)
        assert batches(b, "t", 2) == [(False, None, pid, 0), (True, 0, pid, 0)]
        assert txn_log(b, "tx") == [
            (0, 0, ()),  # Empty
            (1, 0, (("t", 0), ("t", 1))),  # Ongoing
            (2, 0, (("t", 0), ("t", 1))),  # PrepareCommit
            (4, 0, ()),  # CompleteCommit
            (1, 0, (("t", 2),)),
            (3, 0, (("t", 2),)),
            (5, 0, ()),
        ]
        await b.stop()

    run(main())


def test_fencing_a_zombie_and_its_errors_per_version(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        await coordinator(b, "tx")
        _, pid, e0 = await init(b)
        await add(b, pid, e0, [("t", 0)])
        assert await produce(b, pid, e0, 0, [("t", 0)]) == [E.none]
        # a second producer with the same id: the open transaction is aborted with a bumped epoch
        assert (await init(b))[0] == E.concurrent_transactions
        await settled(b)
        assert batches(b, "t", 0) == [(False, None, pid, 0), (True, 0, pid, 1)]
        err, pid2, e2 = await init(b)
        assert (err, pid2, e2) == (E.none, pid, 2)
        # the zombie (epoch 0) is fenced everywhere: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH for old versions
        assert await end(b, pid, e0, True, version=2) == E.producer_fenced
        assert await end(b, pid, e0, True, version=1) == E.invalid_producer_epoch
        assert await add(b, pid, e0, [("t", 1)], version=2) == {("t", 1): E.producer_fenced}
        assert await add(b, pid, e0, [("t", 1)], version=1) == {("t", 1): E.invalid_producer_epoch}
        # KIP-360: the zombie's epoch is neither the current nor the last one
        assert (await init(b, version=4, pid=pid, epoch=e0))[0] == E.producer_fenced
        # ... so its data batches are refused by the partition (a newer epoch wrote there)
        assert await produce(b, pid, e0, 1, [("t", 0)]) == [E.invalid_producer_epoch]
        # unknown producer id, bad timeout, ending nothing
        assert await end(b, pid + 100, 0, True) == E.invalid_producer_id_mapping
        assert (await init(b, timeout=60001))[0] == E.invalid_transaction_timeout
        _, pid3, e3 = await init(b, txn_id="other")
        assert await end(b, pid3, e3, True, txn_id="other") == E.invalid_txn_state
        await b.stop()

    run(main())


def test_kip360_retry_and_fenced_expected_epoch(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await coordinator(b, "tx")
        _, pid, e0 = await init(b)
        err, pid1, e1 = await init(b, pid=pid, epoch=e0)
        assert (err, pid1, e1) == (E.none, pid, e0 + 1)
        assert await init(b, pid=pid, epoch=e0) == (E.none, pid, e1)  # a retry gets the same answer
        assert (await init(b, pid=pid, epoch=e1 + 5))[0] == E.producer_fenced
        assert (await init(b, pid=pid, epoch=e1 + 5, version=3))[0] == E.invalid_producer_epoch
        assert (await init(b, pid=pid + 7, epoch=0))[0] == E.producer_fenced
        await b.stop()

    run(main())


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        await coordinator(b, "tx")
        _, pid, e0 = await init(b, timeout=100)
        await add(b, pid, e0, [("t", 1)])
        await produce(b, pid, e0, 0, [("t", 1)])
        for _ in range(100):
            await asyncio.sleep(0.02)
            if txn_log(b, "tx")[-1][0] == 5:  # CompleteAbort
                break
        assert txn_log(b, "tx")[-2:] == [(3, 1, (("t", 1),)), (5, 1, ())]
        assert batches(b, "t", 1)[-1] == (True, 0, pid, 1)
        assert await end(b, pid, e0, True) == E.producer_fenced
        await b.stop()

    run(main())


def test_restart_replays_state_and_finishes_a_prepared_commit(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        await coordinator(b, "tx")
        await coordinator(b, "open")
        _, pid, e0 = await init(b)
        await add(b, pid, e0, [("t", 0)])
        await produce(b, pid, e0, 0, [("t", 0)])
        _, opid, oe = await init(b, txn_id="open")
        await add(b, opid, oe, [("t", 1)], txn_id="open")
        # stop the marker channel so the commit stays prepared when the broker stops
        tc = b.services.txn_coordinator
        real = tc.markers

        class Stuck:
            async def write_markers(self, *a, **kw):
                await asyncio.Event().wait()

        tc.markers = Stuck()
        assert await end(b, pid, e0, True) == E.none
        await asyncio.sleep(0.05)
        assert txn_log(b, "tx")[-1][0] == 2  # PrepareCommit, no markers
        assert batches(b, "t", 0) == [(False, None, pid, 0)]
        tc.markers = real
        await b.stop()

        b = await broker(tmp_path).start()
        await settled(b)
        assert batches(b, "t", 0) == [(False, None, pid, 0), (True, 1, pid, 0)]
        assert txn_log(b, "tx")[-1] == (4, 0, ())
        r = await b.call(65, 0, transactional_ids=("open", "tx", "nope"))
        got = {s.transactional_id: s for s in r.transaction_states}
        assert got["open"].transaction_state == "Ongoing" and got["open"].producer_id == opid
        assert [(t.topic, t.partitions) for t in got["open"].topics] == [("t", (1,))]
        assert got["tx"].transaction_state == "CompleteCommit"
        assert got["nope"].error_code == E.transactional_id_not_found
        # the restarted coordinator bumps the epoch of the id it replayed
        assert await init(b) == (E.none, pid, e0 + 1)
        await b.stop()

    run(main())


def test_list_transactions_filters(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        for tid in ("a", "b", "c"):
            await coordinator(b, tid)
        pids = {}
        for tid in ("a", "b", "c"):
            _, pids[tid], _ = await init(b, txn_id=tid)
        await add(b, pids["b"], 0, [("t", 0)], txn_id="b")

        async def listed(version=1, **kw):
            kw.setdefault("state_filters", ())
            kw.setdefault("producer_id_filters", ())
            r = await b.call(66, version, **kw)
            assert r.error_code == E.none
            return sorted((t.transactional_id, t.transaction_state) for t in r.transaction_states), r

        assert (await listed())[0] == [("a", "Empty"), ("b", "Ongoing"), ("c", "Empty")]
        assert (await listed(state_filters=("Ongoing",)))[0] == [("b", "Ongoing")]
        got, r = await listed(state_filters=("Ongoing", "Bogus"))
        assert got == [("b", "Ongoing")] and r.unknown_state_filters == ("Bogus",)
        assert (await listed(producer_id_filters=(pids["c"],)))[0] == [("c", "Empty")]
        # none has run for an hour; Empty ones (no start time) pass, as in Kafka
        assert (await listed(duration_filter=3_600_000))[0] == [("a", "Empty"), ("c", "Empty")]
        assert (await listed(duration_filter=3_600_000, state_filters=("Ongoing",)))[0] == []
        assert (await listed(version=2, transactional_id_pattern="[ab]"))[0] == [("a", "Empty"), ("b", "Ongoing")]
        r = await b.call(66, 2, state_filters=(), producer_id_filters=(), transactional_id_pattern="(")
        assert r.error_code == E.invalid_regular_expression
        await b.stop()

    run(main())


def test_expired_ids_get_a_tombstone(tmp_path):
    async def main():
        b = await broker(
            tmp_path,
            **{
                "transactional.id.expiration.ms": "50",
                "transaction.remove.expired.transaction.cleanup.interval.ms": "20",
            },
        ).start()
        await coordinator(b, "tx")
        assert (await init(b))[0] == E.none
        # the tombstone is appended at once and completes once committed (pipelined writes):
        # until then the id is still described, Empty, as Kafka's (a pending PrepareDead)
        gone = int(E.transactional_id_not_found)
        for _ in range(100):
            await asyncio.sleep(0.02)
            if b.services.txn_coordinator.describe("tx").error_code == gone:
                break
        assert txn_log(b, "tx")[-1] is None
        r = await b.call(65, 0, transactional_ids=("tx",))
        assert r.transaction_states[0].error_code == E.transactional_id_not_found
        await b.stop()

    run(main())


def test_write_txn_markers_handler_and_verify_only(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        await coordinator(b, "tx")
        _, pid, e0 = await init(b)
        await add(b, pid, e0, [("t", 0)])
        # AddPartitionsToTxn v4+ (brokers): verify_only checks without adding
        mod = messages.module_of(messages.request_class(24, 5))
        txn = mod.AddPartitionsToTxnTransaction(
            transactional_id="tx",
            producer_id=pid,
            producer_epoch=e0,
            verify_only=True,
            topics=(mod.AddPartitionsToTxnTopic(name="t", partitions=(0, 1)),),
        )
        r = await b.call(24, 5, transactions=(txn,))
        res = {
            (t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_transaction[0].topic_results
            for p in t.results_by_partition
        }
        assert res == {("t", 0): E.none, ("t", 1): E.transaction_abortable}
        # WriteTxnMarkers to a partition led here, and to one that does not exist
        wmod = messages.module_of(messages.request_class(27, 1))
        marker = wmod.WritableTxnMarker(
            producer_id=pid,
            producer_epoch=e0,
            transaction_result=False,
            coordinator_epoch=0,
            topics=(
                wmod.WritableTxnMarkerTopic(name="t", partition_indexes=(2,)),
                wmod.WritableTxnMarkerTopic(name="gone", partition_indexes=(0,)),
            ),
        )
        r = await b.call(27, 1, markers=(marker,))
        res = {(t.name, p.partition_index): p.error_code for t in r.markers[0].topics for p in t.partitions}
        assert res == {("t", 2): E.none, ("gone", 0): E.unknown_topic_or_partition}
        assert batches(b, "t", 2) == [(True, 0, pid, 0)]
        await b.stop()

    run(main())


def test_kip890_leader_verifies_a_producers_first_transactional_batch(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        await coordinator(b, "tx")
        _, pid, e0 = await init(b)
        await add(b, pid, e0, [("t", 0)])
        # partition 1 was never added: refused, nothing appended, no transaction opened there
        assert await produce(b, pid, e0, 0, [("t", 0), ("t", 1)]) == [E.none, E.invalid_txn_state]
        assert await produce(b, pid, e0, 0, [("t", 1)], version=11) == [E.transaction_abortable]
        assert batches(b, "t", 1) == []
        assert b.services.replica_manager.get_partition("t", 1).log.last_stable_offset == 0
        # the open transaction on partition 0 needs no verification; a fenced epoch is refused
        assert await produce(b, pid, e0, 1, [("t", 0)]) == [E.none]
        assert await produce(b, pid, e0 + 3, 0, [("t", 2)]) == [E.invalid_producer_epoch]
        assert await produce(b, pid, e0, 0, [("t", 2)], txn_id="unknown-id") == [E.invalid_producer_id_mapping]
        # a client may not write a transaction marker
        assert await produce(b, pid, e0, 0, [("t", 2)], control=True) == [E.invalid_record]
        assert batches(b, "t", 2) == []
        assert await end(b, pid, e0, True) == E.none
        await settled(b)
        assert batches(b, "t", 0) == [(False, None, pid, 0), (False, None, pid, 0), (True, 1, pid, 0)]
        await b.stop()

    run(main())


def test_a_client_end_txn_while_a_fence_is_pending_is_told_to_retry(tmp_path):
    async def main():
        b = await broker(tmp_path).start()
        await create_topic(b)
        await coordinator(b, "tx")
        _, pid, e0 = await init(b)
        await add(b, pid, e0, [("t", 0)])
        tc = b.services.txn_coordinator
        md = tc.runtime.shards[tc.partition_for("tx")].transactions["tx"]
        fence = md.prepare_fence_epoch()  # what a timeout does, before its abort task runs
        assert await end(b, pid, e0, True) == E.concurrent_transactions
        assert await add(b, pid, e0, [("t", 1)]) == {("t", 1): E.concurrent_transactions}
        assert (await init(b))[0] == E.concurrent_transactions
        assert (await tc._end("tx", pid, fence.producer_epoch, False, False))[0] == E.none
        await settled(b)
        assert txn_log(b, "tx")[-2:] == [(3, 1, (("t", 0),)), (5, 1, ())]
        await b.stop()

    run(main())
