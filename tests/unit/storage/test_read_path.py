"""The read path against a model of the log, and the scatter write under short writes."""

import os
import random

import pytest
from support.batches import batch

from odradek.protocol.records import iter_batches
from odradek.storage import LogConfig
from odradek.storage.log import RECENT_BATCH_BYTES


def region_bytes(r) -> bytes:
    """The bytes a read returned: file regions read back, the recent append's bytes as they are."""
    return b"".join(x if isinstance(x, bytes) else os.pread(x.fd, x.length, x.position) for x in r.regions)


def model_read(batches, offset, max_bytes, limit, min_one):
    """Expected (first offset, byte length) of a read over one segment, from first principles:
    whole batches from the one holding ``offset``, none with base >= limit, within max_bytes
    (the first one whole when min_one); nothing at or past the limit."""
    if offset >= limit:
        return -1, 0
    i = next((k for k, (b, last, _) in enumerate(batches) if last >= offset), None)
    if i is None or batches[i][0] >= limit:
        return -1, 0
    total = 0
    first = batches[i][0]
    while i < len(batches) and batches[i][0] < limit and total + batches[i][2] <= max_bytes:
        total += batches[i][2]
        i += 1
    if total == 0:
        return (first, batches[i][2]) if min_one else (-1, 0)
    return first, total


@pytest.mark.parametrize("interval", [0, 1, 300, 4096])
def test_reads_match_model_sequential_and_random(make_mgr, clock, interval):
    rnd = random.Random(interval)
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(index_interval_bytes=interval))
    model = []  # (base, last, size)
    for _ in range(120):
        n = rnd.randint(1, 4)
        b = batch(n, size=rnd.choice([80, 150, 700, 2500]), ts=clock.ms)
        info = lg.append(b)
        model.append((info.first_offset, info.last_offset, len(b)))
    leo = lg.log_end_offset
    # every batch on disk is valid and carries its assigned offsets
    data = lg.read_bytes(0, 1 << 30)
    assert [(h.base_offset, h.last_offset, h.size) for h in iter_batches(data, validate=True)] == model
    for max_bytes in (1, 100, 1000, 5000, 1 << 20):
        # a sequential consumer (hits the per-segment hint)
        off = 0
        while off < leo:
            r = lg.read(off, max_bytes)
            assert (r.first_offset, r.size) == model_read(model, off, max_bytes, leo, True), (off, max_bytes)
            got = region_bytes(r)
            off = list(iter_batches(got))[-1].next_offset
            assert r.next_offset == off  # known from headers the read peeked (no gaps here)
        # random access, limits and min_one_batch off
        for _ in range(60):
            off = rnd.randrange(leo + 1)
            limit = rnd.randrange(off, leo + 1)
            min_one = rnd.random() < 0.7
            r = lg.read(off, max_bytes, max_offset=limit, min_one_batch=min_one)
            assert (r.first_offset, r.size) == model_read(model, off, max_bytes, limit, min_one), (
                off,
                max_bytes,
                limit,
                min_one,
            )
            got = region_bytes(r)
            assert r.next_offset == (list(iter_batches(got))[-1].next_offset if got else -1)


def test_short_writes_are_completed(make_mgr, clock, monkeypatch):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    real = os.pwritev
    calls = []

    def short(fd, bufs, offset):  # the kernel may write less than asked: 7 bytes at a time
        calls.append(len(bufs))
        flat = b"".join(bytes(b) for b in bufs)[:7]
        return real(fd, [flat], offset)

    monkeypatch.setattr(os, "pwritev", short)
    infos = [lg.append(batch(2, size=100, ts=clock.ms) + batch(1, size=60, ts=clock.ms)) for _ in range(3)]
    monkeypatch.undo()
    assert len(calls) > 30
    data = lg.read_bytes(0, 1 << 20)
    hs = list(iter_batches(data, validate=True))
    assert [h.base_offset for h in hs] == [0, 2, 3, 5, 6, 8]
    assert infos[-1].last_offset == 8 and lg.log_end_offset == 9


def test_idempotent_and_log_append_time_batches(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(message_timestamp_type="LogAppendTime"))
    b1 = batch(3, ts=clock.ms - 5000, producer_id=7, producer_epoch=0, base_sequence=0)
    b2 = batch(2, ts=clock.ms - 5000, producer_id=7, producer_epoch=0, base_sequence=3)
    i1 = lg.append(b1 + b2, leader_epoch=2)
    assert (i1.first_offset, i1.last_offset, i1.log_append_time_ms) == (0, 4, clock.ms)
    assert lg.append(b2).duplicate  # the second batch again: original offsets
    assert (lg.append(b2).first_offset, lg.append(b2).last_offset) == (3, 4)
    hs = list(iter_batches(lg.read_bytes(0, 1 << 20), validate=True))  # CRCs recomputed
    assert [(h.base_offset, h.max_timestamp, h.timestamp_type, h.partition_leader_epoch) for h in hs] == [
        (0, clock.ms, 1, 2),
        (3, clock.ms, 1, 2),
    ]
    e = lg.producer_state.producers[7]
    assert e.batches == [(0, 2, 0, 2), (3, 4, 3, 4)] and e.last_timestamp == clock.ms


def test_caught_up_reader_starts_at_the_last_write(make_mgr, clock):
    """A consumer at the end asks for what was just appended: the read starts at the last write's
    position (one header peek), not at the sparse index entry up to index.interval.bytes back;
    reads stay exact across truncation and further appends."""
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig(index_interval_bytes=4096))
    seg = lg.active_segment
    peeks = 0
    real_peek = seg.peek

    def counting_peek(pos):
        nonlocal peeks
        peeks += 1
        return real_peek(pos)

    seg.peek = counting_peek
    off = 0
    for i in range(300):
        info = lg.append(batch(1 + i % 3, size=90, ts=clock.ms))
        lg.high_watermark = lg.log_end_offset  # replicated: the file is read, not the append's bytes
        peeks = 0
        r = lg.read(off, 1 << 20)
        assert peeks <= 2, (i, peeks)  # the batch itself and the end of file
        assert (r.first_offset, r.next_offset) == (info.first_offset, info.last_offset + 1)
        got = region_bytes(r)
        assert [h.base_offset for h in iter_batches(got, validate=True)] == [info.first_offset]
        off = r.next_offset
    # a read of an older offset still goes through the index and finds the right batch
    r = lg.read(5, 1)
    got = region_bytes(r)
    h = next(iter_batches(got))
    assert h.base_offset <= 5 <= h.last_offset
    # truncation forgets the last write; the next append and read are exact again
    lg.truncate_to(off - 10)
    info = lg.append(batch(2, size=90, ts=clock.ms))
    assert info.first_offset == lg.log_end_offset - 2
    for start in (info.first_offset - 3, info.first_offset, info.first_offset + 1):
        r = lg.read(start, 1 << 20)
        got = region_bytes(r)
        hs = list(iter_batches(got, validate=True))
        assert hs[0].base_offset <= start <= hs[0].last_offset and hs[-1].next_offset == lg.log_end_offset


def test_a_follower_copying_the_last_append_gets_its_bytes_without_touching_the_file(make_mgr, clock):
    """The last append, one batch of at most RECENT_BATCH_BYTES, is answered from the bytes
    written (no header peek, no pread) until the high watermark passes it; the bytes are the
    file's; anything else (more batches, a larger one, a read past a limit, after truncation or
    the high watermark moving) reads the file as before."""
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    seg = lg.active_segment
    peeks = 0
    real_peek = seg.peek

    def counting_peek(pos):
        nonlocal peeks
        peeks += 1
        return real_peek(pos)

    seg.peek = counting_peek
    for _ in range(3):
        info = lg.append(batch(1, size=100, ts=clock.ms))
        peeks = 0
        r = lg.read(info.first_offset, 1 << 20)
        assert peeks == 0 and len(r.regions) == 1 and isinstance(r.regions[0], bytes)
        assert (r.first_offset, r.next_offset, r.size) == (info.first_offset, info.last_offset + 1, len(r.regions[0]))
        on_disk = os.pread(seg.fd, r.size, seg.size - r.size)
        assert r.regions[0] == on_disk
        # within the byte limit only when the reader wants at least one batch
        assert lg.read(info.first_offset, 10, min_one_batch=False).regions == []
        assert lg.read(info.first_offset, 10).regions == [on_disk]
        # a consumer's read stops at its limit (the high watermark): nothing
        assert lg.read(info.first_offset, 1 << 20, max_offset=info.first_offset).regions == []
    # the high watermark passed it: a file region again, the same bytes
    lg.high_watermark = lg.log_end_offset
    r = lg.read(info.first_offset, 1 << 20)
    assert not isinstance(r.regions[0], bytes) and region_bytes(r) == on_disk
    # two batches in one append, or one larger than the limit: file regions
    two = lg.append(batch(1, size=100, ts=clock.ms) + batch(1, size=100, ts=clock.ms))
    assert not any(isinstance(x, bytes) for x in lg.read(two.first_offset, 1 << 20).regions)
    big = lg.append(batch(1, size=RECENT_BATCH_BYTES + 100, ts=clock.ms))
    assert not any(isinstance(x, bytes) for x in lg.read(big.first_offset, 1 << 20).regions)
    # truncated away: forgotten; the next append is the one answered
    small = lg.append(batch(1, size=100, ts=clock.ms))
    lg.truncate_to(small.first_offset)
    assert lg.read(small.first_offset, 1 << 20).regions == []
    again = lg.append(batch(2, size=120, ts=clock.ms))
    r = lg.read(again.first_offset, 1 << 20)
    assert isinstance(r.regions[0], bytes) and r.next_offset == again.last_offset + 1
    assert [h.base_offset for h in iter_batches(r.regions[0], validate=True)] == [again.first_offset]
    # after a roll the new active segment's append is the one kept
    lg.roll()
    rolled = lg.append(batch(1, size=100, ts=clock.ms))
    r = lg.read(rolled.first_offset, 1 << 20)
    active = lg.active_segment
    assert active is not seg and isinstance(r.regions[0], bytes)
    assert r.regions[0] == os.pread(active.fd, r.size, active.size - r.size)
