"""Metadata response encoding without kio entities, by topic, so a topic's bytes can be kept.

A Metadata answer for a topic of 1,000 partitions was 1,000 frozen kio entities, each field
converted and written by the generic writer: 11.5 ms of broker CPU and a 15 ms round trip per
request, where Kafka 3.9/4 take 1.1-1.3 ms of CPU and 0.5-1.2 ms (docs/benchmarks.md, "Against
Apache Kafka"). Here each topic is encoded on its own (`encode_topic`) and the response
(`encode_metadata_response`) joins the encoded topics, so the broker can keep a topic's bytes
until its metadata changes (broker/handlers/k03_metadata.py). Versions 0-13;
tests/unit/protocol/test_metadata_codec.py compares the bytes with kio's for every version.

Layout (Kafka's MetadataResponse.json): throttle time (v3+); brokers: node id, host, port,
rack (v1+); cluster id (v2+); controller id (v1+); topics: error code, name (nullable v12+),
topic id (v10+), is internal (v1+), partitions (error code, partition index, leader, leader epoch (v7+),
replicas, ISR, offline replicas (v5+)), authorized operations (v8+); cluster authorized
operations (v8-10); error code (v13+). v9+ are flexible (compact lengths, tagged fields, none
written).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from odradek.protocol.constants import ZERO_UUID
from odradek.protocol.varint import write_uvarint

MIN_VERSION = 0
MAX_VERSION = 13
FLEXIBLE_FROM = 9

_i16 = struct.Struct(">h").pack
_i32 = struct.Struct(">i").pack
_part = struct.Struct(">hii").pack  # error code, partition index, leader
_part7 = struct.Struct(">hiii").pack  # ... leader epoch (v7+)


class MetadataBroker(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataPartition(NamedTuple):
    error_code: int
    partition_index: int
    leader: int
    leader_epoch: int
    replicas: Sequence[int]
    isr: Sequence[int]
    offline_replicas: Sequence[int] = ()


class MetadataTopic(NamedTuple):
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: Sequence[MetadataPartition]
    authorized_operations: int


def _string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = s.encode()
    return (write_uvarint(len(raw) + 1) if flexible else _i16(len(raw))) + raw


def _count(n: int, flexible: bool) -> bytes:
    return write_uvarint(n + 1) if flexible else _i32(n)


def _int32s(values: Sequence[int], flexible: bool) -> bytes:
    n = len(values)
    return _count(n, flexible) + struct.pack(f">{n}i", *values)


def _check(version: int) -> None:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Metadata v{version} is not encodable here")


def encode_topic(version: int, t: MetadataTopic) -> bytes:
    """One element of the response's topics array."""
    _check(version)
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(_i16(t.error_code))
    name = t.name if t.name is not None or version >= 12 else ""
    out += _string(name, flexible)
    if version >= 10:
        out += (t.topic_id or ZERO_UUID).bytes
    if version >= 1:
        out += b"\x01" if t.is_internal else b"\x00"
    parts = t.partitions
    out += _count(len(parts), flexible)
    tail = b"\x00" if flexible else b""
    for p in parts:
        if version >= 7:
            out += _part7(p.error_code, p.partition_index, p.leader, p.leader_epoch)
        else:
            out += _part(p.error_code, p.partition_index, p.leader)
        out += _int32s(p.replicas, flexible)
        out += _int32s(p.isr, flexible)
        if version >= 5:
            out += _int32s(p.offline_replicas, flexible)
        out += tail
    if version >= 8:
        out += _i32(t.authorized_operations)
    out += tail
    return bytes(out)


def encode_metadata_response(
    version: int,
    brokers: Sequence[MetadataBroker],
    cluster_id: str | None,
    controller_id: int,
    topics: Sequence[bytes],
    cluster_authorized_operations: int = -(2**31),
    throttle_ms: int = 0,
    error_code: int = 0,
) -> bytes:
    """The response body (after the response header); `topics` encoded by `encode_topic`
    for the same version."""
    _check(version)
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(_i32(throttle_ms) if version >= 3 else b"")
    out += _count(len(brokers), flexible)
    for b in brokers:
        out += _i32(b.node_id) + _string(b.host, flexible) + _i32(b.port)
        if version >= 1:
            out += _string(b.rack, flexible)
        if flexible:
            out += b"\x00"
    if version >= 2:
        out += _string(cluster_id, flexible)
    if version >= 1:
        out += _i32(controller_id)
    out += _count(len(topics), flexible)
    out += b"".join(topics)
    if 8 <= version <= 10:
        out += _i32(cluster_authorized_operations)
    if version >= 13:
        out += _i16(error_code)
    if flexible:
        out += b"\x00"
    return bytes(out)
