"""protocol/varint.py: the one varint codec, checked against kio's writers (an independent
implementation of the same Kafka encodings)."""

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial.writers import write_signed_varlong, write_unsigned_varint

from odradek.protocol.varint import VarintError, read_uvarint, read_varint, write_uvarint, write_varint


def _kio(writer, value) -> bytes:
    buf = io.BytesIO()
    writer(buf, value)
    return buf.getvalue()


@given(st.integers(0, 2**32 - 1))
def test_unsigned_matches_kio_and_round_trips(n):
    raw = write_uvarint(n)
    assert raw == _kio(write_unsigned_varint, n)
    assert read_uvarint(b"\xff" + raw + b"\x00", 1) == (n, 1 + len(raw))


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_matches_kio_and_round_trips(v):
    out = bytearray()
    write_varint(out, v)
    assert bytes(out) == _kio(write_signed_varlong, v)
    assert read_varint(memoryview(bytes(out) + b"\x01"), 0) == (v, len(out))


@pytest.mark.parametrize(
    "n, raw",
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**28, b"\x80\x80\x80\x80\x01"),
    ],
)
def test_unsigned_known_bytes(n, raw):
    assert write_uvarint(n) == raw
    assert read_uvarint(raw, 0) == (n, len(raw))


def test_unsigned_truncated_or_too_long():
    with pytest.raises(VarintError, match="truncated"):
        read_uvarint(b"\x80\x80", 0)
    with pytest.raises(VarintError, match="truncated"):
        read_uvarint(b"\x80\x01", 0, end=1)  # the second byte is past `end`
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(VarintError):
        read_uvarint(b"", 0)


def test_zigzag_known_bytes_and_malformed():
    for v, raw in [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01")]:
        out = bytearray()
        write_varint(out, v)
        assert bytes(out) == raw and read_varint(raw, 0) == (v, len(raw))
    with pytest.raises(VarintError):
        read_varint(b"\x80" * 11, 0)
    with pytest.raises(IndexError):
        read_varint(b"\x80\x80", 0)
