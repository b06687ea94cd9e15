"""A checksum error in a segment is handled as Kafka's LogLoader handles it.

Kafka (LogLoader.recoverLog, checked against Apache Kafka 4.4 in
tests/reference/test_corrupt_segment_reference.py): after a clean shutdown nothing is validated;
after an unclean stop only the unflushed segments, from the one holding the checkpointed
recovery point to the end, are validated; at the first invalid batch that segment is cut and
the unflushed segments after it are deleted; the flushed segments below the recovery point are
not read, so a checksum error in one of them cuts nothing (a consumer's or a follower's CRC
check meets it). odradek's recovery point never moved after the start, so one flipped bit in
an old segment cut every later segment, acknowledged records with them."""

from __future__ import annotations

import asyncio
import os
import struct

from support.batches import batch

from odradek.protocol.records import CONTROL_ABORT, build_batch, build_control_batch, iter_batches
from odradek.protocol.records import Record as R
from odradek.storage import FaultyFileSystem, LogConfig, LogManager
from odradek.storage.log import AppendOrigin
from odradek.storage.txn_index import AbortedTxn

CONFIG = LogConfig(segment_bytes=1500)
NOW = 1_700_000_000_000


def _flip_a_byte_inside_a_batch(path: str, batch_index: int = 1) -> None:
    """One byte of a record's value changes: the batch's CRC no longer matches, its framing does."""
    positions = [h.position for h in iter_batches(open(path, "rb").read())]
    with open(path, "r+b") as f:
        f.seek(positions[batch_index] + 100)
        b = f.read(1)
        f.seek(positions[batch_index] + 100)
        f.write(bytes([b[0] ^ 0x01]))


def _kill(m: LogManager) -> None:
    for lg in m.all_logs():
        for seg in lg.segments:
            seg.close()


def _reload(m: LogManager, clock) -> LogManager:
    m2 = LogManager(m.log_dirs, CONFIG, fs=FaultyFileSystem(real_fsync=False), clock=clock)
    m2.load()
    return m2


def _written_flushed_then_more(make_mgr, clock):
    """Five segments rolled and flushed (the recovery point, checkpointed, at the sixth, active,
    one), then three more rolled whose flush never ran, then a kill -9."""
    m = make_mgr()
    lg = m.create_log("t", 0, CONFIG)
    for _ in range(30):
        lg.append(batch(1, size=300, ts=clock.ms))
    asyncio.run(m.flush_rolled())  # what the background loop does after each roll
    m.write_checkpoints()  # what it does every log.flush.offset.checkpoint.interval.ms
    flushed_to = lg.recovery_point
    assert flushed_to == lg.active_segment.base_offset and lg.segment_count == 6
    m._flush_requests.clear()  # the kill comes before the next rolls' flushes
    for _ in range(12):
        lg.append(batch(1, size=300, ts=clock.ms))
    m._flush_requests.clear()
    layout = [(s.base_offset, s.log_path, s.size) for s in lg.segments]
    _kill(m)
    return m, lg, flushed_to, layout


def test_a_checksum_error_below_the_recovery_point_cuts_nothing(make_mgr, clock):
    m, lg, flushed_to, layout = _written_flushed_then_more(make_mgr, clock)
    _flip_a_byte_inside_a_batch(layout[0][1])  # the oldest segment, flushed long ago
    lg2 = _reload(m, clock).get_log("t", 0)
    assert [(s.base_offset, s.log_path, s.size) for s in lg2.segments] == layout
    assert lg2.log_end_offset == lg.log_end_offset == 42
    assert [b for b, _ in lg2.recovered_at_load] == [b for b, _, _ in layout if b >= flushed_to]


def test_a_checksum_error_in_an_unflushed_segment_cuts_there_and_drops_the_unflushed_ones_after_it(make_mgr, clock):
    m, lg, flushed_to, layout = _written_flushed_then_more(make_mgr, clock)
    unflushed = [entry for entry in layout if entry[0] >= flushed_to]
    assert len(unflushed) == 4
    _flip_a_byte_inside_a_batch(unflushed[0][1], batch_index=1)
    lg2 = _reload(m, clock).get_log("t", 0)
    kept = layout[: len(layout) - len(unflushed)]
    assert [(s.base_offset, s.log_path, s.size) for s in lg2.segments[:-1]] == kept
    assert lg2.active_segment.base_offset == flushed_to and lg2.log_end_offset == flushed_to + 1
    for _, path, _ in unflushed[1:]:
        assert not os.path.exists(path)


def test_after_a_clean_shutdown_no_segment_is_validated(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, CONFIG)
    for _ in range(20):
        lg.append(batch(1, size=300, ts=clock.ms))
    m.shutdown()
    layout = [(s.base_offset, s.log_path, s.size) for s in lg.segments]
    _flip_a_byte_inside_a_batch(layout[0][1])
    _flip_a_byte_inside_a_batch(layout[-1][1], batch_index=0)
    lg2 = _reload(m, clock).get_log("t", 0)
    assert [(s.base_offset, s.log_path, s.size) for s in lg2.segments] == layout
    assert lg2.recovered_at_load == []


def test_an_old_segment_with_a_corrupt_txnindex_is_recovered_alone(make_mgr, clock):
    """Kafka's loadSegmentFiles recovers a segment whose index fails its sanity check, alone. odradek
    recovered every segment from it to the end, so a checksum error in any later one cut the log."""
    m = make_mgr()
    lg = m.create_log("t", 0, CONFIG)
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    lg.append(build_batch([R(-1, NOW, None, b"v")], base_sequence=0, **txn))  # 0
    abort = build_control_batch(CONTROL_ABORT, producer_id=7, producer_epoch=0, timestamp=NOW)
    lg.append(abort, origin=AppendOrigin.COORDINATOR)  # 1
    lg.high_watermark = 2
    lg.roll()
    for _ in range(15):
        lg.append(batch(1, size=300, ts=clock.ms))
    first = lg.segments[0]
    assert first.txn_index.entries == [AbortedTxn(7, 0, 1, 2)]
    m.shutdown()
    layout = [(s.base_offset, s.log_path, s.size) for s in lg.segments]
    snapshots = sorted(n for n in os.listdir(lg.dir) if n.endswith(".snapshot"))
    with open(first.txn_index.path, "r+b") as f:  # the entry's last offset below the segment: fails the check
        f.seek(2 + 8 + 8)
        f.write(struct.pack(">q", -5))
    _flip_a_byte_inside_a_batch(layout[2][1])  # bit rot in a later segment
    lg2 = _reload(m, clock).get_log("t", 0)
    assert lg2.segments[0].txn_index.entries == [AbortedTxn(7, 0, 1, 2)]
    assert [(s.base_offset, s.log_path, s.size) for s in lg2.segments] == layout
    assert sorted(n for n in os.listdir(lg.dir) if n.endswith(".snapshot")) == snapshots  # later ones still good
