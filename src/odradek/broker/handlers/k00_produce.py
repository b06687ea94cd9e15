"""Produce (key 0), served v3-13, advertised from v0.

Kafka 4 still advertises Produce v0 (librdkafka's feature detection looks for it)
but serves v3+; v0-v2 requests are parsed and answered with UNSUPPORTED_VERSION
per partition in their own layout. Per partition: the topic must exist (v13
addresses it by id), be a legal name and not internal; each batch must fit
`max.message.bytes`, and storage validates magic, CRC32C and counts, assigns
offsets and checks producer sequences (replica_manager maps its errors to codes).
acks must be 0, 1 or -1; acks=0 gets no response.
On a single node acks=-1 is satisfied at append (the ISR is this broker); an
fsync demanded by `flush.messages` completes before the response.
"""

from __future__ import annotations

import struct

from odradek.broker.registry import NO_RESPONSE, RawResponse, RequestContext, handles
from odradek.cluster.metadata import INTERNAL_TOPICS, topic_name_problem
from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode
from odradek.protocol.produce_codec import PartitionProduceResult as _Part
from odradek.protocol.produce_codec import TopicProduceResult, encode_produce_response

_I32 = struct.Struct(">i")


def _decode_legacy(version: int, frame: bytes, offset: int):
    """v0-v2 are v3 without the transactional id: prefix a null one and read as v3."""
    body = b"\xff\xff" + bytes(frame[offset:])
    return messages.decode_request(0, 3, body)


@handles(0, 3, 13, advertised_min=0, decoder=_decode_legacy)
async def handle(ctx: RequestContext, req) -> object:
    broker = ctx.broker
    v = ctx.api_version
    if v < 3:
        return _legacy_unsupported(v, req)
    acks = req.acks
    snap = broker.metadata.snapshot
    rm = broker.replica_manager
    topics = []
    for td in req.topic_data:
        if v >= 13:
            info = snap.topic_by_id(td.topic_id)
            name = info.name if info else None
            missing = ErrorCode.unknown_topic_id
        else:
            name = td.name
            info = snap.topics.get(name)
            missing = (
                0
                if info is not None
                else ErrorCode.invalid_topic_exception
                if topic_name_problem(name)
                else ErrorCode.unknown_topic_or_partition
            )
        if info is not None and name in INTERNAL_TOPICS:
            info, missing = None, ErrorCode.invalid_topic_exception
        if acks not in (0, 1, -1):
            info, missing = None, ErrorCode.invalid_required_acks
        parts = []
        for pd in td.partition_data:
            if info is None or pd.index >= len(info.partitions) or pd.index < 0:
                code = missing if info is None else ErrorCode.unknown_topic_or_partition
                parts.append(_Part(pd.index, code))
                continue
            records = pd.records or b""
            if not records:
                parts.append(_Part(pd.index, ErrorCode.invalid_record, error_message="empty records"))
                continue
            r = await rm.append(name, pd.index, records, acks=acks)
            parts.append(
                _Part(pd.index, r.error_code, r.base_offset, r.log_append_time, r.log_start_offset, r.error_message)
            )
        topics.append(TopicProduceResult(td.name if v < 13 else None, getattr(td, "topic_id", None), parts))
    if acks == 0:
        return NO_RESPONSE
    body = encode_produce_response(v, topics)  # written directly, not through kio entities (hot path)
    return RawResponse([body], len(body))


def _legacy_unsupported(version: int, req) -> object:
    out = bytearray()
    out += _I32.pack(len(req.topic_data))
    for td in req.topic_data:
        name = td.name.encode()
        out += struct.pack(">h", len(name)) + name + _I32.pack(len(td.partition_data))
        for pd in td.partition_data:
            out += struct.pack(">ihq", pd.index, ErrorCode.unsupported_version, -1)
            if version >= 2:
                out += struct.pack(">q", -1)
    if version >= 1:
        out += _I32.pack(0)
    return RawResponse([bytes(out)], len(out))
