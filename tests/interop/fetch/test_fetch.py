"""Fetch behaviour at the protocol level: long polling woken by appends, byte limits,
fetch sessions (KIP-227), topic ids, and errors."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from support.raw import RawConnection, nested

from odradek.protocol.records import Record, build_batch, iter_batches

pytestmark = pytest.mark.interop

FETCH, PRODUCE, METADATA, CREATE = 1, 0, 3, 19
V = 12  # flexible, topics by name
VID = 16  # topics by id


def _create(conn: RawConnection, name: str, partitions: int = 1) -> uuid.UUID:
    topic = nested(
        CREATE,
        7,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=1,
        assignments=(),
        configs=(),
    )
    r = conn.call(CREATE, 7, topics=(topic,), timeout=10000, validate_only=False)
    assert int(r.topics[0].error_code) == 0
    return r.topics[0].topic_id


def _produce(conn: RawConnection, topic: str, values: list[bytes], partition: int = 0) -> int:
    batch = build_batch([Record(value=v, timestamp=int(time.time() * 1000)) for v in values])
    pd = nested(PRODUCE, 9, "PartitionProduceData", index=partition, records=batch)
    td = nested(PRODUCE, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    r = conn.call(PRODUCE, 9, acks=-1, timeout=10000, topic_data=(td,))
    p = r.responses[0].partition_responses[0]
    assert int(p.error_code) == 0, p
    return p.base_offset


def _fetch(
    conn: RawConnection,
    topic,
    offset: int,
    *,
    version: int = V,
    max_wait: int = 0,
    min_bytes: int = 1,
    partition_max: int = 1 << 20,
    session_id: int = 0,
    epoch: int = -1,
    partitions=(0,),
    forgotten=(),
    max_bytes: int = 50 << 20,
):
    key = {"topic_id": topic} if version >= 13 else {"topic": topic}
    parts = tuple(
        nested(
            FETCH,
            version,
            "FetchPartition",
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=partition_max,
        )
        for p in partitions
    )
    topics = (nested(FETCH, version, "FetchTopic", partitions=parts, **key),) if parts else ()
    forg = tuple(nested(FETCH, version, "ForgottenTopic", partitions=tuple(fp), **key) for fp in forgotten)
    return conn.call(
        FETCH,
        version,
        replica_id=-1,
        max_wait=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=topics,
        forgotten_topics_data=forg,
        rack_id="",
    )


def _values(resp) -> list[bytes]:
    from odradek.protocol.records import decode_records

    out = []
    for t in resp.responses:
        for p in t.partitions:
            data = p.records or b""
            for h in iter_batches(data):
                out += [r.value for r in decode_records(data, h.position)]
    return out


def test_long_poll_is_woken_by_an_append(broker):
    with RawConnection(broker.bootstrap) as c, RawConnection(broker.bootstrap) as producer:
        _create(c, "lp")
        timer = threading.Timer(0.5, lambda: _produce(producer, "lp", [b"wake"]))
        started = time.time()
        timer.start()
        r = _fetch(c, "lp", 0, max_wait=10_000)
        elapsed = time.time() - started
        timer.join()
    assert _values(r) == [b"wake"]
    assert 0.4 < elapsed < 3, elapsed  # woken by the append, not by the 10 s timeout


def test_min_bytes_waits_for_max_wait_then_answers(broker):
    with RawConnection(broker.bootstrap) as c:
        _create(c, "mb")
        _produce(c, "mb", [b"small"])
        started = time.time()
        r = _fetch(c, "mb", 0, max_wait=800, min_bytes=1 << 20)
        elapsed = time.time() - started
    assert _values(r) == [b"small"]
    assert 0.7 < elapsed < 3, elapsed


def test_first_batch_is_returned_even_when_larger_than_the_limit(broker):
    with RawConnection(broker.bootstrap) as c:
        _create(c, "big")
        _produce(c, "big", [b"a" * 5000])
        _produce(c, "big", [b"b" * 5000])
        r = _fetch(c, "big", 0, partition_max=100)
        assert _values(r) == [b"a" * 5000]  # whole first batch, and only that
        r = _fetch(c, "big", 0, partition_max=20000)
        assert _values(r) == [b"a" * 5000, b"b" * 5000]


def test_offset_out_of_range_and_high_watermark(broker):
    with RawConnection(broker.bootstrap) as c:
        _create(c, "oor")
        _produce(c, "oor", [b"x", b"y"])
        p = _fetch(c, "oor", 5).responses[0].partitions[0]
        assert int(p.error_code) == 1  # OFFSET_OUT_OF_RANGE
        p = _fetch(c, "oor", 2).responses[0].partitions[0]
        assert int(p.error_code) == 0 and p.high_watermark == 2 and not p.records


def test_topic_ids_from_v13(broker):
    with RawConnection(broker.bootstrap) as c:
        tid = _create(c, "ids")
        _produce(c, "ids", [b"by-id"])
        r = _fetch(c, tid, 0, version=VID)
        assert r.responses[0].topic_id == tid
        assert _values(r) == [b"by-id"]
        p = _fetch(c, uuid.uuid4(), 0, version=VID).responses[0].partitions[0]
        assert int(p.error_code) == 100  # UNKNOWN_TOPIC_ID


def test_fetch_sessions_full_then_incremental(broker):
    with RawConnection(broker.bootstrap) as c:
        _create(c, "sess", 2)
        _produce(c, "sess", [b"p0-a"], partition=0)
        _produce(c, "sess", [b"p1-a"], partition=1)
        full = _fetch(c, "sess", 0, epoch=0, partitions=(0, 1))
        sid = full.session_id
        assert sid != 0
        assert sorted(_values(full)) == [b"p0-a", b"p1-a"]
        # Incremental, positions moved to the end: nothing new -> no partitions in the answer.
        inc = _fetch(c, "sess", 1, session_id=sid, epoch=1, partitions=(0, 1), max_wait=100)
        assert inc.session_id == sid and inc.responses == ()
        # New data on partition 1 only: the answer carries partition 1 only, though the request names none.
        _produce(c, "sess", [b"p1-b"], partition=1)
        inc = _fetch(c, "sess", 1, session_id=sid, epoch=2, partitions=(), max_wait=100)
        assert [(t.topic, [p.partition_index for p in t.partitions]) for t in inc.responses] == [("sess", [1])]
        assert _values(inc) == [b"p1-b"]
        # A stale epoch, an unknown session.
        assert (
            int(_fetch(c, "sess", 1, session_id=sid, epoch=2, partitions=()).error_code) == 71
        )  # INVALID_FETCH_SESSION_EPOCH
        assert (
            int(_fetch(c, "sess", 1, session_id=sid + 12345, epoch=1, partitions=()).error_code) == 70
        )  # FETCH_SESSION_ID_NOT_FOUND
        # Forgetting partition 0 and closing the session.
        # The client moves partition 1 past p1-b and forgets partition 0.
        inc = _fetch(c, "sess", 2, session_id=sid, epoch=3, partitions=(1,), forgotten=[(0,)], max_wait=0)
        _produce(c, "sess", [b"p0-b"], partition=0)
        inc = _fetch(c, "sess", 2, session_id=sid, epoch=4, partitions=(), max_wait=100)
        assert inc.responses == ()  # partition 0 left the session: its new record isn't fetched
        closed = _fetch(c, "sess", 0, session_id=sid, epoch=-1, partitions=(0,))
        assert closed.session_id == 0
        assert int(_fetch(c, "sess", 1, session_id=sid, epoch=5, partitions=()).error_code) == 70


def test_idle_connections_are_closed(broker_factory):
    b = broker_factory(overrides={"connections.max.idle.ms": "400"})
    with RawConnection(b.bootstrap) as c:
        c.call(18, 3, client_software_name="raw", client_software_version="1")
        time.sleep(1.5)
        with pytest.raises((ConnectionError, OSError)):
            c.call(18, 3, client_software_name="raw", client_software_version="1")
    with RawConnection(b.bootstrap) as c:  # new connections are fine
        assert int(c.call(18, 3, client_software_name="raw", client_software_version="1").error_code) == 0
