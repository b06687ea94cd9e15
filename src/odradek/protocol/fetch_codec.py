"""Fetch response encoding that leaves record bytes where they are.

kio would need the record bytes in memory; a broker answering Fetch wants to send
them from the segment file with sendfile. `encode_fetch_response` writes every
field itself (versions 4-18) and returns the body as a list of chunks: `bytes`
for the fields and, for each partition's records, the caller's region objects
(anything with a `length`) untouched, in the order they are to be sent.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.headers import write_uvarint as uvarint

MIN_VERSION = 4
MAX_VERSION = 18

_i16 = struct.Struct(">h").pack
_i32 = struct.Struct(">i").pack
_i64 = struct.Struct(">q").pack
_part_fixed = struct.Struct(">ihqq").pack  # partition, error, high watermark, last stable offset


@dataclass(slots=True)
class PartitionResult:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: Sequence[tuple[int, int]] | None = None  # (producer id, first offset)
    preferred_read_replica: int = -1
    records: list[Any] = field(default_factory=list)  # bytes or region objects with .length
    # v12+ tagged: the current leader when answering NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch)

    @property
    def records_size(self) -> int:
        return sum(len(r) if isinstance(r, (bytes, bytearray, memoryview)) else r.length for r in self.records)


@dataclass(slots=True)
class TopicResult:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionResult]


def encode_fetch_response(
    version: int,
    topics: Sequence[TopicResult],
    *,
    throttle_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[tuple[int, str, int, str | None]] = (),
) -> tuple[list[Any], int]:
    """Body chunks and their total size."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encodable here")
    flexible = version >= 12
    chunks: list[Any] = []
    buf = bytearray(_i32(throttle_ms))
    if version >= 7:
        buf += _i16(error_code) + _i32(session_id)
    buf += uvarint(len(topics) + 1) if flexible else _i32(len(topics))
    size = 0
    for topic in topics:
        if version >= 13:
            buf += topic.topic_id.bytes
        else:
            name = topic.name.encode()
            buf += (uvarint(len(name) + 1) if flexible else _i16(len(name))) + name
        parts = topic.partitions
        buf += uvarint(len(parts) + 1) if flexible else _i32(len(parts))
        for p in parts:
            buf += _part_fixed(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                buf += _i64(p.log_start_offset)
            aborted = p.aborted
            if aborted is None:
                buf += b"\x00" if flexible else _i32(-1)
            else:
                buf += uvarint(len(aborted) + 1) if flexible else _i32(len(aborted))
                for producer_id, first_offset in aborted:
                    buf += _i64(producer_id) + _i64(first_offset)
                    if flexible:
                        buf += b"\x00"
            if version >= 11:
                buf += _i32(p.preferred_read_replica)
            rsize = p.records_size
            if flexible:
                buf += uvarint(rsize + 1)
            else:
                buf += _i32(rsize)
            if rsize:
                chunks.append(bytes(buf))
                size += len(buf)
                chunks.extend(p.records)
                size += rsize
                buf = bytearray()
            if flexible:
                if p.current_leader is not None:
                    leader_id, leader_epoch = p.current_leader
                    tag = _i32(leader_id) + _i32(leader_epoch) + b"\x00"
                    buf += b"\x01" + uvarint(1) + uvarint(len(tag)) + tag
                else:
                    buf += b"\x00"
        if flexible:
            buf += b"\x00"
    if flexible:
        if version >= 16 and node_endpoints:
            ne = bytearray(uvarint(len(node_endpoints) + 1))
            for node_id, host, port, rack in node_endpoints:
                h = host.encode()
                ne += _i32(node_id) + uvarint(len(h) + 1) + h + _i32(port)
                if rack is None:
                    ne += b"\x00"
                else:
                    r = rack.encode()
                    ne += uvarint(len(r) + 1) + r
                ne += b"\x00"
            buf += b"\x01" + uvarint(0) + uvarint(len(ne)) + ne
        else:
            buf += b"\x00"
    chunks.append(bytes(buf))
    size += len(buf)
    return chunks, size
