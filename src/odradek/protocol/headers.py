"""Request and response headers.

Request header v1 (fixed layout) and v2 (adds tagged fields) share the first four
fields; the client id stays a classic nullable int16-length string in both.
Response header v0 is the correlation id; v1 adds an (empty) tagged-field section.
ApiVersions responses always use response header v0, whatever the request version
(so a client that does not yet know our versions can read them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_HEAD = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

API_VERSIONS_KEY = 18


class InvalidHeader(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes the header took in the frame; the body starts there


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: readable even when the rest is not."""
    if len(frame) < 8:
        raise InvalidHeader("frame shorter than a request header")
    return _HEAD.unpack_from(frame, 0)


def write_uvarint(n: int) -> bytes:
    """Unsigned varint (flexible versions' compact lengths and tag counts)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise InvalidHeader("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise InvalidHeader("varint too long")


def parse_request_header(frame: bytes, flexible: bool) -> RequestHeader:
    api_key, api_version, correlation_id = peek_header(frame)
    client_id, size = read_header_rest(frame, flexible)
    return RequestHeader(api_key, api_version, correlation_id, client_id, size)


def read_header_rest(frame: bytes | memoryview, flexible: bool) -> tuple[str | None, int]:
    """What follows the first 8 bytes (see `peek_header`): (client id, header size)."""
    pos = 8
    if len(frame) < pos + 2:
        raise InvalidHeader("truncated client id")
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    if n < 0:
        client_id = None
    else:
        if pos + n > len(frame):
            raise InvalidHeader("truncated client id")
        try:
            client_id = bytes(frame[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidHeader("client id is not UTF-8") from e
        pos += n
    if flexible:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise InvalidHeader("truncated tagged field")
    return client_id, pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v1 when `flexible`, else v0."""
    head = _I32.pack(correlation_id)
    return head + b"\x00" if flexible else head


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    out = _HEAD.pack(api_key, api_version, correlation_id)
    if client_id is None:
        out += _I16.pack(-1)
    else:
        raw = client_id.encode()
        out += _I16.pack(len(raw)) + raw
    return out + b"\x00" if flexible else out
