"""Framing, request headers and the fetch response codec, byte for byte."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol import messages
from odradek.protocol.fetch_codec import PartitionResult, TopicResult, encode_fetch_response
from odradek.protocol.framing import FrameDecoder, FrameTooLarge, InvalidFrame, encode_frame
from odradek.protocol.headers import encode_request_header, parse_request_header


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=1, max_value=50))
def test_frames_survive_any_split(payloads, step):
    stream = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder(1000)
    got = []
    for i in range(0, len(stream), step):
        got.extend(dec.feed(stream[i : i + step]))
    assert got == payloads
    assert dec.buffered == 0


def test_oversized_frame_is_rejected_before_buffering():
    dec = FrameDecoder(100)
    with pytest.raises(FrameTooLarge):
        list(dec.feed((101).to_bytes(4, "big") + b"x"))


def test_negative_frame_size():
    with pytest.raises(InvalidFrame):
        list(FrameDecoder(100).feed(b"\xff\xff\xff\xfe"))


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
