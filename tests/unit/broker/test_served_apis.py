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


#: api key -> (advertised min, decodable min, max): what the broker serves, written out by hand so
#: that a change of it is deliberate (docs/compatibility.md says why each range is what it is;
#: tests/reference/test_diff_admin.py compares the ranges with Apache Kafka 4.4's ApiVersions)
EXPECTED = {
    0: (0, 3, 13), 1: (4, 4, 18), 2: (1, 1, 10), 3: (0, 0, 13), 7: (1, 1, 3), 8: (2, 2, 9),
    9: (1, 1, 9), 10: (0, 0, 6), 11: (0, 0, 9), 12: (0, 0, 4), 13: (0, 0, 5), 14: (0, 0, 5),
    15: (0, 0, 5), 16: (0, 0, 5), 18: (0, 0, 4), 19: (2, 2, 7), 20: (1, 1, 6), 21: (0, 0, 2),
    22: (0, 0, 5), 23: (2, 2, 4), 24: (0, 0, 5), 25: (0, 0, 4), 26: (0, 0, 5), 27: (1, 1, 2),
    28: (0, 0, 4), 29: (1, 1, 3), 30: (1, 1, 3), 31: (1, 1, 3), 32: (1, 1, 4), 33: (0, 0, 2),
    35: (1, 1, 4), 37: (0, 0, 3), 42: (0, 0, 2), 43: (0, 0, 2), 44: (0, 0, 1), 45: (0, 0, 1),
    46: (0, 0, 0), 47: (0, 0, 0), 56: (2, 2, 3), 60: (0, 0, 2), 61: (0, 0, 0), 65: (0, 0, 0),
    66: (0, 0, 2),
    17: (0, 0, 1), 36: (0, 0, 2), 50: (0, 0, 0), 51: (0, 0, 0),  # SASL and SCRAM users (Kafka 4.4's ranges)
    48: (0, 0, 1), 49: (0, 0, 1),  # client quotas (Kafka 4.4's ranges)
}  # fmt: skip


def test_the_served_ranges_are_the_expected_ones():
    table = served_apis()
    assert {key: (a.advertised_min, a.min_version, a.max_version) for key, a in table.items()} == EXPECTED
    # versions with a hand-written codec (kio's schema says the others'): legacy Produce v0-2, and
    # ControlledShutdown (Kafka 3's, absent from kio), flexible from v3 (KIP-482)
    assert {key: (sorted(a.decoders), sorted(a.flexible)) for key, a in table.items() if a.decoders} == {
        0: ([0, 1, 2], []),
        7: ([1, 2, 3], [3]),
    }


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
