"""`decode_replica_fetch_request` (the leader's reader of a follower's Fetch, for its fast path)
held to kio: whatever frame it reads, kio reads from the same bytes (odradek's request header
reader and kio's body reader, as the generic path does) with the same fields; frames of any
other shape it leaves to the generic path (None), and no mutation of a valid frame makes it
read something kio does not."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import messages
from odradek.protocol.fetch_codec import decode_replica_fetch_request, encode_replica_fetch_request
from odradek.protocol.headers import read_header_rest

VERSIONS = [12, 13, 14, 15, 16]
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
part = st.tuples(i32, i32, i64, i32, i64, i32)
topic = st.tuples(
    st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) < 127),
    st.uuids(),
    st.lists(part, max_size=4),
)


def frame_of(version: int, correlation_id: int, client_id: str | None, body: bytes) -> bytes:
    if client_id is None:
        cid = struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        cid = struct.pack(">h", len(raw)) + raw
    return struct.pack(">hhi", 1, version, correlation_id) + cid + b"\x00" + body


def kio_fields(frame: bytes) -> tuple:
    """What the generic path reads from `frame`, as the fast reader returns it."""
    _key, version, correlation_id = struct.unpack_from(">hhi", frame)
    client_id, header_size = read_header_rest(frame, True)
    req = messages.decode_request(1, version, frame, header_size)
    if version >= 15:
        state = req.replica_state
        replica_id, replica_epoch = state.replica_id, state.replica_epoch
    else:
        replica_id, replica_epoch = req.replica_id, -1
    topics = [
        (
            t.topic_id.bytes if version >= 13 else t.topic,
            [
                (
                    p.partition,
                    p.current_leader_epoch,
                    p.fetch_offset,
                    p.last_fetched_epoch,
                    p.log_start_offset,
                    p.partition_max_bytes,
                )
                for p in t.partitions
            ],
        )
        for t in req.topics
    ]
    wait_ms = round(req.max_wait.total_seconds() * 1000)
    assert not req.forgotten_topics_data
    return (
        version,
        correlation_id,
        client_id,
        replica_id,
        replica_epoch,
        wait_ms,
        req.min_bytes,
        req.max_bytes,
        req.isolation_level,
        req.session_id,
        req.session_epoch,
        topics,
    )


def follower_frame(version, topics, cid, corr, head) -> bytes:  # noqa: ANN001
    body = encode_replica_fetch_request(version, topics=topics, **head)
    return frame_of(version, corr, cid, body)


heads = st.fixed_dictionaries(
    {
        "replica_id": i32,
        "replica_epoch": i64,
        "max_wait_ms": i32,
        "min_bytes": i32,
        "max_bytes": i32,
        "session_id": i32,
        "session_epoch": i32,
    }
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    topics=st.lists(topic, max_size=3),
    cid=st.none() | st.text(max_size=30),
    corr=i32,
    head=heads,
)
def test_reads_what_kio_reads(version, topics, cid, corr, head) -> None:  # noqa: ANN001
    frame = follower_frame(version, topics, cid, corr, head)
    fast = decode_replica_fetch_request(frame)
    assert fast is not None
    got = tuple(fast)
    if version < 15:
        assert got[3] == head["replica_id"] and got[4] == -1
    assert got == kio_fields(frame)


@settings(max_examples=800, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    topics=st.lists(topic, max_size=2),
    head=heads,
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
    cut=st.integers(-8, 4),
)
def test_mutated_frames_read_as_kio_reads_them_or_not_at_all(version, topics, head, edits, cut) -> None:  # noqa: ANN001
    frame = bytearray(follower_frame(version, topics, "f", 9, head))
    for at, value in edits:
        frame[at % len(frame)] = value
    if cut < 0:
        del frame[cut:]
    else:
        frame += b"\x00" * cut
    frame = bytes(frame)
    fast = decode_replica_fetch_request(frame)
    if fast is None:
        return
    assert tuple(fast) == kio_fields(frame)


@pytest.mark.parametrize(
    "why",
    ["forgotten", "tagged partition", "cluster id tag", "v11", "v17", "produce", "big count"],
)
def test_other_shapes_are_left_to_the_generic_path(why: str) -> None:
    head = dict(
        replica_id=2, replica_epoch=5, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, session_id=3, session_epoch=4
    )
    t = [("t", uuid.UUID(int=5), [(0, 1, 2, 1, 0, 100)])]
    version = 15
    if why == "forgotten":
        body = encode_replica_fetch_request(15, topics=t, forgotten=[("t", uuid.UUID(int=5), [1])], **head)
    elif why == "big count":
        body = encode_replica_fetch_request(15, topics=[("t", uuid.UUID(int=5), [(0, 1, 2, 1, 0, 100)] * 130)], **head)
    else:
        body = encode_replica_fetch_request(15, topics=t, **head)
    frame = frame_of(version, 1, "c", body)
    assert decode_replica_fetch_request(frame) is not None or why in ("forgotten", "big count")
    if why == "tagged partition":  # the partition's tag count, 33 bytes into the topic
        at = len(frame_of(15, 1, "c", b"")) + 4 * 3 + 1 + 8 + 1 + 16 + 1 + 32
        assert frame[at] == 0
        frame = frame[:at] + b"\x01\x00\x00" + frame[at + 1 :]
    elif why == "cluster id tag":
        body12 = encode_replica_fetch_request(12, topics=[("t", None, [(0, 1, 2, 1, 0, 100)])], **head)
        frame = frame_of(12, 1, "c", body12[:-1] + b"\x01\x00\x02\x02x")
        assert messages.decode_request(1, 12, frame, len(frame_of(12, 1, "c", b""))).cluster_id == "x"
    elif why == "v11":
        frame = frame[:2] + struct.pack(">h", 11) + frame[4:]
    elif why == "v17":
        frame = frame[:2] + struct.pack(">h", 17) + frame[4:]
    elif why == "produce":
        frame = struct.pack(">h", 0) + frame[2:]
    assert decode_replica_fetch_request(frame) is None
