"""Fetch response coding that leaves record bytes where they are.

kio would need the record bytes in memory; a broker answering Fetch wants to send
them from the segment file with sendfile. `encode_fetch_response` writes every
field itself (versions 4-18) and returns the body as a list of chunks: `bytes`
for the fields and, for each partition's records, the caller's region objects
(anything with a `length`) untouched, in the order they are to be sent; a partition's records
given as one `bytes` object (a recent append the log holds in memory) go into the body itself.

The other way, kio would copy each partition's records out of the response; a
consumer decodes them once more anyway. `decode_fetch_response` (versions 4-16)
hands them out as memoryviews of the response; from v13 a topic is named by its id
(`FetchedTopic.topic_id`, its name empty), as a replica fetcher reads them.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from odradek.protocol.varint import SMALL_UVARINTS as _UV
from odradek.protocol.varint import VarintError
from odradek.protocol.varint import read_uvarint as _uvarint
from odradek.protocol.varint import write_uvarint as uvarint

MIN_VERSION = 4
MAX_VERSION = 18

_i16 = struct.Struct(">h").pack
_i32 = struct.Struct(">i").pack
_i64 = struct.Struct(">q").pack
_part_fixed = struct.Struct(">ihqq").pack  # partition, error, high watermark, last stable offset
_aborted = struct.Struct(">qq").pack  # producer id, first offset
_aborted_flexible = struct.Struct(">qqx").pack  # the same and an empty tagged-field section


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
    # v12+ tagged (KIP-320): where a follower's log diverges from the leader's, answered
    # instead of records when its last fetched epoch ends before its fetch offset here
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)

    def take(self, read: Any) -> None:
        """Take a partition read's answer (broker/partition.py's `ReadResult`): its error, offsets,
        diverging epoch and aborted transactions; the records stay the caller's (its budget)."""
        self.error_code = read.error_code
        self.high_watermark = read.high_watermark
        self.last_stable_offset = read.last_stable_offset
        self.log_start_offset = read.log_start_offset
        self.diverging_epoch = read.diverging_epoch
        self.aborted = read.aborted_transactions

    @property
    def records_size(self) -> int:
        records = self.records
        if not records:
            return 0
        return sum(len(r) if isinstance(r, (bytes, bytearray, memoryview)) else r.length for r in records)


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
    n = len(topics) + 1
    buf += (_UV[n] if n < 0x80 else uvarint(n)) if flexible else _i32(n - 1)
    size = 0
    for topic in topics:
        if version >= 13:
            buf += topic.topic_id.bytes
        else:
            name = topic.name.encode()
            buf += (uvarint(len(name) + 1) if flexible else _i16(len(name))) + name
        parts = topic.partitions
        n = len(parts) + 1
        buf += (_UV[n] if n < 0x80 else uvarint(n)) if flexible else _i32(n - 1)
        for p in parts:
            buf += _part_fixed(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                buf += _i64(p.log_start_offset)
            aborted = p.aborted
            if aborted is None:
                buf += b"\x00" if flexible else _i32(-1)
            elif not aborted:
                buf += b"\x01" if flexible else b"\x00\x00\x00\x00"
            else:
                buf += uvarint(len(aborted) + 1) if flexible else _i32(len(aborted))
                pack = _aborted_flexible if flexible else _aborted
                buf += b"".join([pack(producer_id, first_offset) for producer_id, first_offset in aborted])
            if version >= 11:
                buf += _i32(p.preferred_read_replica)
            records = p.records
            if not records:
                rsize = 0
            elif len(records) == 1 and type(records[0]) is bytes:  # (records_size, without its calls)
                rsize = len(records[0])
            else:
                rsize = p.records_size
            if flexible:
                buf += _UV[rsize + 1] if rsize < 0x7F else uvarint(rsize + 1)
            else:
                buf += _i32(rsize)
            if rsize and len(records) == 1 and type(records[0]) is bytes:
                buf += records[0]  # bytes in memory (a recent append): the body stays one piece
            elif rsize:
                chunks.append(bytes(buf))
                size += len(buf)
                chunks.extend(records)
                size += rsize
                buf = bytearray()
            if flexible:
                tags = []
                if p.diverging_epoch is not None:  # tag 0: EpochEndOffset
                    epoch, end_offset = p.diverging_epoch
                    tags.append(uvarint(0) + uvarint(13) + _i32(epoch) + _i64(end_offset) + b"\x00")
                if p.current_leader is not None:  # tag 1: LeaderIdAndEpoch
                    leader_id, leader_epoch = p.current_leader
                    tags.append(uvarint(1) + uvarint(9) + _i32(leader_id) + _i32(leader_epoch) + b"\x00")
                buf += _UV[len(tags)] + b"".join(tags) if tags else b"\x00"
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


_one_head = struct.Struct(">ihiB").pack  # throttle, error, session id, one topic
_one_part = struct.Struct(">BihqqqBi").pack  # one partition: index, error, HW, LSO, log start, no aborted, -1
_ONE_TAIL = b"\x00\x00\x00"  # the partition's, the topic's and the response's tagged fields: none


def encode_one_partition_response(
    version: int,
    session_id: int,
    topic: bytes | str,
    partition: int,
    high_watermark: int,
    last_stable_offset: int,
    log_start_offset: int,
    records: bytes | None,
) -> bytes:
    """The body `encode_fetch_response` writes (flexible versions, v12+) for one partition of one
    topic without error, aborted transactions, tagged fields or throttle, its records one bytes
    object or none: a follower's usual answer, in two struct packs (the same bytes: held to it by
    tests/unit/protocol/test_fetch_encode.py). `topic`: v13+ the topic id's 16 bytes, else its name."""
    if version >= 13:
        name = topic
    else:
        raw = topic.encode()  # type: ignore[union-attr]
        name = (_UV[len(raw) + 1] if len(raw) < 0x7F else uvarint(len(raw) + 1)) + raw
    part = _one_part(2, partition, 0, high_watermark, last_stable_offset, log_start_offset, 0, -1)
    if not records:
        return _one_head(0, 0, session_id, 2) + name + part + b"\x01" + _ONE_TAIL  # type: ignore[operator]
    n = len(records) + 1
    size = _UV[n] if n < 0x80 else uvarint(n)
    return b"".join((_one_head(0, 0, session_id, 2), name, part, size, records, _ONE_TAIL))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- a replica's request

REQUEST_MIN_VERSION, REQUEST_MAX_VERSION = 12, 16  # what a follower sends (v12 by name, v13+ by id)
_req_head_v12 = struct.Struct(">iiiibii").pack  # replica id, max wait, min bytes, max bytes, isolation, session
_req_head = struct.Struct(">iiibii").pack  # the same without the replica id (v15+: replica_state)
_req_part = struct.Struct(">iiqiqi").pack  # partition, leader epoch, offset, last epoch, log start, max bytes
_replica_state = struct.Struct(">BBiqB").pack  # tag 1, its size 13, replica id, broker epoch, no tags
_EMPTY_RACK_AND_TAGS = b"\x01"  # rack_id "" (compact string)

FetchRequestPartition = tuple[int, int, int, int, int, int]  # as `_req_part` packs them


def encode_replica_fetch_request(
    version: int,
    *,
    replica_id: int,
    replica_epoch: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    session_id: int,
    session_epoch: int,
    topics: Sequence[tuple[str, uuid.UUID | None, Sequence[FetchRequestPartition]]],
    forgotten: Sequence[tuple[str, uuid.UUID | None, Sequence[int]]] = (),
) -> bytes:
    """A follower's Fetch request body (v12-v16: flexible, read_uncommitted, no rack), what kio
    writes for the same fields byte for byte, without building its entities (a follower sends
    one per answer). `topics`: (name, topic id, partitions) with each partition as
    (partition, current leader epoch, fetch offset, last fetched epoch, log start offset,
    max bytes); v13+ name topics by id, older versions by name; v15+ carry the replica id and
    broker epoch in `replica_state` (tag 1), older ones the replica id in the body."""
    if not REQUEST_MIN_VERSION <= version <= REQUEST_MAX_VERSION:
        raise ValueError(f"a replica's Fetch v{version} is not encodable here")
    by_id = version >= 13
    if version >= 15:
        buf = bytearray(_req_head(max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch))
    else:
        buf = bytearray(_req_head_v12(replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch))

    def topic(name: str, topic_id: uuid.UUID | None, count: int) -> None:
        nonlocal buf
        if by_id:
            if topic_id is None:
                raise ValueError(f"Fetch v{version} names topics by id: {name} has none")
            buf += topic_id.bytes
        else:
            raw = name.encode()
            buf += uvarint(len(raw) + 1) + raw
        buf += uvarint(count + 1)

    buf += uvarint(len(topics) + 1)
    for name, topic_id, parts in topics:
        topic(name, topic_id, len(parts))
        for part in parts:
            buf += _req_part(*part)
            buf += b"\x00"  # the partition's tagged fields
        buf += b"\x00"
    buf += uvarint(len(forgotten) + 1)
    for name, topic_id, indexes in forgotten:
        topic(name, topic_id, len(indexes))
        for index in indexes:
            buf += _i32(index)
        buf += b"\x00"
    buf += _EMPTY_RACK_AND_TAGS
    if version >= 15:
        buf += b"\x01" + _replica_state(1, 13, replica_id, replica_epoch, 0)
    else:
        buf += b"\x00"
    return bytes(buf)


# --------------------------------------------------------------------------- decoding (client)
class FetchedPartition:
    """One partition of a decoded Fetch response; attribute names follow the schema's."""

    __slots__ = (
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "aborted_transactions",
        "preferred_read_replica",
        "records",
        "diverging_epoch",
    )

    def __init__(
        self,
        partition_index,
        error_code,
        high_watermark,
        last_stable_offset,
        log_start_offset,
        aborted_transactions,
        preferred_read_replica,
        records,
        diverging_epoch=None,
    ) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions  # [(producer id, first offset)] or None
        self.preferred_read_replica = preferred_read_replica
        self.records = records  # memoryview into the response frame, or None
        self.diverging_epoch = diverging_epoch  # (epoch, end offset) from tag 0 (v12+), or None


class FetchedTopic:
    __slots__ = ("topic", "partitions", "topic_id")

    def __init__(self, topic: str, partitions: list[FetchedPartition], topic_id: uuid.UUID | None = None) -> None:
        self.topic = topic  # "" from v13 (topics by id)
        self.partitions = partitions
        self.topic_id = topic_id  # v13+


class FetchedResponse:
    __slots__ = ("throttle_time_ms", "error_code", "session_id", "responses")

    def __init__(self, throttle_time_ms: int, error_code: int, session_id: int, responses: list[FetchedTopic]) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.session_id = session_id
        self.responses = responses


_u_i16 = struct.Struct(">h").unpack_from
_u_i32 = struct.Struct(">i").unpack_from
_u_i64 = struct.Struct(">q").unpack_from
_u_part = struct.Struct(">ihqq").unpack_from
_u_aborted = struct.Struct(">qq").unpack_from

DECODE_MAX_VERSION = 16  # v13+ name topics by id; v16 adds a tagged field (node endpoints), skipped


def decode_fetch_response(version: int, body: bytes | memoryview, pos: int = 0) -> FetchedResponse:
    """A Fetch response body (v4-v16, after the response header), its records left in place:
    each partition's `records` is a read-only memoryview of `body`, not a copy. The caller
    keeps `body` alive (and unchanged) for as long as it uses them. Malformed or truncated
    input raises ValueError."""
    if not MIN_VERSION <= version <= DECODE_MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not decodable here")
    mv = body if isinstance(body, memoryview) else memoryview(body)
    if not mv.readonly:
        mv = mv.toreadonly()
    try:
        return _decode_fetch(version, mv, pos)
    except (struct.error, IndexError, VarintError) as e:
        raise ValueError(f"truncated Fetch v{version} response: {e}") from None


def _decode_fetch(version: int, mv: memoryview, pos: int) -> FetchedResponse:
    n = len(mv)
    flexible = version >= 12

    def count(pos: int) -> tuple[int, int]:  # array length (-1: null)
        if flexible:
            c, pos = _uvarint(mv, pos)
            return c - 1, pos
        return _u_i32(mv, pos)[0], pos + 4

    def length(pos: int, fixed, width: int) -> tuple[int, int]:  # string/bytes length (-1: null)
        if flexible:
            ln, pos = _uvarint(mv, pos)
            return ln - 1, pos
        return fixed(mv, pos)[0], pos + width

    def skip_tags(pos: int) -> int:
        tags, pos = _uvarint(mv, pos)
        for _ in range(tags):
            _tag, pos = _uvarint(mv, pos)
            size, pos = _uvarint(mv, pos)
            pos += size
        if pos > n:
            raise ValueError("tagged field past the end of the Fetch response")
        return pos

    throttle = _u_i32(mv, pos)[0]
    pos += 4
    error_code = session_id = 0
    if version >= 7:
        error_code, session_id = _u_i16(mv, pos)[0], _u_i32(mv, pos + 2)[0]
        pos += 6
    ntopics, pos = count(pos)
    topics = []
    by_id = version >= 13
    for _ in range(max(ntopics, 0)):
        topic_id = None
        if by_id:
            if pos + 16 > n:
                raise ValueError("topic id past the end of the Fetch response")
            topic_id, name = uuid.UUID(bytes=bytes(mv[pos : pos + 16])), ""
            pos += 16
        else:
            ln, pos = length(pos, _u_i16, 2)
            if ln < 0 or pos + ln > n:
                raise ValueError("bad topic name length in Fetch response")
            name = str(mv[pos : pos + ln], "utf-8")
            pos += ln
        nparts, pos = count(pos)
        parts = []
        for _ in range(max(nparts, 0)):
            index, code, hw, lso = _u_part(mv, pos)
            pos += 22
            log_start = -1
            if version >= 5:
                log_start = _u_i64(mv, pos)[0]
                pos += 8
            nab, pos = count(pos)
            aborted = None
            if nab >= 0:
                aborted = []
                for _ in range(nab):
                    aborted.append(_u_aborted(mv, pos))
                    pos += 16
                    if flexible:
                        pos = skip_tags(pos)
            preferred = -1
            if version >= 11:
                preferred = _u_i32(mv, pos)[0]
                pos += 4
            rl, pos = length(pos, _u_i32, 4)
            records = None
            if rl >= 0:
                if pos + rl > n:
                    raise ValueError("records past the end of the Fetch response")
                records = mv[pos : pos + rl]
                pos += rl
            diverging = None
            if flexible:
                tags, pos = _uvarint(mv, pos)
                for _ in range(tags):
                    tag, pos = _uvarint(mv, pos)
                    size, pos = _uvarint(mv, pos)
                    if tag == 0 and size >= 12:
                        diverging = (_u_i32(mv, pos)[0], _u_i64(mv, pos + 4)[0])
                    pos += size
                if pos > n:
                    raise ValueError("tagged field past the end of the Fetch response")
            parts.append(FetchedPartition(index, code, hw, lso, log_start, aborted, preferred, records, diverging))
        if flexible:
            pos = skip_tags(pos)
        topics.append(FetchedTopic(name, parts, topic_id))
    if flexible:
        pos = skip_tags(pos)
    return FetchedResponse(throttle, error_code, session_id, topics)


# --------------------------------------------------------------------------- a replica's request, read
_req_frame_head = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_req_body_v12 = struct.Struct(">iiiibii")  # replica id, max wait, min bytes, max bytes, isolation, session, epoch
_req_body = struct.Struct(">iiibii")  # the same without the replica id (v15+)
_req_part_read = struct.Struct(">iiqiqiB")  # as `_req_part`, and the partition's tagged-field count
_req_state = struct.Struct(">BBBiqB")  # 1 tag, tag 1, size 13, replica id, broker epoch, no tags
_REQ_STATE_SIZE = _req_state.size


class ReplicaFetchRequest(NamedTuple):
    """A follower's Fetch request as `decode_replica_fetch_request` reads it (the fields kio's
    FetchRequest has for it; a v13+ topic is its id's 16 bytes, an older one its name)."""

    version: int
    correlation_id: int
    client_id: str | None
    replica_id: int
    replica_epoch: int  # -1 before v15
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    # (topic id bytes or name, [(partition, current leader epoch, fetch offset, last fetched
    # epoch, log start offset, partition max bytes)])
    topics: list[tuple[bytes | str, list[tuple[int, int, int, int, int, int]]]]


def decode_replica_fetch_request(frame: bytes) -> ReplicaFetchRequest | None:
    """The whole frame (request header v2 and body) of a replica's Fetch request of v12-v16 in
    the shape followers send (what `encode_replica_fetch_request` writes: no tagged field but
    v15's replica_state, no forgotten topic, every count and length under 128), read with one
    struct per part; None for any other frame: another API, version or shape, or a malformed
    one (the generic decoder then reads it, or refuses it). What it returns is what kio reads
    from the same bytes (tests/unit/protocol/test_replica_fetch_decode.py)."""
    end = len(frame)
    if end < 10:
        return None
    api_key, version, correlation_id, n = _req_frame_head.unpack_from(frame, 0)
    if api_key != 1 or not REQUEST_MIN_VERSION <= version <= REQUEST_MAX_VERSION:
        return None
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n + 1 > end:
            return None
        try:
            client_id = frame[pos : pos + n].decode()
        except UnicodeDecodeError:
            return None
        pos += n
    elif n != -1:
        return None
    if pos >= end or frame[pos]:  # the header's tagged fields: none
        return None
    pos += 1
    try:
        if version >= 15:
            replica_id = -1
            max_wait, min_bytes, max_bytes, isolation, session_id, epoch = _req_body.unpack_from(frame, pos)
            pos += _req_body.size
        else:
            replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, epoch = _req_body_v12.unpack_from(
                frame, pos
            )
            pos += _req_body_v12.size
        ntopics = frame[pos] - 1
        pos += 1
        if not 0 <= ntopics < 0x7F:
            return None
        topics: list[tuple[bytes | str, list[tuple[int, int, int, int, int, int]]]] = []
        by_id = version >= 13
        read_part = _req_part_read.unpack_from
        for _ in range(ntopics):
            if by_id:
                topic: bytes | str = frame[pos : pos + 16]
                pos += 16
            else:
                k = frame[pos] - 1
                if not 0 <= k < 0x7F:
                    return None
                topic = frame[pos + 1 : pos + 1 + k].decode()
                pos += 1 + k
            nparts = frame[pos] - 1
            pos += 1
            if not 0 <= nparts < 0x7F:
                return None
            parts = []
            for _ in range(nparts):
                partition, leader_epoch, offset, last_epoch, start, part_max, tags = read_part(frame, pos)
                if tags:
                    return None
                parts.append((partition, leader_epoch, offset, last_epoch, start, part_max))
                pos += 33
            if frame[pos]:  # the topic's tagged fields: none
                return None
            pos += 1
            topics.append((topic, parts))
        if frame[pos] != 1:  # no forgotten topic
            return None
        k = frame[pos + 1] - 1  # rack_id: a compact string, not null
        if not 0 <= k < 0x7F:
            return None
        frame[pos + 2 : pos + 2 + k].decode()
        pos += 2 + k
        if version >= 15:
            if end - pos != _REQ_STATE_SIZE:
                return None
            count, tag, size, replica_id, replica_epoch, state_tags = _req_state.unpack_from(frame, pos)
            if (count, tag, size, state_tags) != (1, 1, 13, 0):
                return None
        else:
            if end - pos != 1 or frame[pos]:
                return None
            replica_epoch = -1
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    return ReplicaFetchRequest(
        version,
        correlation_id,
        client_id,
        replica_id,
        replica_epoch,
        max_wait,
        min_bytes,
        max_bytes,
        isolation,
        session_id,
        epoch,
        topics,
    )
