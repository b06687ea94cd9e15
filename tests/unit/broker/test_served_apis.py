"""The broker's served-API table, as the protocol connection gets it from the handler registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.connection import served_apis
from odradek.broker.registry import load_handlers
from odradek.protocol import messages
from odradek.protocol.connection import ImmediateResponse, RequestReceived, ServerConnection
from odradek.protocol.framing import encode_frame
from odradek.protocol.headers import encode_request_header
from odradek.protocol.legacy import controlled_shutdown

FIXTURES = Path(__file__).resolve().parents[1] / "protocol" / "fixtures"
FILES = sorted(FIXTURES.glob("*/*.bin"))


def test_the_table_is_the_registry():
    table = served_apis()
    assert table.keys() == load_handlers().keys()
    for key, h in load_handlers().items():
        decoders = {v: c.decode for v, c in h.codecs.items() if c.decode is not None}
        flexible = {v for v, c in h.codecs.items() if c.decode is not None and c.flexible}
        assert table[key] == (h.advertised_min, h.min_version, h.max_version, decoders, flexible)
        for v in range(h.advertised_min, h.max_version + 1):
            assert table[key].decoders.get(v) is h.request_decoder(v)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_request_the_real_clients_sent_is_served(path: Path):
    frame = path.read_bytes()
    conn = ServerConnection(served_apis(), len(frame))
    conn.receive_data(encode_frame(frame))
    assert isinstance(conn.next_event(), RequestReceived)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_legacy_produce_goes_to_its_codec(version):
    body = bytes.fromhex("00010000138800000000")  # acks 1, timeout 5000 ms, no topics
    conn = ServerConnection(served_apis(), 1 << 20)
    conn.receive_data(encode_frame(encode_request_header(0, version, 3, "old", False) + body))
    event = conn.next_event()
    assert (event.api_version, event.flexible, event.request.acks, event.request.topic_data) == (version, False, 1, ())


def test_api_versions_fallback_advertises_the_served_range():
    h = load_handlers()[18]
    conn = ServerConnection(served_apis(), 1 << 20)
    conn.receive_data(encode_frame(encode_request_header(18, h.max_version + 1, 3, "x", True)))
    event = conn.next_event()
    assert isinstance(event, ImmediateResponse)
    r = messages.decode_response(18, 0, event.data, 8)
    assert [(k.api_key, k.min_version, k.max_version) for k in r.api_keys] == [(18, h.advertised_min, h.max_version)]


@pytest.mark.parametrize(("version", "flexible"), [(1, False), (2, False), (3, True)])
def test_controlled_shutdown_headers_follow_kafka_3(version, flexible):
    """kio (Kafka 4) has no ControlledShutdown schema to say which versions are flexible: the
    hand-written codec does (v3, KIP-482), for the request header and the response header."""
    request = controlled_shutdown.ControlledShutdownRequest(7, 12)
    body = controlled_shutdown.encode_request(version, request)
    conn = ServerConnection(served_apis(), 1 << 20)
    conn.receive_data(encode_frame(encode_request_header(7, version, 5, "broker-7", flexible) + body))
    event = conn.next_event()
    assert (event.flexible, event.client_id, event.request.broker_id) == (flexible, "broker-7", 7)
    response = controlled_shutdown.ControlledShutdownResponse(0, (("t", 1),))
    encoded = controlled_shutdown.encode_response(version, response)
    frame = conn.send_chunks(event, [encoded], len(encoded))[0]
    header = 4 + (1 if flexible else 0)  # correlation id, then (v1) the tagged fields
    decoded = controlled_shutdown.decode_response(version, frame[4:], header)
    assert (decoded.error_code, tuple(decoded.remaining_partitions)) == (0, (("t", 1),))
