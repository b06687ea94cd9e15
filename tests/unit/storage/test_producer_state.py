import os

import pytest
from support.batches import batch

from odradek.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_batch, build_control_batch, iter_batches
from odradek.storage import LogConfig, LogManager, StorageInvalidProducerEpochError, StorageOutOfOrderSequenceError
from odradek.storage.log import AppendOrigin
from odradek.storage.producer_state import control_type

COORDINATOR = AppendOrigin.COORDINATOR


def pbatch(seq, n=1, pid=7, epoch=0, txn=False):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def test_duplicates_return_original_offsets(make_mgr):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(1))
    infos = [lg.append(pbatch(s * 2, 2)) for s in range(6)]
    assert [(i.first_offset, i.last_offset) for i in infos][:2] == [(1, 2), (3, 4)]
    leo = lg.log_end_offset
    # last 5 batches are remembered
    for _i, s in enumerate(range(1, 6)):
        d = lg.append(pbatch(s * 2, 2))
        assert d.duplicate and (d.first_offset, d.last_offset) == (infos[s].first_offset, infos[s].last_offset)
    assert lg.log_end_offset == leo
    # older than the window: neither duplicate nor in sequence
    with pytest.raises(StorageOutOfOrderSequenceError):
        lg.append(pbatch(0, 2))


def test_sequence_gaps_epochs_and_unknown_producers(make_mgr):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(pbatch(0, 3))
    with pytest.raises(StorageOutOfOrderSequenceError):
        lg.append(pbatch(4))  # gap (expected 3)
    lg.append(pbatch(3))
    with pytest.raises(StorageOutOfOrderSequenceError):
        lg.append(pbatch(5, epoch=1))  # new epoch must start at 0
    lg.append(pbatch(0, epoch=1))
    with pytest.raises(StorageInvalidProducerEpochError):
        lg.append(pbatch(4, epoch=0))  # fenced
    # unknown producer with seq != 0: accepted (its state may have been removed)
    i = lg.append(pbatch(42, pid=99))
    assert not i.duplicate
    lg.append(pbatch(43, pid=99))
    # several batches of one producer in a single append are checked in order
    lg.append(pbatch(1, epoch=1) + pbatch(2, epoch=1))
    with pytest.raises(StorageOutOfOrderSequenceError):
        lg.append(pbatch(3, epoch=1) + pbatch(5, epoch=1))
    # sequence wraps at int32 max
    lg.append(pbatch(2**31 - 1, pid=5))
    lg.append(pbatch(0, pid=5))


def test_transactions_tracked_and_ended_by_markers(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    lg.append(batch(1))
    lg.append(pbatch(0, 2, txn=True))
    lg.append(pbatch(2, 1, txn=True))
    lg.high_watermark = lg.log_end_offset
    assert lg.producer_state.first_unstable_offset() == 1
    assert lg.last_stable_offset == 1
    lg.append(
        build_control_batch(CONTROL_COMMIT, producer_id=7, producer_epoch=0, timestamp=clock.ms), origin=COORDINATOR
    )
    # complete, but unstable until the high watermark passes the marker (Kafka's unreplicated transactions)
    assert lg.producer_state.first_unstable_offset() == 1 and lg.last_stable_offset == 1
    lg.high_watermark = lg.log_end_offset
    assert lg.producer_state.first_unstable_offset() is None and lg.last_stable_offset == 5
    lg.append(pbatch(3, 1, pid=7, txn=True))
    lg.append(
        build_control_batch(CONTROL_ABORT, producer_id=7, producer_epoch=0, timestamp=clock.ms), origin=COORDINATOR
    )
    lg.high_watermark = lg.log_end_offset
    assert lg.producer_state.first_unstable_offset() is None
    lg.append(pbatch(0, 1, pid=8, txn=True))
    assert lg.producer_state.first_unstable_offset() == lg.log_end_offset - 1


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_snapshot_and_rebuild_across_reload(make_mgr, clock, shutdown):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=600))
    infos = []
    for s in range(10):
        infos.append(lg.append(pbatch(s, 1, pid=1)))
        lg.append(pbatch(s, 1, pid=2, txn=True))
    assert lg.segment_count > 2
    assert any(n.endswith(".snapshot") for n in os.listdir(lg.dir))
    if shutdown == "clean":
        m.shutdown()
    else:
        lg.flush()
        m.write_checkpoints()
        for s in lg.segments:
            s.close()
    m2 = LogManager(m.log_dirs, LogConfig(segment_bytes=600), fs=m.fs, clock=clock)
    m2.load()
    lg2 = m2.get_log("t", 0)
    d = lg2.append(pbatch(9, 1, pid=1))
    assert d.duplicate and d.first_offset == infos[9].first_offset
    with pytest.raises(StorageOutOfOrderSequenceError):
        lg2.append(pbatch(11, 1, pid=1))
    assert lg2.append(pbatch(10, 1, pid=1)).first_offset == 20
    assert lg2.producer_state.first_unstable_offset() == 1
    m2.shutdown()


def test_snapshot_corrupt_falls_back_to_replay(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=400))
    for s in range(8):
        lg.append(pbatch(s, 1, pid=3))
    m.shutdown()
    for n in os.listdir(lg.dir):
        if n.endswith(".snapshot"):
            with open(os.path.join(lg.dir, n), "r+b") as f:
                f.seek(20)
                f.write(b"\xff\xff")
    m2 = LogManager(m.log_dirs, LogConfig(segment_bytes=400), fs=m.fs, clock=clock)
    m2.load()
    lg2 = m2.get_log("t", 0)
    assert lg2.append(pbatch(7, 1, pid=3)).duplicate
    assert lg2.append(pbatch(8, 1, pid=3)).first_offset == 8


def test_truncate_rebuilds_producer_state(make_mgr):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=400))
    for s in range(8):
        lg.append(pbatch(s, 1, pid=3))
    lg.truncate_to(5)
    assert lg.append(pbatch(5, 1, pid=3)).first_offset == 5


def test_idle_producers_expire_but_open_transactions_stay(make_mgr):
    m = make_mgr()
    m.producer_id_expiration_ms = 60_000
    lg = m.create_log("t", 0, LogConfig(message_timestamp_before_max_ms=2**62))
    t0 = 1_700_000_000_000
    lg.append(batch(1, ts=t0, producer_id=1, producer_epoch=0, base_sequence=0))
    lg.append(batch(1, ts=t0, producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True))
    lg.append(batch(1, ts=t0 + 100_000, producer_id=3, producer_epoch=0, base_sequence=0))
    assert m.expire_producers(now=t0 + 120_000) == 1  # producer 1 idle 120 s; 2 has an open txn; 3 idle 20 s
    assert set(lg.producer_state.producers) == {2, 3}
    # An expired producer is unknown now: its next batch at a later sequence is accepted (Kafka's rule).
    lg.append(batch(1, ts=t0 + 120_000, producer_id=1, producer_epoch=0, base_sequence=7))


def test_snapshot_offsets_tracked_without_listing_the_directory(make_mgr, fs):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    ps = lg.producer_state

    def on_disk():
        return sorted(int(n.split(".")[0]) for n in os.listdir(lg.dir) if n.endswith(".snapshot"))

    lg.append(pbatch(0))
    lg.roll()
    listed = fs.calls.get("listdir", 0)
    for s in range(1, 10):
        lg.append(pbatch(s))
        lg.roll()
    assert fs.calls.get("listdir", 0) == listed  # rolls keep the list in memory
    assert ps.snapshot_offsets() == on_disk() == [7, 8, 9, 10]  # the newest 4
    lg.truncate_to(8)
    assert ps.snapshot_offsets() == on_disk() and max(on_disk()) <= 8
    lg.append(pbatch(8))
    lg.roll()
    assert ps.snapshot_offsets() == on_disk()


def test_control_type_of_markers_and_data_batches():
    buf = batch(2) + build_control_batch(CONTROL_COMMIT, producer_id=1, producer_epoch=0, timestamp=0)
    buf += build_control_batch(CONTROL_ABORT, producer_id=1, producer_epoch=0, timestamp=0)
    buf += build_batch([], producer_id=1, producer_epoch=0, is_transactional=True, is_control=True)  # no record
    hs = list(iter_batches(buf))
    assert [control_type(buf, h) for h in hs] == [None, CONTROL_COMMIT, CONTROL_ABORT, None]
