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

from odradek.protocol.varint import VarintError, read_uvarint

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
        try:
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
                if pos > len(frame):
                    raise InvalidHeader("truncated tagged field")
        except VarintError as e:
            raise InvalidHeader(str(e)) from None
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
