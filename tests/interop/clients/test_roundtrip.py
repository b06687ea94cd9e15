"""Produce and consume against real peers: byte-exact records, codecs, offsets, positions."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.client import Consumer, Producer, TopicPartition, errors
from odradek.client.aio import AIOConsumer, AIOProducer


def sample_records(n: int = 60):
    out = []
    for i in range(n):
        key = f"key-{i % 13}".encode()
        value = bytes([i % 256, 0, 255, 10, 13]) + "ünïcødé\n".encode() + bytes(range(i % 9))
        if i == 5:
            value = b""
        headers = [("idx", str(i).encode()), ("bin", bytes([0, 0x7F, 0x80, 0xFF])), ("empty", b""), ("null", None)]
        out.append((key, value, headers))
    out.append((None, b"null-key", []))
    out.append((b"null-value", None, []))
    return out


def consume_all(consumer, expected: int, timeout: float = 20):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5))
    return got


def test_blocking_roundtrip_byte_exact(peer):
    topic = peer.new_topic(4)
    recs = sample_records()
    with Producer(bootstrap_servers=peer.bootstrap, linger_ms=2) as p:
        futs = [p.send(topic, v, key=k, headers=h) for k, v, h in recs]
        p.flush()
        metas = [f.result(10) for f in futs]
    assert all(m.topic == topic and m.offset >= 0 for m in metas)
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, p) for p in range(4)])
        got = consume_all(c, len(recs))
    assert len(got) == len(recs)
    by_pos = {(r.partition, r.offset): r for r in got}
    for (k, v, h), m in zip(recs, metas):
        r = by_pos[(m.partition, m.offset)]
        assert (r.key, r.value) == (k, v)
        assert r.headers == tuple((hk, hv) for hk, hv in h)
        assert r.timestamp_type == 0


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codecs(peer, codec):
    topic = peer.new_topic(4)
    values = [(b"%05d" % i) * (i % 50 + 1) for i in range(300)]
    with Producer(bootstrap_servers=peer.bootstrap, compression_type=codec, linger_ms=5) as p:
        for i, v in enumerate(values):
            p.send(topic, v, key=b"k%d" % i, partition=i % 2)
        p.flush()
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = consume_all(c, len(values))
    assert sorted(r.value for r in got) == sorted(values)
    assert {(r.partition, r.key) for r in got} == {(i % 2, b"k%d" % i) for i in range(300)}


def test_aio_roundtrip_and_offsets(peer):
    async def run():
        topic = peer.new_topic(4)
        async with AIOProducer(bootstrap_servers=peer.bootstrap, linger_ms=1) as p:
            t0 = int(time.time() * 1000)
            metas = []
            for i in range(20):
                fut = await p.send(topic, b"v%d" % i, partition=1, timestamp=t0 + i * 1000)
                metas.append(fut)
            metas = [await f for f in metas]
        assert [m.offset for m in metas] == list(range(20))
        async with (
            AIOConsumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c,
            AIOProducer(bootstrap_servers=peer.bootstrap) as p2,
        ):
            tp = TopicPartition(topic, 1)
            c.assign([tp])
            assert (await c.beginning_offsets([tp]))[tp] == 0
            if peer.supports("end_offsets"):
                assert (await c.end_offsets([tp]))[tp] == 20
            if peer.supports("offsets_for_times"):
                found = await c.offsets_for_times({tp: t0 + 5500})
                assert found[tp].offset == 6 and found[tp].timestamp == t0 + 6000
                assert (await c.offsets_for_times({tp: t0 + 10**9}))[tp] is None
            c.seek(tp, 15)
            got = []
            while len(got) < 5:
                got += await c.poll(5)
            assert [r.offset for r in got] == [15, 16, 17, 18, 19]
            assert [r.timestamp for r in got] == [t0 + i * 1000 for i in range(15, 20)]
            assert await c.position(tp) == 20
            c.seek_to_beginning(tp)
            assert await c.position(tp) == 0
            r = await c.getone(5)
            assert r.offset == 0 and r.value == b"v0"
            if peer.supports("end_offsets"):
                c.seek_to_end(tp)
                assert await c.position(tp) == 20
                await p2.send_and_wait(topic, b"after-end", partition=1)
                r = await c.getone(5)
                assert (r.offset, r.value) == (20, b"after-end")

    asyncio.run(run())


def test_auto_offset_reset_none_and_latest(peer):
    topic = peer.new_topic(4)
    with Producer(bootstrap_servers=peer.bootstrap) as p:
        p.send(topic, b"old", partition=0).result(10)
    with Consumer(
        bootstrap_servers=peer.bootstrap, group_id=f"none-{topic}", auto_offset_reset="none", fetch_max_wait_ms=100
    ) as c:
        c.assign([TopicPartition(topic, 0)])
        with pytest.raises((errors.NoOffsetForPartitionError, errors.OffsetOutOfRangeError)):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                c.poll(0.2)
        # an explicit out-of-range seek surfaces OffsetOutOfRange with reset=none
        if peer.supports("offset_out_of_range"):
            c.seek(TopicPartition(topic, 0), 1000)
            with pytest.raises(errors.OffsetOutOfRangeError):
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    c.poll(0.2)
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=100) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        if peer.supports("end_offsets"):
            assert c.position(tp) == 1
        with Producer(bootstrap_servers=peer.bootstrap) as p:
            p.send(topic, b"new", partition=0).result(10)
        got = consume_all(c, 1, timeout=10)
        assert [r.value for r in got] == [b"new"]


def test_pause_resume(peer):
    topic = peer.new_topic(4)
    with Producer(bootstrap_servers=peer.bootstrap) as p:
        for i in range(10):
            p.send(topic, b"a%d" % i, partition=0)
            p.send(topic, b"b%d" % i, partition=1)
        p.flush()
    a, b = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([a, b])
        c.pause(b)
        assert c.paused() == {b}
        got = consume_all(c, 10)
        time.sleep(0.3)
        got += c.poll(0.5)
        assert {r.partition for r in got} == {0} and len(got) == 10
        c.resume(b)
        got = consume_all(c, 10)
        assert [r.value for r in got] == [b"b%d" % i for i in range(10)]


def test_delivery_callback_and_errors(peer):
    topic = peer.new_topic(4)
    results = []
    with Producer(bootstrap_servers=peer.bootstrap, max_block_ms=500) as p:
        p.send(topic, b"x", partition=2, callback=lambda m, e: results.append((m, e))).result(10)
        p.flush()
        # a partition the metadata lacks: wait max.block.ms for metadata showing it (as Java)
        with pytest.raises(errors.KafkaTimeoutError, match="partition 99 of topic .* partition count 4"):
            p.send(topic, b"x", partition=99)
        with pytest.raises(ValueError, match="invalid partition -1"):
            p.send(topic, b"x", partition=-1)
    assert results and results[0][1] is None and results[0][0].partition == 2


def test_acks_variants(peer):
    topic = peer.new_topic(4)
    for acks in (0, 1, "all"):
        idem = acks == "all"
        with Producer(bootstrap_servers=peer.bootstrap, acks=acks, enable_idempotence=idem) as p:
            m = p.send(topic, b"acks-%s" % str(acks).encode(), partition=3).result(10)
            assert m.partition == 3
            if acks != 0:
                assert m.offset >= 0


def test_blocking_poll_errors_timeout_and_close(peer_named):
    """The blocking poll hands back what the I/O thread raised, honours its timeout when
    nothing is there, and refuses to run once closed."""
    peer = peer_named("odradek")
    topic = peer.new_topic(1)
    c = Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50)
    try:
        with pytest.raises(errors.IllegalStateError):
            c.poll(0.1)  # neither subscribed nor assigned: raised on the I/O thread, seen here
        c.assign([TopicPartition(topic, 0)])
        t = time.monotonic()
        assert c.poll(0.3) == []
        assert 0.25 <= time.monotonic() - t < 10
        assert c.poll(0) == []
        with Producer(bootstrap_servers=peer.bootstrap) as p:
            p.send(topic, b"one", partition=0).result(10)
        got = consume_all(c, 1)
        assert [r.value for r in got] == [b"one"]
    finally:
        c.close()
    with pytest.raises(errors.IllegalStateError):
        c.poll(0.1)


def test_idempotent_producer_bumps_its_epoch_over_a_sequence_gap(peer_named):
    """A batch the broker refuses for good (MESSAGE_TOO_LARGE: over the topic's
    max.message.bytes) never takes its sequence numbers, so the broker answers the partition's
    batches sent after it OUT_OF_ORDER_SEQUENCE_NUMBER. The producer bumps its epoch (KIP-360,
    locally as Java's idempotent producer), numbers those batches from 0 again and delivers
    them, each exactly once and in order; another partition starts over at sequence 0 under the
    new epoch with its next batch."""
    from odradek.client import Admin

    peer = peer_named("odradek")
    topic = f"gap-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=peer.bootstrap) as a:
        a.create_topic(topic, 2, 1, {"max.message.bytes": "2000"})
    p = Producer(
        bootstrap_servers=peer.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=0,
        batch_size=1000,  # batches of the later records stay under max.message.bytes
        delivery_timeout_ms=8000,
        request_timeout_ms=3000,
        retry_backoff_ms=20,
    )
    after = [b"after-%02d-" % i + b"y" * 200 for i in range(20)]  # too large to join the refused batch
    try:
        sender = p._core.sender
        for i in range(5):
            p.send(topic, b"before-%d" % i, partition=0).result(10)
        p.send(topic, b"other", partition=1).result(10)
        pid, epoch = sender.producer_id, sender.producer_epoch
        big = p.send(topic, b"x" * 5000, partition=0)
        futs = [p.send(topic, v, partition=0) for v in after]
        with pytest.raises(errors.MessageTooLargeError):
            big.result(10)
        metas = [f.result(15) for f in futs]
        assert [m.offset for m in metas] == list(range(5, 25))
        assert sender.epoch_bumps == 1 and (sender.producer_id, sender.producer_epoch) == (pid, epoch + 1)
        assert p.send(topic, b"other-2", partition=1).result(10).offset == 1
        p1 = sender.seqs.partitions[(topic, 1)]
        assert (p1.producer_epoch, p1.last_acked_sequence) == (epoch + 1, 0)
    finally:
        p.close()
    c = Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50)
    try:
        c.assign([TopicPartition(topic, 0)])
        got = consume_all(c, 25)
        assert [r.value for r in got] == [b"before-%d" % i for i in range(5)] + after
    finally:
        c.close()


def test_offsets_of_a_topic_not_yet_in_metadata_wait_for_metadata_not_a_backoff(peer):
    """A just-assigned topic's leader is unknown until metadata arrives: the offset lookup asks
    for the metadata and goes on when it comes, instead of failing and sleeping
    retry.backoff.ms first (a whole backoff before every fresh consumer's first records)."""

    async def run():
        topic = peer.new_topic(4)
        async with AIOProducer(bootstrap_servers=peer.bootstrap) as p:
            await p.send_and_wait(topic, b"x", partition=2)
        async with AIOConsumer(
            bootstrap_servers=peer.bootstrap,
            auto_offset_reset="earliest",
            retry_backoff_ms=5000,
            retry_backoff_max_ms=5000,
        ) as c:
            tp = TopicPartition(topic, 2)
            c.assign([tp])
            t0 = time.monotonic()
            assert (await c.beginning_offsets([tp]))[tp] == 0
            took = time.monotonic() - t0
            r = await c.getone(10)
            assert (r.partition, r.offset, r.value) == (2, 0, b"x")
        assert took < 4, f"offset lookup took {took:.1f}s: it slept the 5s backoff"

    asyncio.run(run())


def test_records_survive_the_reuse_of_large_response_buffers(peer, impl):
    """Fetch responses over 256 KiB are received into buffers that are reused, and their
    records are decoded from views of them: records handed out earlier must keep their
    values when later responses land in the same memory (both record codecs)."""

    async def run():
        topic = peer.new_topic(4)
        values = [bytes([i % 251]) * 1000 + b"%06d" % i for i in range(1500)]
        async with AIOProducer(bootstrap_servers=peer.bootstrap, linger_ms=5) as p:
            for v in values:
                await p.send(topic, v, partition=0)
            await p.flush()
        got = []
        async with AIOConsumer(
            bootstrap_servers=peer.bootstrap,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=300 * 1024,
            fetch_max_wait_ms=100,
        ) as c:
            c.assign([TopicPartition(topic, 0)])
            while len(got) < len(values):
                got += await c.poll(5)
        assert all(type(r.value) is bytes for r in got)
        assert [r.value for r in got] == values

    asyncio.run(run())


def test_blocking_producer_shared_by_threads(peer):
    """Several threads send through one blocking Producer while its I/O thread drains
    (small batches, so draining and appending overlap): every record lands exactly once, at
    the offset its future reports, and each thread's records keep their order per partition."""
    import threading

    topic = peer.new_topic(4)
    n_threads, per_thread = 4, 1500
    futs: dict[int, list] = {t: [] for t in range(n_threads)}
    with Producer(bootstrap_servers=peer.bootstrap, linger_ms=1, batch_size=2048) as p:

        def run(t):
            for i in range(per_thread):
                futs[t].append(p.send(topic, b"%d-%d" % (t, i), key=b"k%d" % (i % 7)))

        import sys

        threads = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
        before = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show
        try:
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        finally:
            sys.setswitchinterval(before)
        p.flush()
        metas = {t: [f.result(10) for f in fs] for t, fs in futs.items()}
    with Consumer(bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, q) for q in range(4)])
        got = consume_all(c, n_threads * per_thread)
    assert len(got) == n_threads * per_thread
    at = {(r.partition, r.offset): r.value for r in got}
    assert len(at) == len(got)
    for t, ms in metas.items():
        assert [at[(m.partition, m.offset)] for m in ms] == [b"%d-%d" % (t, i) for i in range(per_thread)]
        for q in range(4):
            offs = [m.offset for m in ms if m.partition == q]
            assert offs == sorted(offs)
