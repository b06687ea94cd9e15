"""The server connection never fails with anything but 'close this connection' (ProtocolError).

Frames are random bytes, and real requests (encoded by kio for every API and version
kio knows, a superset of what the broker serves) with bytes flipped, cut or extended,
each received by a fresh `ServerConnection` serving everything kio knows.
"""

import datetime
import random

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records, i64Timedelta

from odradek.protocol import messages
from odradek.protocol.connection import ImmediateResponse, ProtocolError, RequestReceived, ServedApi, ServerConnection
from odradek.protocol.framing import encode_frame
from odradek.protocol.headers import encode_request_header

# Everything kio has a schema for, served from its lowest version.
APIS = {k: ServedApi(r[0], r[0], r[1]) for k in messages.API_NAMES if (r := messages.schema_versions(k))}
st.register_type_strategy(Records, st.binary(max_size=64))
# kio's own strategy goes up to timedelta's maximum, which kio's native reader overflows on
# (CreateDelegationToken's max_lifetime): keep to 2^40 ms, 35 years.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**40), 2**40).map(lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))),
)


def parse_frame(frame: bytes):
    """One frame through a fresh connection: its first event."""
    conn = ServerConnection(APIS, 1 << 20)
    conn.receive_data(encode_frame(frame))
    return conn.next_event()


def _sample_request(api_key: int, version: int) -> bytes | None:
    """A valid request body drawn at random. Not with `.example()`, which draws ten and returns
    one: for the 302 request classes that was 40 s of CPU at every collection of the unit tier
    (most of its wall time). Hypothesis's first draw is the simplest (every field empty), so two
    are drawn and the second, a random one, kept."""
    cls = messages.request_class(api_key, version)
    drawn = []

    @settings(
        database=None,
        max_examples=2,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(st.from_type(cls))
    def draw(request) -> None:
        drawn.append(request)

    draw()
    return messages.encode(drawn[-1])


def _frames() -> list[bytes]:
    out = []
    for key, api in APIS.items():
        for v in range(api.min_version, api.max_version + 1):
            body = _sample_request(key, v)
            if body is None:
                continue
            head = encode_request_header(key, v, 7, "fuzz", messages.is_flexible(key, v))
            out.append(head + body)
    return out


FRAMES = _frames()


def _parse(frame: bytes) -> None:
    try:
        parse_frame(frame)
    except ProtocolError:
        pass


def test_samples_exist_and_parse():
    assert len(FRAMES) > 250
    for f in FRAMES:
        event = parse_frame(f)
        assert isinstance(event, RequestReceived)
        assert f[event.header_size :] == messages.encode(event.request)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes(data):
    _parse(data)


@settings(
    max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "1500")),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.integers(0, 10**6), st.integers(0, 3), st.binary(min_size=1, max_size=8))
def test_mutated_real_requests(seed, mode, junk):
    rnd = random.Random(seed)
    frame = bytearray(rnd.choice(FRAMES))
    if mode == 0:  # flip bytes
        for _ in range(rnd.randint(1, 4)):
            frame[rnd.randrange(len(frame))] = rnd.randrange(256)
    elif mode == 1:  # truncate
        del frame[rnd.randrange(len(frame)) :]
    elif mode == 2:  # absurd array / string lengths
        pos = rnd.randrange(8, max(9, len(frame)))
        frame[pos:pos] = b"\x7f\xff\xff\xff"
    else:
        frame += junk
    _parse(bytes(frame))


@pytest.mark.parametrize("version", [APIS[18].max_version + 1, 100, 32767])
def test_api_versions_above_ours_gets_v0_error_with_our_range(version):
    frame = encode_request_header(18, version, 99, "x", False)
    event = parse_frame(frame)
    assert isinstance(event, ImmediateResponse)
    out = event.data
    assert int.from_bytes(out[:4], "big") == len(out) - 4
    assert out[4:8] == (99).to_bytes(4, "big")  # header v0: correlation id only
    r = messages.decode_response(18, 0, out, 8)
    assert int(r.error_code) == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in r.api_keys] == [(18, 0, APIS[18].max_version)]


def test_unknown_api_key_closes():
    with pytest.raises(ProtocolError, match="unknown API key 999"):
        parse_frame(encode_request_header(999, 0, 1, "x", False))


VERSIONS = [(key, v) for key, api in APIS.items() for v in range(api.min_version, api.max_version + 1)]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_request_and_response_round_trip(data):
    key, version = data.draw(st.sampled_from(VERSIONS))
    for cls, decode in (
        (messages.request_class(key, version), messages.decode_request),
        (messages.response_class(key, version), messages.decode_response),
    ):
        entity = data.draw(st.from_type(cls))
        assert decode(key, version, messages.encode(entity)) == entity


@pytest.mark.parametrize("body", ["ffffffff0f", "ffffffff1f", "8080808010"])
def test_absurd_compact_array_length_is_refused_not_fatal(body):
    """kio preallocates arrays by their declared length: 2^32 entries aborted the
    process before protocol/guard.py checked lengths against the frame."""
    frame = encode_request_header(3, 12, 1, "x", True) + bytes.fromhex(body)
    with pytest.raises(ProtocolError, match="malformed metadata v12 request"):
        parse_frame(frame)
