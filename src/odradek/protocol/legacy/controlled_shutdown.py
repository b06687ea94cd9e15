"""ControlledShutdown (key 7), v1-v3: a broker asks the controller to move its leadership away.

Kafka 4 removed the API with ZooKeeper mode, so kio (generated from Kafka 4) has no schema
for it; this is Kafka 3.x's layout (ControlledShutdownRequest.json / Response.json):
request v1: broker_id int32; v2+: broker_epoch int64; v3 flexible (compact arrays and
strings, tagged fields, request header v2). Response: error_code int16,
remaining_partitions [topic_name string, partition_index int32] (the partitions the broker
still leads because no other in-sync replica can take them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.varint import read_uvarint, write_uvarint

API_KEY = 7
MIN_VERSION, MAX_VERSION = 1, 3

_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ControlledShutdownResponse:
    error_code: int
    remaining_partitions: tuple[tuple[str, int], ...] = ()


def _skip_tags(buf: bytes | memoryview, pos: int) -> int:
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def encode_request(version: int, req: ControlledShutdownRequest) -> bytes:
    out = _i32.pack(req.broker_id)
    if version >= 2:
        out += _i64.pack(req.broker_epoch)
    if version >= 3:
        out += b"\x00"
    return out


def decode_request(version: int, frame: bytes | memoryview, offset: int) -> ControlledShutdownRequest:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"ControlledShutdown v{version} is not served")
    broker_id = _i32.unpack_from(frame, offset)[0]
    epoch = _i64.unpack_from(frame, offset + 4)[0] if version >= 2 else -1
    return ControlledShutdownRequest(broker_id, epoch)


def encode_response(version: int, resp: ControlledShutdownResponse) -> bytes:
    flexible = version >= 3
    out = bytearray(_i16.pack(resp.error_code))
    parts = resp.remaining_partitions
    out += write_uvarint(len(parts) + 1) if flexible else _i32.pack(len(parts))
    for topic, partition in parts:
        name = topic.encode()
        out += (write_uvarint(len(name) + 1) if flexible else _i16.pack(len(name))) + name
        out += _i32.pack(partition)
        if flexible:
            out += b"\x00"
    if flexible:
        out += b"\x00"
    return bytes(out)


def decode_response(version: int, body: bytes | memoryview, pos: int = 0) -> ControlledShutdownResponse:
    flexible = version >= 3
    code = _i16.unpack_from(body, pos)[0]
    pos += 2
    if flexible:
        n, pos = read_uvarint(body, pos)
        n -= 1
    else:
        n = _i32.unpack_from(body, pos)[0]
        pos += 4
    parts = []
    for _ in range(max(n, 0)):
        if flexible:
            ln, pos = read_uvarint(body, pos)
            ln -= 1
        else:
            ln = _i16.unpack_from(body, pos)[0]
            pos += 2
        name = bytes(body[pos : pos + ln]).decode()
        pos += ln
        parts.append((name, _i32.unpack_from(body, pos)[0]))
        pos += 4
        if flexible:
            pos = _skip_tags(body, pos)
    return ControlledShutdownResponse(code, tuple(parts))
