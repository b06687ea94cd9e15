"""The sans-IO server connection, the h11 way: bytes in, events out, responses to bytes.

A client is joined to it in memory: requests encoded as a client encodes them, responses
split into frames by the same FrameReader the client uses, then decoded with kio.
"""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import strategies as st
from hypothesis.errors import NonInteractiveExampleWarning

from odradek.protocol import messages
from odradek.protocol.connection import (
    NEED_DATA,
    ImmediateResponse,
    ProtocolError,
    RequestReceived,
    SaslTokenReceived,
    ServedApi,
    ServerConnection,
)
from odradek.protocol.framing import FrameReader, FrameTooLarge, InvalidFrame, encode_frame
from odradek.protocol.headers import encode_request_header

APIS = {
    0: ServedApi(0, 3, 11),  # Produce, as the broker serves it: advertised from v0, kio from v3
    3: ServedApi(0, 0, 12),  # Metadata
    17: ServedApi(0, 0, 1),  # SaslHandshake
    18: ServedApi(0, 0, 4),  # ApiVersions
    36: ServedApi(0, 0, 2),  # SaslAuthenticate
}


def request(api_key: int, version: int, corr: int, client_id: str | None = "test", /, **fields) -> bytes:
    """A whole request frame, size prefix included; `fields` this version lacks are left out."""
    cls = messages.request_class(api_key, version)
    entity = cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})
    head = encode_request_header(api_key, version, corr, client_id, messages.is_flexible(api_key, version))
    return encode_frame(head + messages.encode(entity))


def some_response(api_key: int, version: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        return st.from_type(messages.response_class(api_key, version)).example()


def api_versions(corr: int, version: int = 3) -> bytes:
    return request(18, version, corr, client_software_name="t", client_software_version="1")


def metadata(corr: int, version: int = 12) -> bytes:
    return request(
        3,
        version,
        corr,
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def events(conn: ServerConnection) -> list:
    out = []
    while (e := conn.next_event()) is not NEED_DATA:
        out.append(e)
    return out


def response_frames(data: bytes) -> list[bytes]:
    reader = FrameReader(1 << 20, min_frame_size=4)
    reader.feed(data)
    return [bytes(f) for f in reader]


# --------------------------------------------------------------------------- receiving
def test_a_request_becomes_one_event():
    conn = ServerConnection(APIS, 1 << 20)
    assert conn.next_event() is NEED_DATA
    conn.receive_data(api_versions(41))
    event = conn.next_event()
    assert isinstance(event, RequestReceived)
    assert (event.api_key, event.api_version, event.correlation_id, event.client_id) == (18, 3, 41, "test")
    assert event.flexible and event.header_size == 8 + 2 + 4 + 1  # key..corr, client id, tagged fields
    assert event.request.client_software_name == "t"
    assert conn.next_event() is NEED_DATA


@pytest.mark.parametrize("cut", range(1, len(api_versions(7))))
def test_a_request_split_at_every_byte(cut):
    data = api_versions(7)
    conn = ServerConnection(APIS, 1 << 20)
    conn.receive_data(data[:cut])
    assert conn.next_event() is NEED_DATA
    assert conn.frames_waiting == 0
    conn.receive_data(data[cut:])
    assert conn.frames_waiting == 1
    (event,) = events(conn)
    assert (event.api_key, event.correlation_id) == (18, 7)


def test_pipelined_requests_byte_by_byte_and_all_at_once():
    data = b"".join([api_versions(1), metadata(2), api_versions(3, 0), metadata(4, 1)])
    for pieces in ([data], [data[i : i + 1] for i in range(len(data))]):
        conn = ServerConnection(APIS, 1 << 20)
        got = []
        for piece in pieces:
            conn.receive_data(piece)
            got += events(conn)
        got = [(e.api_key, e.api_version, e.correlation_id) for e in got]
        assert got == [(18, 3, 1), (3, 12, 2), (18, 0, 3), (3, 1, 4)]


def test_receiving_into_the_lent_buffer():
    """get_buffer/buffer_updated: the transport receives straight into the connection's memory."""
    data = api_versions(5) + metadata(6)
    conn = ServerConnection(APIS, 1 << 20, scratch_size=64)  # the Metadata request takes the own-buffer path
    pos = 0
    while pos < len(data):
        buf = conn.get_buffer()
        n = min(len(buf), 17, len(data) - pos)
        buf[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        pos += n
    assert [e.correlation_id for e in events(conn)] == [5, 6]


def test_discard_waiting_drops_what_was_not_taken():
    conn = ServerConnection(APIS, 1 << 20)
    conn.receive_data(api_versions(1) * 3)
    assert conn.frames_waiting == 3
    conn.next_event()
    conn.discard_waiting()
    assert conn.frames_waiting == 0 and conn.next_event() is NEED_DATA


# --------------------------------------------------------------------------- hanging up
@pytest.mark.parametrize(
    "data, error, match",
    [
        ((1001).to_bytes(4, "big"), FrameTooLarge, "frame of 1001 bytes exceeds the limit of 1000 bytes"),
        ((2**31 - 1).to_bytes(4, "big"), FrameTooLarge, "exceeds the limit"),
        (b"\xff\xff\xff\xff", InvalidFrame, "negative frame size -1"),
        (b"\x80\x00\x00\x00", InvalidFrame, "negative frame size -2147483648"),
    ],
)
def test_bad_frame_sizes_are_refused_as_soon_as_seen(data, error, match):
    conn = ServerConnection(APIS, 1000)
    with pytest.raises(error, match=match):
        conn.receive_data(api_versions(1) + data)
    assert issubclass(error, ProtocolError)
    with pytest.raises(error):  # the connection is unusable from here on
        conn.next_event()


def test_a_bad_size_in_the_lent_buffer_drops_the_connection_with_what_came_before():
    conn = ServerConnection(APIS, 1000)
    data = api_versions(1) + (5000).to_bytes(4, "big")
    conn.get_buffer()[: len(data)] = data
    with pytest.raises(FrameTooLarge):
        conn.buffer_updated(len(data))
    with pytest.raises(FrameTooLarge):
        conn.next_event()
    with pytest.raises(FrameTooLarge):
        conn.receive_data(api_versions(2))


@pytest.mark.parametrize(
    "frame, match",
    [
        (b"\x00\x12\x00", "malformed request header: frame shorter than a request header"),
        (encode_request_header(999, 0, 1, "x", False), "unknown API key 999"),
        (encode_request_header(3, 13, 1, "x", True), "unsupported version 13 of metadata"),
        (encode_request_header(3, 12, 1, "x", True)[:-3], "malformed metadata v12 header: truncated client id"),
        (encode_request_header(3, 12, 1, "x", True) + b"\x02", "malformed metadata v12 request"),
        (encode_request_header(3, 0, 1, "x", False) + b"\x7f\xff\xff\xff", "malformed metadata v0 request"),
    ],
)
def test_what_can_only_be_answered_by_hanging_up(frame, match):
    conn = ServerConnection(APIS, 1 << 20)
    conn.receive_data(encode_frame(frame) + api_versions(2))
    with pytest.raises(ProtocolError, match=match):
        conn.next_event()
    with pytest.raises(ProtocolError, match=match):  # sticky: the next request is not read
        conn.next_event()


# --------------------------------------------------------------------------- ApiVersions fallback (KIP-511)
@pytest.mark.parametrize("version", [5, 100, 32767])
def test_api_versions_above_ours_is_answered_here_in_the_v0_layout(version):
    conn = ServerConnection(APIS, 1 << 20)
    # a client from the future: its header and body are not ours to read, only the first 8 bytes
    conn.receive_data(encode_frame(struct.pack(">hhi", 18, version, 77) + b"\x00\x09future!!\x00\xff\xfe"))
    event = conn.next_event()
    assert isinstance(event, ImmediateResponse)
    assert (event.api_key, event.api_version, event.correlation_id) == (18, version, 77)
    # size 16 | correlation id (header v0) | error 35 | one entry: ApiVersions, v0 to v4
    assert event.data == bytes.fromhex("000000100000004d002300000001001200000004")


def test_the_fallback_carries_the_served_range():
    conn = ServerConnection({18: ServedApi(1, 2, 3)}, 1 << 20)
    conn.receive_data(encode_frame(struct.pack(">hhi", 18, 4, 1)))
    r = messages.decode_response(18, 0, conn.next_event().data, 8)
    assert [(k.api_key, k.min_version, k.max_version) for k in r.api_keys] == [(18, 1, 3)]


# --------------------------------------------------------------------------- legacy decoder
def test_versions_below_kio_go_to_the_served_decoder():
    calls = []

    def decoder(version, frame, header_size):
        calls.append((version, bytes(frame[header_size:])))
        return "legacy request"

    apis = {0: ServedApi(0, 3, 11, {v: decoder for v in range(3)})}
    conn = ServerConnection(apis, 1 << 20)
    # v0-v2 use request header v1 (not flexible)
    conn.receive_data(encode_frame(encode_request_header(0, 2, 9, "old", False) + b"BODY"))
    event = conn.next_event()
    assert (event.api_version, event.client_id, event.flexible, event.request) == (2, "old", False, "legacy request")
    assert calls == [(2, b"BODY")]


def test_a_hand_written_decoder_for_a_kio_version_reads_after_its_flexible_header():
    seen = []
    apis = {3: ServedApi(0, 0, 12, {12: lambda v, frame, at: seen.append(bytes(frame[at:])) or "mine"})}
    conn = ServerConnection(apis, 1 << 20)
    conn.receive_data(metadata(4) + metadata(5, version=11))
    mine, kio = events(conn)
    assert (mine.request, mine.flexible) == ("mine", True)
    assert seen == [metadata(4)[4 + mine.header_size :]]
    assert type(kio.request) is messages.request_class(3, 11)


def test_a_failing_legacy_decoder_hangs_up():
    def decoder(version, frame, header_size):
        raise IndexError("short")

    conn = ServerConnection({0: ServedApi(0, 3, 11, {1: decoder})}, 1 << 20)
    conn.receive_data(encode_frame(encode_request_header(0, 1, 9, "old", False)))
    with pytest.raises(ProtocolError, match="malformed produce v1 request: IndexError: short"):
        conn.next_event()


# --------------------------------------------------------------------------- the authentication gate
def test_before_authentication_only_api_versions_and_sasl_are_dispatched():
    conn = ServerConnection(APIS, 1 << 20, authenticated=False)
    conn.receive_data(api_versions(1) + request(17, 1, 2, mechanism="PLAIN") + metadata(3))
    assert [e.api_key for e in (conn.next_event(), conn.next_event())] == [18, 17]
    with pytest.raises(ProtocolError, match="metadata before authentication"):
        conn.next_event()


def test_sasl_authenticate_then_everything():
    conn = ServerConnection(APIS, 1 << 20, authenticated=False)
    conn.receive_data(request(36, 2, 1, auth_bytes=b"\x00u\x00p") + metadata(2))
    assert conn.next_event().api_key == 36
    conn.mark_authenticated()
    assert conn.next_event().api_key == 3


def test_before_authentication_api_versions_above_ours_is_answered_and_unknown_keys_refused():
    conn = ServerConnection(APIS, 1 << 20, authenticated=False)
    conn.receive_data(encode_frame(struct.pack(">hhi", 18, 9, 1)))
    assert isinstance(conn.next_event(), ImmediateResponse)
    conn.receive_data(encode_frame(encode_request_header(999, 0, 2, "x", False)))
    with pytest.raises(ProtocolError, match="unknown API key 999"):
        conn.next_event()


def test_after_a_v0_handshake_frames_are_bare_tokens_until_authenticated():
    conn = ServerConnection(APIS, 1 << 20, authenticated=False)
    conn.receive_data(request(17, 0, 1, mechanism="PLAIN"))
    assert conn.next_event().api_key == 17
    conn.raw_sasl_tokens = True  # the broker, once it answered the v0 handshake
    conn.receive_data(encode_frame(b"\x00u\x00p") + metadata(3))
    assert conn.next_event() == SaslTokenReceived(b"\x00u\x00p")
    assert conn.send_token(b"") == b"\0\0\0\0"
    conn.mark_authenticated()
    assert not conn.raw_sasl_tokens
    assert conn.next_event().api_key == 3


def test_before_authentication_frames_are_limited_to_the_sasl_receive_size():
    conn = ServerConnection(APIS, 1 << 20, authenticated=False, pre_auth_max_frame_size=100)
    with pytest.raises(FrameTooLarge):
        conn.receive_data(encode_frame(b"x" * 101))
    conn = ServerConnection(APIS, 1 << 20, authenticated=False, pre_auth_max_frame_size=100)
    conn.mark_authenticated()  # the listener's own limit from then on
    conn.receive_data(encode_frame(b"x" * 101))
    assert conn.frames_waiting == 1


# --------------------------------------------------------------------------- sending
def test_responses_framed_with_the_right_header_version():
    conn = ServerConnection(APIS, 1 << 20)
    conn.receive_data(api_versions(1) + metadata(2) + metadata(3, version=1))
    av, md12, md1 = events(conn)
    resps = [some_response(e.api_key, e.api_version) for e in (av, md12, md1)]
    out = b"".join(conn.send(e, r) for e, r in zip((av, md12, md1), resps))
    f_av, f_md12, f_md1 = response_frames(out)
    # ApiVersions: header v0 even for a flexible request; Metadata v12: header v1 (a tagged-field byte)
    assert f_av[:4] == (1).to_bytes(4, "big") and messages.decode_response(18, 3, f_av, 4) == resps[0]
    assert f_md12[:5] == (2).to_bytes(4, "big") + b"\x00"
    assert messages.decode_response(3, 12, f_md12, 5) == resps[1]
    assert f_md1[:4] == (3).to_bytes(4, "big") and messages.decode_response(3, 1, f_md1, 4) == resps[2]


def test_a_pre_encoded_body_keeps_its_chunks():
    conn = ServerConnection(APIS, 1 << 20)
    conn.receive_data(metadata(5))
    (event,) = events(conn)

    class Region:  # a file region, as the transport gets it: left for it to send
        fd, position, length = 3, 100, 6

    region = Region()
    chunks = conn.send_chunks(event, [b"abc", region, b"de"], 11)
    assert chunks[0] == struct.pack(">i", 5 + 11) + struct.pack(">i", 5) + b"\x00"
    assert chunks[1:] == [b"abc", region, b"de"]
