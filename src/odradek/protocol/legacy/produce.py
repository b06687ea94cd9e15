"""Produce v0-v2 (Kafka 0.8-0.10): requests read as v3, responses in their own layout.

A v0-v2 request is a v3 request without the transactional id, so it is read by prefixing a
null one. The response (ProduceResponse v0-v2): per topic the name, per partition index,
error code and base offset, v2 adds the log append time; v1+ end with the throttle time.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from odradek.protocol import messages
from odradek.protocol.produce_codec import TopicProduceResult

MAX_VERSION = 2
_i16 = struct.Struct(">h").pack
_i32 = struct.Struct(">i").pack
_part = struct.Struct(">ihq").pack
_i64 = struct.Struct(">q").pack


def decode_request(version: int, frame: bytes | memoryview, offset: int) -> Any:
    body = b"\xff\xff" + bytes(frame[offset:])
    return messages.decode_request(0, 3, body)


def encode_response(version: int, topics: Sequence[TopicProduceResult], throttle_ms: int = 0) -> bytes:
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not a legacy version")
    out = bytearray(_i32(len(topics)))
    for t in topics:
        name = (t.name or "").encode()
        out += _i16(len(name)) + name + _i32(len(t.partitions))
        for p in t.partitions:
            out += _part(p.partition_index, p.error_code, p.base_offset)
            if version >= 2:
                out += _i64(p.log_append_time)
    if version >= 1:
        out += _i32(throttle_ms)
    return bytes(out)
