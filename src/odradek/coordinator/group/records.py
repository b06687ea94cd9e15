"""The record format of `__consumer_offsets`, exactly as Kafka writes it.

Keys and values are Kafka's own schemas (group-coordinator's OffsetCommitKey.json,
OffsetCommitValue.json, GroupMetadataKey.json, GroupMetadataValue.json), each prefixed
by an int16 version, so `kafka-console-consumer --formatter
org.apache.kafka.tools.consumer.OffsetsMessageFormatter` reads what we write.

- key version 0 or 1: offset commit key (group, topic, partition); we write 1.
- key version 2: group metadata key (group).
- OffsetCommitValue: we write v3 (offset, leaderEpoch, metadata, commitTimestamp), or
  v1 (offset, metadata, commitTimestamp, expireTimestamp) when an explicit expire
  timestamp is set (OffsetCommit v2-v4 with a retention time); we read v0-v4.
- GroupMetadataValue: we write v3; we read v0-v4.
- A null value is a tombstone: the offset or the group was deleted.

Pure functions over bytes; no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from odradek.coordinator.codec import Reader, RecordFormatError, java_string_hashcode, partition_for

__all__ = [
    "OFFSETS_TOPIC",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupRecord",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "decode_key",
    "decode_value",
    "encode_group_value",
    "encode_key",
    "encode_offset_value",
    "java_string_hashcode",
    "partition_for",
    "serialize_record",
    "subscribed_topics",
]

OFFSETS_TOPIC = "__consumer_offsets"

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


# --------------------------------------------------------------------------- domain values


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1  # only in v1
    # Where the record is in __consumer_offsets (-1: not known). Not part of the value's bytes
    # and not compared: Kafka's OffsetAndMetadata.recordOffset, which orders a transactional
    # commit against plain commits of the same partition when its transaction commits.
    record_offset: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- writer


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i16(self, v: int) -> None:
        self.buf += _H.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _Q.pack(v)

    def string(self, v: str | None) -> None:
        if v is None:
            self.i16(-1)
            return
        b = v.encode("utf-8")
        self.i16(len(b))
        self.buf += b

    def bytes_(self, v: bytes | None) -> None:
        if v is None:
            self.i32(-1)
            return
        self.i32(len(v))
        self.buf += v


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    w = _Writer()
    if isinstance(key, OffsetCommitKey):
        w.i16(1)
        w.string(key.group)
        w.string(key.topic)
        w.i32(key.partition)
    else:
        w.i16(2)
        w.string(key.group)
    return bytes(w.buf)


def encode_offset_value(v: OffsetCommitValue) -> bytes:
    w = _Writer()
    if v.expire_timestamp >= 0:
        w.i16(1)
        w.i64(v.offset)
        w.string(v.metadata)
        w.i64(v.commit_timestamp)
        w.i64(v.expire_timestamp)
    else:
        w.i16(3)
        w.i64(v.offset)
        w.i32(v.leader_epoch)
        w.string(v.metadata)
        w.i64(v.commit_timestamp)
    return bytes(w.buf)


def encode_group_value(v: GroupMetadataValue) -> bytes:
    w = _Writer()
    w.i16(3)
    w.string(v.protocol_type)
    w.i32(v.generation)
    w.string(v.protocol)
    w.string(v.leader)
    w.i64(v.current_state_timestamp)
    w.i32(len(v.members))
    for m in v.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.buf)


# A record the group coordinator appends: a key and its value (None: a tombstone).
GroupRecord = tuple[OffsetCommitKey | GroupMetadataKey, OffsetCommitValue | GroupMetadataValue | None]


def serialize_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes of a record."""
    key, value = record
    if value is None:
        return encode_key(key), None
    if isinstance(value, GroupMetadataValue):
        return encode_key(key), encode_group_value(value)
    return encode_key(key), encode_offset_value(value)


# --------------------------------------------------------------------------- reader


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey:
    r = Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupMetadataKey(r.string() or "")
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> OffsetCommitValue:
    r = Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.tagged_fields()
    return OffsetCommitValue(offset, metadata, commit_ts, leader_epoch, expire_ts)


def decode_group_value(data: bytes) -> GroupMetadataValue:
    r = Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.array_len(), 0)):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        session = None
        rebalance = r.i32() if version >= 1 else None
        session = r.i32()
        if rebalance is None:
            rebalance = session
        subscription = r.bytes_() or b""
        assignment = r.bytes_() or b""
        r.tagged_fields()
        members.append(
            MemberMetadata(member_id, instance_id, client_id, client_host, rebalance, session, subscription, assignment)
        )
    r.tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def decode_value(
    key: OffsetCommitKey | GroupMetadataKey, data: bytes | None
) -> OffsetCommitValue | GroupMetadataValue | None:
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return decode_offset_value(data)
    return decode_group_value(data)


# --------------------------------------------------------------------------- consumer protocol


def subscribed_topics(subscription: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (protocol type "consumer"), or None if unreadable."""
    try:
        r = Reader(subscription)
        version = r.i16()
        if version < 0:
            return None
        n = r.i32()
        out = set()
        for _ in range(max(n, 0)):
            t = r.string()
            if t is not None:
                out.add(t)
        return out
    except RecordFormatError:
        return None
