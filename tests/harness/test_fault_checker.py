"""The fault tests' checker (tests/support/checker.py): each anomaly it claims to find, found."""

from __future__ import annotations

import time

from support.checker import History, value


def _clean() -> History:
    h = History()
    for seq in range(3):
        v = value("w", seq)
        h.attempt(v)
        h.ack(0, seq, v)
        h.read(0, seq, v)
    return h


def test_a_clean_history_is_ok():
    r = _clean().check()
    assert r.ok, r
    assert (r.acknowledged, r.read) == (3, 3)


def test_an_acknowledged_record_not_read_where_acknowledged_is_lost():
    h = _clean()
    v = value("w", 3)
    h.attempt(v)
    h.ack(0, 3, v)
    h.read(0, 4, value("w", 4))  # a reader went past offset 3 and never saw it
    h.attempt(value("w", 4))
    r = h.check()
    assert not r.ok and r.lost == {0: [(3, v)]}, r


def test_an_acknowledgement_without_an_offset_must_be_read_somewhere():
    h = _clean()
    for seq, where in ((3, 3), (4, None)):
        v = value("w", seq)
        h.attempt(v)
        h.ack(0, None, v)  # librdkafka: DUPLICATE_SEQUENCE_NUMBER, stored at an unknown offset
        if where is not None:
            h.read(0, where, v)
    r = h.check()
    assert r.lost == {0: [(-1, value("w", 4))]} and r.acknowledged == 5, r


def test_duplicates_reordering_and_phantoms_are_reported():
    h = _clean()
    for seq in (3, 4):
        h.attempt(value("w", seq))
    h.read(0, 3, value("w", 4))
    h.read(0, 4, value("w", 3))  # after w-4: reordered
    h.read(0, 5, value("w", 1))  # w-1 again: duplicated
    h.read(0, 6, b"nobody-7")
    r = h.check()
    assert r.duplicated == {0: [(value("w", 1), [1, 5])]}, r
    assert r.reordered == {0: [("w", 4, 3)]}, r
    assert r.phantom == {0: [(6, b"nobody-7")]}, r


def test_a_later_copy_is_reported_as_duplicated_not_again_as_reordered():
    """librdkafka's re-send under a bumped producer epoch (librdkafka#4953) writes copies of
    values after later ones of the same producer: each is one duplicate (Workload.check traces
    it to its epochs), not also a reordering (issue 25: such a re-send failed a fault test as
    reordered while its duplicates were excused). The first copies are still checked."""
    h = _clean()  # w-0, w-1, w-2 at 0-2
    h.read(0, 3, value("w", 1))
    h.read(0, 4, value("w", 2))  # w-1 and w-2 re-sent
    h.attempt(value("w", 3))
    h.read(0, 5, value("w", 3))
    r = h.check()
    assert r.duplicated == {0: [(value("w", 1), [1, 3]), (value("w", 2), [2, 4])]}, r
    assert not r.reordered, r
    h = _clean()
    h.attempt(value("w", 5))
    h.read(0, 3, value("w", 5))
    h.read(0, 4, value("w", 1))  # a copy of w-1, read after w-5 as well
    h.attempt(value("w", 4))
    h.read(0, 5, value("w", 4))  # first read after w-5: reordered
    r = h.check()
    assert r.duplicated == {0: [(value("w", 1), [1, 4])]} and r.reordered == {0: [("w", 5, 4)]}, r


def test_an_offset_read_with_two_values_is_reported():
    h = _clean()
    h.attempt(value("v", 0))
    h.read(0, 1, value("v", 0))  # offset 1 read again, holding another record
    r = h.check()
    assert r.changed == {0: [(1, [value("v", 0), value("w", 1)])]}, r


def test_end_offsets_must_not_go_backwards_across_brokers():
    h = _clean()
    h.end_offset("b1", 0, 10, leader_epoch=0)
    h.end_offset("b1", 0, 12, leader_epoch=0)
    h.end_offset("b2", 1, 5, leader_epoch=0)  # another partition: its own history
    h.end_offset("b2", 0, 12, leader_epoch=1)  # the new leader, no lower: fine
    assert h.check().ok
    h.end_offset("b3", 0, 11, leader_epoch=2)  # lower than b2's and b1's answers
    h.end_offset("b3", 0, 12, leader_epoch=2)
    r = h.check()
    assert not r.ok
    assert r.end_offset_backwards == [("b3", 0, 12, 11, 1, 2)], r
    assert "end offset backwards: partition 0: 12 (leader epoch 1) -> 11 (leader epoch 2) from b3" in str(r)


def test_a_high_watermark_seen_above_the_final_one_is_reported_a_dip_is_not():
    h = _clean()
    h.high_watermark("r1", 0, 5)
    h.high_watermark("r2", 0, 3)  # another reader may lag
    h.high_watermark("r1", 0, 4)  # a new leader's lagging high watermark (Kafka's Fetch answers so)
    h.final_high_watermark(0, 5)
    r = h.check()
    assert r.ok and r.hw_dips == 1, r
    h.final_high_watermark(0, 4)  # the offset r1 saw committed is gone
    r = h.check()
    assert r.hw_backwards == [("r1", 0, 5, 4)], r
    assert "high watermark backwards: reader r1 partition 0: saw 5, final 4" in str(r)


def test_acknowledgements_are_counted_from_a_moment_on():
    h = History()
    h.ack(0, 0, value("w", 0))
    since = time.monotonic()
    time.sleep(0.01)
    h.ack(1, 0, value("w", 1))
    h.ack(2, 0, value("w", 2))
    assert h.acks_since(since) == 2
    assert h.acks_since(since, {1}) == 1
    assert h.acks_since(time.monotonic()) == 0
