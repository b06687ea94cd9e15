"""Produce response encoding without kio entities (the per-request hot path).

Building a kio response means one frozen dataclass per partition and topic, each field
converted (error code enum, `datetime` for the append time) and then written by a generic
writer: ~20 µs for a one-partition response, a third of what the broker spends on a
single-record Produce. `encode_produce_response` writes the same bytes directly
(versions 3-13; tests/unit/protocol/test_produce_codec.py compares it with kio for every version).

Layout (Kafka's ProduceResponse.json): per topic the name (v13: topic id), per partition
index, error code, base offset, log append time, log start offset (v5+), record errors (batch
index and message of each rejected record) and error message (v8+); throttle time last. v9+
are flexible (compact lengths, tagged fields); the v10+ tagged fields (current leader, node
endpoints) are left out, which is what they are when not answering NOT_LEADER_OR_FOLLOWER.

For the leader's fast path (broker/fast_produce.py): `decode_single_produce_request` reads a
request of the common shape (one partition, no transactional id) with a few struct calls, and
`encode_single_produce_response` writes its successful answer in a few packs; both are held to
kio by tests/unit/protocol/test_produce_fast_codec.py.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from odradek.protocol.constants import ZERO_UUID
from odradek.protocol.headers import InvalidHeader, read_header_rest
from odradek.protocol.varint import SMALL_UVARINTS, VarintError, read_uvarint, write_uvarint

MIN_VERSION = 3
MAX_VERSION = 13

_i16 = struct.Struct(">h").pack
_i32 = struct.Struct(">i").pack
_part = struct.Struct(">ihqq").pack  # index, error code, base offset, log append time
_part5 = struct.Struct(">ihqqq").pack  # ... log start offset (v5+)
_req_head = struct.Struct(">hhi")  # api key, version, correlation id
_acks_timeout = struct.Struct(">hi")
_u16 = struct.Struct(">h").unpack_from
_u32 = struct.Struct(">i").unpack_from
_req_part = struct.Struct(">ii")  # partition index, records length (v3-v8)
_ONE = b"\x00\x00\x00\x01"
_NO_RECORD_ERRORS = b"\x00\x00\x00\x00\xff\xff"  # v8: no record error, a null message
# v9+: no record error, a null message, the partition's and the topic's empty tags
_FLEX_TAIL = b"\x01\x00\x00\x00"
_NO_THROTTLE = b"\x00\x00\x00\x00"


class PartitionProduceResult(NamedTuple):
    partition_index: int  # Kafka's PartitionProduceResponse.Index (`index` would shadow tuple.index)
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[tuple[int, str | None]] = ()  # (batch index, message) of each rejected record (v8+)


class TopicProduceResult(NamedTuple):
    name: str | None
    topic_id: uuid.UUID | None
    partitions: Sequence[PartitionProduceResult]


def _string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = s.encode()
    return (write_uvarint(len(raw) + 1) if flexible else _i16(len(raw))) + raw


def encode_produce_response(version: int, topics: Sequence[TopicProduceResult], throttle_ms: int = 0) -> bytes:
    """The response body (after the response header)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} is not encodable here")
    flexible = version >= 9
    out = bytearray(write_uvarint(len(topics) + 1) if flexible else _i32(len(topics)))
    for t in topics:
        if version >= 13:
            out += (t.topic_id or ZERO_UUID).bytes
        else:
            out += _string(t.name or "", flexible)
        parts = t.partitions
        out += write_uvarint(len(parts) + 1) if flexible else _i32(len(parts))
        for p in parts:
            if version >= 5:
                out += _part5(p.partition_index, p.error_code, p.base_offset, p.log_append_time, p.log_start_offset)
            else:
                out += _part(p.partition_index, p.error_code, p.base_offset, p.log_append_time)
            if version >= 8:
                errs = p.record_errors
                out += write_uvarint(len(errs) + 1) if flexible else _i32(len(errs))
                for index, message in errs:
                    out += _i32(index) + _string(message, flexible)
                    if flexible:
                        out += b"\x00"
                # the message only with an error
                out += _string(p.error_message if p.error_code else None, flexible)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _i32(throttle_ms)
    if flexible:
        out += b"\x00"
    return bytes(out)


# ------------------------------------------------------------ the leader's fast path (issue 28)
class SingleProduce(NamedTuple):
    """A Produce request of the common shape, as `decode_single_produce_request` reads it (the
    fields kio's ProduceRequest has for it)."""

    version: int
    correlation_id: int
    acks: int
    timeout_ms: int
    topic: str | bytes  # its name (v3-v12), its id's 16 bytes (v13)
    partition: int
    records: bytes


def decode_single_produce_request(frame: bytes) -> SingleProduce | None:
    """The whole frame (request header and body) of a Produce request of v3-v13 in the common
    shape: no transactional id, one topic of one partition with records (not null), no tagged
    field in the body, nothing after it. None for any other frame: another API, version or
    shape, or a malformed one (the generic decoder then reads it, or refuses it). What it
    returns is what kio reads from the same bytes (tests/unit/protocol/test_produce_fast_codec.py)."""
    end = len(frame)
    if end < 10:
        return None
    api_key, version, correlation_id = _req_head.unpack_from(frame, 0)
    if api_key != 0 or not MIN_VERSION <= version <= MAX_VERSION:
        return None
    flexible = version >= 9
    try:
        _client_id, pos = read_header_rest(frame, flexible)
        if flexible:
            if frame[pos] or frame[pos + 3 + 4] != 2:  # a null transactional id; one topic
                return None
            acks, timeout_ms = _acks_timeout.unpack_from(frame, pos + 1)
            pos += 8
            if version >= 13:
                topic: str | bytes = frame[pos : pos + 16]
                pos += 16
            else:
                n, pos = read_uvarint(frame, pos)
                if n == 0 or pos + n - 1 > end:  # a null name: kio refuses it
                    return None
                topic = frame[pos : pos + n - 1].decode()
                pos += n - 1
            if frame[pos] != 2:  # one partition
                return None
            (partition,) = _u32(frame, pos + 1)
            n, pos = read_uvarint(frame, pos + 5)
            if n <= 1:  # null or empty records: the generic path's error
                return None
            n -= 1
            if pos + n + 3 != end or frame[pos + n] or frame[pos + n + 1] or frame[pos + n + 2]:
                return None  # tagged fields (partition, topic, request), or bytes after them
        else:
            if _u16(frame, pos)[0] != -1:
                return None
            acks, timeout_ms = _acks_timeout.unpack_from(frame, pos + 2)
            if _u32(frame, pos + 8)[0] != 1:
                return None
            (k,) = _u16(frame, pos + 12)
            pos += 14
            if k < 0 or pos + k > end:
                return None
            topic = frame[pos : pos + k].decode()
            pos += k
            if _u32(frame, pos)[0] != 1:
                return None
            partition, n = _req_part.unpack_from(frame, pos + 4)
            pos += 12
            if n <= 0 or pos + n != end:
                return None
    except (struct.error, IndexError, UnicodeDecodeError, InvalidHeader, VarintError):
        return None
    return SingleProduce(version, correlation_id, acks, timeout_ms, topic, partition, frame[pos : pos + n])


def encode_single_produce_response(
    version: int, topic: str | bytes, partition: int, base_offset: int, log_append_time: int, log_start_offset: int
) -> bytes:
    """The response body answering a `SingleProduce` that succeeded: what
    `encode_produce_response` writes for one topic of one partition with no error and no
    throttle, in a few packs (`topic` as the request named it: a name, or v13 its id's bytes)."""
    if version >= 9:
        if version >= 13:
            head = b"\x02" + topic + b"\x02"  # type: ignore[operator]
        else:
            raw = topic.encode()  # type: ignore[union-attr]
            n = len(raw) + 1
            head = b"\x02" + (SMALL_UVARINTS[n] if n < 0x80 else write_uvarint(n)) + raw + b"\x02"
        return (
            head
            + _part5(partition, 0, base_offset, log_append_time, log_start_offset)
            + _FLEX_TAIL
            + _NO_THROTTLE
            + b"\x00"
        )
    raw = topic.encode()  # type: ignore[union-attr]
    head = _ONE + _i16(len(raw)) + raw + _ONE
    if version >= 8:
        part = _part5(partition, 0, base_offset, log_append_time, log_start_offset) + _NO_RECORD_ERRORS
    elif version >= 5:
        part = _part5(partition, 0, base_offset, log_append_time, log_start_offset)
    else:
        part = _part(partition, 0, base_offset, log_append_time)
    return head + part + _NO_THROTTLE
