"""A power cut between a roll and the flush it asks for leaves no hole in the log (issue 25).

The roll creates the new segment's file at once; the rolled segment is fsynced a moment later,
off the event loop (Kafka's ``flushUptoOffsetExclusive(newSegment.baseOffset)``). A power cut
in between can take the rolled segment's bytes while the new, empty file survives: recovery
then found the rolled segment short and the next one starting later, and took the log end to
be the new segment's base offset, over the lost records (the simulator's seeds 410, 554, 574
and 585). Recovery now takes a segment above the recovery point that ends before the next
one's base offset for the end of the log, as Kafka takes a truncated segment, and deletes the
later ones. The cleaner's holes are never there: it rewrites segments below the checkpointed
recovery point only."""

from __future__ import annotations

from support.batches import batch

from odradek.protocol.records import Record, build_batch, decode_any
from odradek.storage import FaultyFileSystem, LogConfig, LogManager

SEGMENT = LogConfig(segment_bytes=2000, index_interval_bytes=1)


def _kill(m: LogManager) -> None:
    """kill -9: files closed where they are, no flush, no checkpoint, no clean-shutdown marker."""
    for lg in m.all_logs():
        for seg in lg.segments:
            seg.close()


def _reload(m: LogManager, clock, config) -> LogManager:
    m2 = LogManager(m.log_dirs, config, fs=FaultyFileSystem(real_fsync=False), clock=clock)
    m2.load()
    return m2


def _offsets(lg) -> list[int]:
    return [r.offset for r in decode_any(lg.read_bytes(lg.log_start_offset, 1 << 24))]


def test_power_cut_between_a_roll_and_its_flush_ends_the_log_where_the_lost_tail_began(make_mgr, fs, clock, caplog):
    m = make_mgr()
    lg = m.create_log("t", 0, SEGMENT)
    while lg.segment_count < 2:
        lg.append(batch(1, size=300, ts=clock.ms))
    flushed = lg.active_segment.base_offset
    lg.flush(flushed)  # the first roll's flush ran
    m.write_checkpoints()  # and its recovery point is on disk
    while lg.segment_count < 3:  # the second roll: its flush is asked, not run
        lg.append(batch(1, size=300, ts=clock.ms))
    rolled_to = lg.active_segment.base_offset
    assert lg.recovery_point == flushed < rolled_to
    _kill(m)
    fs.crash()  # power cut: the rolled segment's bytes are gone, the new segment's file is not
    lg2 = _reload(m, clock, SEGMENT).get_log("t", 0)
    assert lg2.log_end_offset == flushed  # was rolled_to: a hole over [flushed, rolled_to)
    assert [s.base_offset for s in lg2.segments] == [0, flushed]
    assert _offsets(lg2) == list(range(flushed))
    assert "its unflushed tail was lost, the log ends there" in caplog.text
    lg2.append(batch(1, size=300, ts=clock.ms))  # the log goes on from there, without a hole
    assert _offsets(lg2) == list(range(flushed + 1))


COMPACT = LogConfig(
    segment_bytes=1000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, file_delete_delay_ms=0
)


def _kv(i: int, ts: int) -> bytes:
    return build_batch([Record(-1, ts, b"k%d" % (i % 3), b"v%d-" % i + b"x" * 80)])


def test_the_cleaner_checkpoints_the_recovery_point_first_and_its_holes_survive_a_power_cut(make_mgr, fs, clock):
    """The cleaned segments end below the checkpointed recovery point, so recovery never reads
    their holes as lost tails: nothing the cleaner kept is deleted after a power cut."""
    m = make_mgr()
    lg = m.create_log("t", 0, COMPACT)
    for i in range(40):
        lg.append(_kv(i, clock.ms + i))
    lg.high_watermark = lg.log_end_offset
    active = lg.active_segment.base_offset
    assert lg.checkpointed_recovery_point == 0  # no roll's flush or checkpoint ran
    assert m.clean_once() == 1
    assert lg.checkpointed_recovery_point == active  # flushed and checkpointed before cleaning
    kept = _offsets(lg)
    assert len(kept) < 40 and kept[-1] == 39  # holes in the cleaned segments
    ends = [(s.next_offset, n.base_offset) for s, n in zip(lg.segments, lg.segments[1:], strict=False)]
    assert any(end < nxt for end, nxt in ends)  # a cleaned segment ends before the next one's base
    _kill(m)
    fs.crash()
    lg2 = _reload(m, clock, COMPACT).get_log("t", 0)
    assert _offsets(lg2) == [o for o in kept if o < active]  # only the unflushed active segment lost
    assert lg2.log_end_offset == active
