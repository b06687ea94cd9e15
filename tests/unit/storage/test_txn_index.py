"""The transaction index (.txnindex) and the aborted-transaction reads, through the Log."""

import os
import struct

import pytest
from support.batches import batch

from odradek.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    InvalidRecordError,
    Record,
    build_batch,
    build_control_batch,
    decode_any,
    iter_batches,
)
from odradek.storage import LogConfig, LogManager
from odradek.storage.errors import KafkaStorageError, StorageTransactionCoordinatorFencedError
from odradek.storage.log import AppendOrigin
from odradek.storage.txn_index import AbortedTxn

COORDINATOR = AppendOrigin.COORDINATOR
NOW = 1_700_000_000_000


def txn(pid, seq, n=1, epoch=0, key=None):
    if key is not None:
        recs = [Record(-1, NOW, key + b"%d" % i, b"v") for i in range(n)]
        return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def marker(pid, commit, epoch=0, coordinator_epoch=0):
    return build_control_batch(
        CONTROL_COMMIT if commit else CONTROL_ABORT,
        producer_id=pid,
        producer_epoch=epoch,
        timestamp=NOW,
        coordinator_epoch=coordinator_epoch,
    )


def txnindex_bytes(seg):
    path = seg.txn_index.path
    return open(path, "rb").read() if os.path.exists(path) else None


def test_abort_writes_kafkas_34_byte_entry_commit_writes_none(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(batch(1))  # 0
    lg.append(txn(7, 0, 2))  # 1-2
    lg.append(marker(7, commit=True), origin=COORDINATOR)  # 3
    seg = lg.active_segment
    assert txnindex_bytes(seg) is None  # no abort yet: no file, as Kafka
    lg.append(txn(7, 2, 1))  # 4
    lg.append(txn(8, 0, 1))  # 5: another producer's open transaction
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 6
    # version 0, producer 7, first offset 4, last offset 6 (the marker), last stable offset 5
    # (the first offset of producer 8's open transaction)
    assert txnindex_bytes(seg) == struct.pack(">hqqqq", 0, 7, 4, 6, 5)
    assert seg.txn_index.path.endswith("00000000000000000000.txnindex")
    lg.append(marker(8, commit=False), origin=COORDINATOR)  # 7: nothing open after it: lso = 8
    assert txnindex_bytes(seg)[34:] == struct.pack(">hqqqq", 0, 8, 5, 7, 8)
    lg.high_watermark = lg.log_end_offset
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == [(7, 4), (8, 5)]
    assert lg.collect_aborted_transactions(7, 8) == [(8, 5)]  # overlaps at its marker
    assert lg.collect_aborted_transactions(0, 4) == []  # ends before producer 7's abort began
    # an empty transaction's marker changes nothing (Kafka emits no completed transaction)
    lg.append(marker(9, commit=False), origin=COORDINATOR)
    assert len(txnindex_bytes(seg)) == 68


def test_last_stable_offset_waits_for_the_high_watermark_past_the_marker(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(txn(7, 0, 2))  # 0-1
    lg.high_watermark = 2
    assert lg.last_stable_offset == 0
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 2
    assert lg.last_stable_offset == 0  # decided, not yet replicated
    lg.high_watermark = 3
    assert lg.last_stable_offset == 3


def test_clients_may_not_write_control_batches(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(txn(7, 0))
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control records"):
        lg.append(marker(7, commit=False))
    assert lg.log_end_offset == 1 and lg.producer_state.first_unstable_offset() == 0
    no_producer = build_batch([Record(-1, NOW, b"\x00\x00\x00\x00", b"")], is_control=True)
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control records"):
        lg.append(no_producer)
    # replication keeps what the leader wrote
    lg.append(
        build_control_batch(CONTROL_ABORT, producer_id=7, producer_epoch=0, timestamp=NOW, base_offset=1),
        assign_offsets=False,
        origin=AppendOrigin.REPLICATION,
    )
    assert lg.aborted_transactions(0, 2) == [AbortedTxn(7, 0, 1, 2)]


def test_marker_of_an_older_coordinator_epoch_is_fenced(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(txn(7, 0))
    lg.append(marker(7, commit=True, coordinator_epoch=5), origin=COORDINATOR)
    assert lg.producer_state.producers[7].coordinator_epoch == 5
    lg.append(txn(7, 1))
    with pytest.raises(StorageTransactionCoordinatorFencedError):
        lg.append(marker(7, commit=False, coordinator_epoch=4), origin=COORDINATOR)
    lg.append(marker(7, commit=False, coordinator_epoch=5), origin=COORDINATOR)


def test_abort_across_a_segment_roll_is_indexed_where_the_marker_is(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(txn(7, 0, 3))  # 0-2
    lg.roll()
    lg.append(batch(1))  # 3
    lg.roll()
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 4
    first, middle, last = lg.segments
    assert txnindex_bytes(first) is None and txnindex_bytes(middle) is None
    assert last.txn_index.entries == [AbortedTxn(7, 0, 4, 5)]
    lg.high_watermark = lg.log_end_offset
    # a read of the first segment finds it in a later segment's index
    assert lg.collect_aborted_transactions(0, 3) == [(7, 0)]
    # Kafka's rule is overlap with [first offset, marker]: a read of [3, 4) names it too
    assert lg.collect_aborted_transactions(3, 4) == [(7, 0)]
    assert lg.collect_aborted_transactions(5, 6) == []


def test_truncation_drops_entries_at_and_above_the_offset_and_reopens_the_transaction(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(txn(7, 0, 2))  # 0-1
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 2
    lg.append(txn(7, 2))  # 3
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 4
    seg = lg.active_segment
    assert [t.last_offset for t in seg.txn_index.entries] == [2, 4]
    lg.high_watermark = lg.log_end_offset
    lg.truncate_to(4)
    assert seg.txn_index.entries == [AbortedTxn(7, 0, 2, 3)]
    assert len(txnindex_bytes(seg)) == 34
    assert lg.producer_state.first_unstable_offset() == 3  # producer 7's second transaction is open again
    lg.truncate_to(2)
    assert txnindex_bytes(seg) == b"" and lg.producer_state.first_unstable_offset() == 0


def test_deleted_segments_take_their_txnindex_with_them(make_mgr, clock):
    lg = make_mgr().create_log("t", 0, LogConfig(file_delete_delay_ms=0))
    lg.append(txn(7, 0))
    lg.append(marker(7, commit=False), origin=COORDINATOR)
    path = lg.active_segment.txn_index.path
    lg.roll()
    lg.append(batch(1))
    lg.high_watermark = lg.log_end_offset
    lg.delete_records(2)
    assert not os.path.exists(path) and os.path.exists(path + ".deleted")
    assert lg.collect_aborted_transactions(2, 3) == []


def _reload(m, clock, config=None):
    m2 = LogManager(m.log_dirs, config or LogConfig(), fs=m.fs, clock=clock)
    m2.load()
    return m2, m2.get_log("t", 0)


def _crash(m, lg):
    lg.flush()
    for seg in lg.segments:
        seg.close()


@pytest.mark.parametrize("damage", ["garbage tail", "txnindex lost", "txnindex garbage", "clean stop, bad txnindex"])
def test_recovery_rebuilds_the_index(make_mgr, clock, damage):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(txn(7, 0, 2))  # 0-1, segment 0
    lg.append(txn(8, 0, 1))  # 2
    lg.roll()
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 3, segment 3: lso 2 (producer 8 still open)
    lg.append(txn(9, 0, 1))  # 4
    lg.append(marker(8, commit=False), origin=COORDINATOR)  # 5: lso 4 (producer 9 open)
    lg.high_watermark = lg.log_end_offset
    expected = [AbortedTxn(7, 0, 3, 2), AbortedTxn(8, 2, 5, 4)]
    seg = lg.active_segment
    assert seg.txn_index.entries == expected
    if damage == "clean stop, bad txnindex":
        m.shutdown()
    else:
        _crash(m, lg)  # no clean-shutdown marker: recovery from the recovery point (0 here)
    if damage == "garbage tail":
        with open(seg.log_path, "ab") as f:
            f.write(b"\x00\x01garbage" * 9)
    elif damage == "txnindex lost":
        os.remove(seg.txn_index.path)
    else:
        with open(seg.txn_index.path, "r+b") as f:
            f.seek(34 + 2 + 8 + 8)
            f.write(struct.pack(">q", 1))  # the second entry's last offset below the segment's base
    m2, lg2 = _reload(m, clock)
    seg2 = lg2.active_segment
    assert seg2.txn_index.entries == expected
    assert txnindex_bytes(seg2) == b"".join(e.encode() for e in expected)
    assert lg2.log_end_offset == 6 and os.path.getsize(seg2.log_path) == seg.size
    lg2.high_watermark = 6
    assert lg2.producer_state.first_unstable_offset() == 4  # producer 9's transaction
    m2.shutdown()


def test_unclean_recovery_cuts_a_torn_marker_and_its_entry(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(txn(7, 0, 2))  # 0-1
    lg.flush()
    size = lg.active_segment.size
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 2
    seg = lg.active_segment
    assert len(seg.txn_index.entries) == 1
    _crash(m, lg)
    with open(seg.log_path, "r+b") as f:  # the marker's last bytes never reached the disk
        f.truncate(seg.size - 5)
    # the recovery point (the last flush) is below the marker: recovery replays from there
    m2 = LogManager(m.log_dirs, LogConfig(), fs=m.fs, clock=clock)
    m2.load()
    lg2 = m2.get_log("t", 0)
    assert lg2.active_segment.size == size and lg2.log_end_offset == 2
    assert lg2.active_segment.txn_index.entries == []
    assert lg2.producer_state.first_unstable_offset() == 0  # the transaction is open again
    m2.shutdown()


# ------------------------------------------------------------------ cleaner
CFG = LogConfig(
    segment_bytes=100_000,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=1000,
    file_delete_delay_ms=0,
)


def _records(lg):
    """(offset, key) of the data records (control records left out)."""
    data = lg.read_bytes(lg.log_start_offset, 1 << 24)
    control = {h.base_offset for h in iter_batches(data) if h.is_control}
    return [(r.offset, r.key) for r in decode_any(data) if r.offset not in control]


def _batches(lg):
    return list(iter_batches(lg.read_bytes(lg.log_start_offset, 1 << 24)))


def test_cleaner_removes_aborted_data_then_the_marker_after_delete_retention(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, CFG)
    lg.append(build_batch([Record(-1, clock.ms, b"a0", b"committed")]))  # 0
    lg.append(txn(7, 0, 2, key=b"a"))  # 1-2: keys a0, a1, aborted (a0 must not shadow offset 0)
    lg.append(txn(8, 0, 1, key=b"b"))  # 3: committed
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 4
    lg.append(marker(8, commit=True), origin=COORDINATOR)  # 5
    lg.append(txn(7, 2, 1, key=b"c"))  # 6: producer 7's next transaction, committed
    lg.append(marker(7, commit=True), origin=COORDINATOR)  # 7
    lg.roll()
    lg.append(build_batch([Record(-1, clock.ms, b"z", b"z")]))  # 8: active segment
    lg.high_watermark = lg.log_end_offset
    assert lg.segments[0].txn_index.entries == [AbortedTxn(7, 1, 4, 3)]
    assert m.clean_once() == 1
    # pass 1: the aborted records go; every marker stays (the abort's data was seen in this
    # pass; the commits' too), the abort's entry is kept in the cleaned segment
    assert _records(lg) == [(0, b"a0"), (3, b"b0"), (6, b"c0"), (8, b"z")]
    controls = [h.base_offset for h in _batches(lg) if h.is_control]
    assert controls == [4, 5, 7]
    assert lg.segments[0].txn_index.entries == [AbortedTxn(7, 1, 4, 3)]
    assert lg.collect_aborted_transactions(0, 8) == [(7, 1)]
    # pass 2 (forced): no data of the abort left: its marker gets a delete horizon
    assert m.clean_once(force=True) == 1
    hs = {h.base_offset: h for h in _batches(lg) if h.is_control}
    assert sorted(hs) == [4, 5, 7]
    assert hs[4].delete_horizon_ms == clock.ms + 1000 and hs[4].record_count == 1
    assert hs[5].delete_horizon_ms < 0 and hs[7].delete_horizon_ms < 0  # commits with data: untouched
    assert lg.segments[0].txn_index.entries == []  # the entry went with the data
    # after delete.retention.ms, a later pass drops it; commit markers whose data is still
    # there stay; producer 7's last marker (its current epoch) stays at least as an empty batch
    clock.advance(1001)
    m.clean_once(force=True)
    clock.advance(1001)
    m.clean_once(force=True)
    left = {h.base_offset: h for h in _batches(lg) if h.is_control}
    assert 4 not in left
    assert 7 in left
    assert _records(lg)[:3] == [(0, b"a0"), (3, b"b0"), (6, b"c0")]


# ------------------------------------------------------------------ faults
def test_a_failed_txnindex_write_takes_the_log_directory_offline(make_mgr, fs):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(txn(7, 0))
    fs.fail("write", path=".txnindex")
    with pytest.raises(KafkaStorageError):
        lg.append(marker(7, commit=False), origin=COORDINATOR)
    assert lg.dir_state.offline


def test_power_loss_between_the_log_fsync_and_the_txnindex_fsync(make_mgr, fs, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(txn(7, 0, 2))  # 0-1
    lg.append(txn(8, 0))  # 2
    lg.append(marker(7, commit=False), origin=COORDINATOR)  # 3: lso 2
    fs.fail("fsync", path=".txnindex")  # the log's data reached the disk, its .txnindex did not
    with pytest.raises(KafkaStorageError):
        lg.flush()
    for seg in lg.segments:
        seg.close()
    fs.clear()
    fs.crash()
    assert os.path.getsize(lg.active_segment.txn_index.path) == 0
    assert os.path.getsize(lg.active_segment.log_path) == lg.active_segment.size
    m2, lg2 = _reload(m, clock)
    # the recovery point never passed the marker: recovery re-reads it and rebuilds the entry
    assert lg2.active_segment.txn_index.entries == [AbortedTxn(7, 0, 3, 2)]
    assert txnindex_bytes(lg2.active_segment) == AbortedTxn(7, 0, 3, 2).encode()
    m2.shutdown()
