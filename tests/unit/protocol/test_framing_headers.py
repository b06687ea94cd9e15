"""Framing, request headers and the fetch response codec, byte for byte."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol import messages
from odradek.protocol.fetch_codec import PartitionResult, TopicResult, encode_fetch_response
from odradek.protocol.framing import FrameReader, FrameTooLarge, InvalidFrame, encode_frame
from odradek.protocol.headers import encode_request_header, parse_request_header


def _split_feed(reader: FrameReader, stream: bytes, step: int) -> list[bytes]:
    got = []
    for i in range(0, len(stream), step):
        reader.feed(stream[i : i + step])
        got.extend(bytes(f) for f in reader)
    return got


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=1, max_value=50))
def test_frames_survive_any_split(payloads, step):
    stream = b"".join(encode_frame(p) for p in payloads)
    # a scratch buffer of 64 bytes: frames over 60 bytes take the own-buffer path
    for reader in (FrameReader(1000), FrameReader(1000, scratch_size=64)):
        assert _split_feed(reader, stream, step) == payloads
        assert reader.buffered == 0


def test_small_frames_are_bytes_large_ones_read_only_views_of_their_own_buffer():
    reader = FrameReader(1000, scratch_size=64)
    reader.feed(encode_frame(b"s" * 60) + encode_frame(b"L" * 61))
    small, large = reader.frames
    assert type(small) is bytes and small == b"s" * 60
    assert type(large) is memoryview and large.readonly and bytes(large) == b"L" * 61
    assert type(large.obj) is bytearray and len(large.obj) == 61


def test_a_large_frame_is_received_straight_into_its_buffer():
    reader = FrameReader(1000, scratch_size=64)
    payload = bytes(range(200))
    reader.feed(encode_frame(payload)[:10])  # the size and 6 bytes: they move to the frame's own buffer
    buf = reader.get_buffer()
    assert len(buf) == 194  # the rest of the frame, and no more
    buf[:194] = payload[6:]
    reader.buffer_updated(194)
    (frame,) = reader
    assert bytes(frame) == payload


def test_a_large_buffer_is_reused_only_once_nothing_refers_to_it():
    reader = FrameReader(10_000, scratch_size=64)
    big = [bytes([65 + i]) * 1000 for i in range(4)]
    reader.feed(encode_frame(big[0]))
    (a,) = reader
    reader.feed(encode_frame(big[1]))
    (b,) = reader
    assert b.obj is not a.obj  # `a` is still held: its buffer is not reused
    held = a[10:20]  # a slice (what a decoded Fetch response keeps) holds the buffer too
    a.release()
    reader.feed(encode_frame(big[2]))
    (c,) = reader
    assert c.obj is not held.obj and bytes(held) == big[0][10:20]
    first = held.obj
    del held
    b.release()
    reader.feed(encode_frame(big[3]))
    (d,) = reader
    assert d.obj is first  # kept and reused once nothing referred to it
    assert bytes(d) == big[3] and bytes(c) == big[2]


def test_oversized_frame_is_rejected_before_buffering():
    reader = FrameReader(100)
    with pytest.raises(FrameTooLarge, match="frame of 101 bytes exceeds the limit of 100 bytes"):
        reader.feed((101).to_bytes(4, "big") + b"x")


def test_negative_frame_size():
    with pytest.raises(InvalidFrame, match="negative frame size -2"):
        FrameReader(100).feed(b"\xff\xff\xff\xfe")


def test_frames_before_a_bad_size_are_kept_and_the_error_sticks():
    reader = FrameReader(100, min_frame_size=4)
    with pytest.raises(InvalidFrame, match="frame size 3 below 4") as e:
        reader.feed(encode_frame(b"good") + encode_frame(b"bad"))
    assert e.value.size == 3
    assert list(reader) == [b"good"]
    with pytest.raises(InvalidFrame):
        reader.feed(encode_frame(b"more"))


@given(
    st.integers(0, 80),
    st.integers(0, 20),
    st.integers(-(2**31), 2**31 - 1),
    st.one_of(st.none(), st.text(max_size=40)),
    st.booleans(),
)
def test_request_header_round_trip(key, version, corr, client_id, flexible):
    raw = encode_request_header(key, version, corr, client_id, flexible) + b"BODY"
    h = parse_request_header(raw, flexible)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (key, version, corr, client_id)
    assert raw[h.size :] == b"BODY"


@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_response_codec_matches_kio(version):
    tid = uuid.uuid4()

    class Region:  # what storage hands the codec: an object with a length
        def __init__(self, data):
            self.data, self.length = data, len(data)

    regions = [Region(b"batch-one"), Region(b"batch-two")]
    parts = [
        PartitionResult(0, 0, 100, 100, 3, None, -1, regions, (1, 7) if version >= 12 else None),
        PartitionResult(1, 1, -1, -1, -1),
    ]
    chunks, size = encode_fetch_response(
        version, [TopicResult("topic-a", tid, parts)], session_id=42, node_endpoints=[(1, "h", 9092, None)]
    )
    body = b"".join(c if isinstance(c, bytes) else c.data for c in chunks)
    assert len(body) == size
    r = messages.decode_response(1, version, body)
    topic = r.responses[0]
    assert (topic.topic_id if version >= 13 else topic.topic) == (tid if version >= 13 else "topic-a")
    p0, p1 = topic.partitions
    assert p0.records == b"batch-onebatch-two"
    assert (p0.high_watermark, p0.last_stable_offset) == (100, 100)
    if version >= 5:
        assert p0.log_start_offset == 3
    if version >= 7:
        assert r.session_id == 42
    if version >= 12:
        assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (1, 7)
    assert int(p1.error_code) == 1
    # The record regions are passed through untouched, not copied into bytes.
    assert [c for c in chunks if not isinstance(c, bytes)] == regions


@pytest.mark.parametrize("version", [4, 11, 12, 13, 15, 18])
def test_fetch_response_records_in_memory_go_into_the_body(version):
    """Records given as one bytes object (a recent append the log still holds) make the same
    response as the same bytes given as a region, in one chunk instead of three."""
    tid = uuid.uuid4()

    class Region:
        def __init__(self, data):
            self.data, self.length = data, len(data)

    def encode(records):
        parts = [PartitionResult(0, 0, 100, 100, 3, None, -1, records), PartitionResult(1, 0, 7, 7, 0)]
        return encode_fetch_response(version, [TopicResult("topic-a", tid, parts)], session_id=42)

    by_region, size = encode([Region(b"batch-one")])
    in_memory, size2 = encode([b"batch-one"])
    assert len(by_region) == 3 and len(in_memory) == 1 and size == size2
    assert in_memory[0] == b"".join(c if isinstance(c, bytes) else c.data for c in by_region)
    assert messages.decode_response(1, version, in_memory[0]).responses[0].partitions[0].records == b"batch-one"
