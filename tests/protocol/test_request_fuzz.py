"""The request decoder never fails with anything but 'close this connection'.

Frames are random bytes, and real requests (encoded by kio for every API and
version we serve) with bytes flipped, cut or extended.
"""

import random
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NonInteractiveExampleWarning
from kio.static.primitive import Records

from odradek.broker.connection import CloseConnection, parse_frame
from odradek.broker.registry import load_handlers
from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header

REGISTRY = load_handlers()
st.register_type_strategy(Records, st.binary(max_size=64))


def _sample_request(api_key: int, version: int) -> bytes | None:
    """A minimal valid request body: every field at its default or empty."""
    cls = messages.request_class(api_key, version)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        example = st.from_type(cls).example()
    return messages.encode(example)


def _frames() -> list[bytes]:
    out = []
    for h in REGISTRY.values():
        for v in h.kio_versions:
            body = _sample_request(h.api_key, v)
            if body is None:
                continue
            head = encode_request_header(h.api_key, v, 7, "fuzz", messages.is_flexible(h.api_key, v))
            out.append(head + body)
    return out


FRAMES = _frames()


def _parse(frame: bytes) -> None:
    try:
        parse_frame(frame)
    except CloseConnection:
        pass


def test_samples_exist_and_parse():
    assert len(FRAMES) > 50
    for f in FRAMES:
        parsed = parse_frame(f)
        assert not isinstance(parsed, bytes)


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


@pytest.mark.parametrize("version", [5, 100, 32767])
def test_api_versions_above_ours_gets_v0_error_with_our_range(version):
    frame = encode_request_header(18, version, 99, "x", False)
    out = parse_frame(frame)
    assert isinstance(out, bytes)
    assert out[:4] == (99).to_bytes(4, "big")  # header v0: correlation id only
    r = messages.decode_response(18, 0, out, 4)
    assert int(r.error_code) == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in r.api_keys] == [(18, 0, 4)]


def test_unknown_api_key_closes():
    with pytest.raises(CloseConnection):
        parse_frame(encode_request_header(999, 0, 1, "x", False))


VERSIONS = [(h.api_key, v) for h in REGISTRY.values() for v in h.kio_versions]


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
    with pytest.raises(CloseConnection):
        parse_frame(frame)
