"""Varints, the one implementation: unsigned (flexible versions' compact lengths, tag counts and
tags; KIP-482) and zig-zag signed (record fields inside a RecordBatch v2).

Unsigned varints are at most 5 bytes, as Kafka's ByteUtils.readUnsignedVarint reads them.
Signed ones are read as varlongs (up to 10 bytes): the record codec uses one reader for its
int32 and int64 fields. Malformed input raises `VarintError` (a ValueError); the zig-zag
reader, kept lean for the record codec's hot loop, raises IndexError at the end of its buffer.
"""

from __future__ import annotations

__all__ = ["SMALL_UVARINTS", "VarintError", "read_uvarint", "write_uvarint", "read_varint", "write_varint"]


class VarintError(ValueError):
    """A varint runs past the end of its buffer or past its maximum length."""


def read_uvarint(buf, pos: int, end: int | None = None) -> tuple[int, int]:
    """The unsigned varint at `pos` -> (value, position after it); reads no further than `end`
    (default: the end of `buf`)."""
    if end is None:
        end = len(buf)
    result = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise VarintError("unsigned varint longer than 5 bytes")
    raise VarintError("truncated varint")


# the varints of 0-127, one byte each: encoders on the hot path index this for a count or a
# length that is usually small instead of calling write_uvarint
SMALL_UVARINTS: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(0x80))


def write_uvarint(n: int) -> bytes:
    """The unsigned varint of `n` (>= 0)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(b, pos: int) -> tuple[int, int]:
    """The zig-zag signed varint (or varlong) at `pos` -> (value, position after it)."""
    x = b[pos]
    pos += 1
    if x < 0x80:
        return (x >> 1) ^ -(x & 1), pos
    result = x & 0x7F
    shift = 7
    while True:
        x = b[pos]
        pos += 1
        result |= (x & 0x7F) << shift
        if x < 0x80:
            break
        shift += 7
        if shift > 63:
            raise VarintError("varlong longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def write_varint(out: bytearray, v: int) -> None:
    """Append the zig-zag signed varint of `v` to `out`."""
    v = (v << 1) ^ (v >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
