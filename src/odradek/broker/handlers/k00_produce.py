"""Produce (key 0), served v3-13, advertised from v0.

Kafka 4 still advertises Produce v0 (librdkafka's feature detection looks for it) but
serves v3+; v0-v2 requests are read by the legacy codec (protocol/legacy/produce.py) and
answered with UNSUPPORTED_VERSION per partition in their own layout. Per partition: the
topic must exist (v13 addresses it by id) and not be internal; the replica
manager appends it as leader (storage validates size against `max.message.bytes`, magic,
CRC32C and counts, assigns offsets and checks producer sequences; errors come back as
codes; a batch with some bad records, keyless on a compacted topic or out of the timestamp bounds,
fails with `record_errors` naming them, v8+). Only one batch per partition (INVALID_RECORD
otherwise, as Kafka's LogValidator); a name that is not a topic, valid or not, is
UNKNOWN_TOPIC_OR_PARTITION. acks must be 0, 1 or -1; acks=0 gets no response. Every partition is appended
first, then acks=-1 waits once for the in-sync replicas (`timeout_ms`: REQUEST_TIMED_OUT
for what they do not have by then); while the ISR is this broker alone that wait ends at
once. An fsync demanded by `flush.messages` completes before the response. A control batch
(a transaction marker) is INVALID_RECORD: only the transaction coordinator writes those. With
a transactional id, a producer's first transactional batch on a partition is verified with
the transaction coordinator first (KIP-890, broker/txn_verification.py). Authorization (as
Kafka's KafkaApis): WRITE on the transactional id (else every partition
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic (TOPIC_AUTHORIZATION_FAILED, before
its existence is looked at). Responses are
written by protocol/produce_codec.py (the hot path), not through kio entities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from odradek.broker.quotas.manager import user_of
from odradek.broker.registry import NO_RESPONSE, RequestContext, VersionCodec, handles, ms
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.metadata import INTERNAL_TOPICS
from odradek.protocol.errors import ErrorCode
from odradek.protocol.legacy import produce as legacy
from odradek.protocol.produce_codec import PartitionProduceResult as _Part
from odradek.protocol.produce_codec import TopicProduceResult, encode_produce_response
from odradek.protocol.records import batch_is_control, batch_size

_ONE_BATCH = "a Produce request carries one record batch per partition (magic v2)"


def _more_than_one_batch(records) -> bool:
    """Whether the partition's records hold more than one batch: Kafka's LogValidator takes exactly
    one from a client (INVALID_RECORD otherwise). Read from the first batch's length alone; the
    framing itself is storage's to check."""
    size = batch_size(records)
    return size is not None and size < len(records)


@dataclass(slots=True)
class ProduceAnswer:
    topics: list[TopicProduceResult]
    throttle_ms: int = 0  # a client quota's (broker/quotas/), set by the connection


def _encode(version: int, r: ProduceAnswer) -> tuple[list[Any], int]:
    body = encode_produce_response(version, r.topics, r.throttle_ms)
    return [body], len(body)


def _encode_legacy(version: int, r: ProduceAnswer) -> tuple[list[Any], int]:
    body = legacy.encode_response(version, r.topics, r.throttle_ms)
    return [body], len(body)


def _charge_quota(ctx: RequestContext) -> None:
    """producer_byte_rate (Kafka's quotas.produce, charged when the request arrives, whatever
    becomes of it): the whole request's bytes, header and body, as Kafka's KafkaApis charges
    `request.sizeInBytes`; a throttle is left for the connection to apply."""
    if ctx.services.quotas is None:
        return
    quotas = ctx.services.client_quotas()
    if quotas is None or not quotas.produce.enabled:
        return
    user, client_id = user_of(ctx.connection.principal), ctx.client_id or ""
    throttle = quotas.produce.record(user, client_id, ctx.request_size)
    if throttle:
        quotas.produce.throttled(user, client_id, throttle)
        ctx.connection.throttle_ms = max(ctx.connection.throttle_ms, throttle)


@handles(
    0,
    3,
    13,
    advertised_min=0,
    codecs={
        range(0, 3): VersionCodec(legacy.decode_request, _encode_legacy),
        range(3, 14): VersionCodec(encode=_encode),
    },
)
async def handle(ctx: RequestContext, req) -> object:
    v = ctx.api_version
    if v < 3:
        return ProduceAnswer(
            [
                TopicProduceResult(
                    td.name, None, [_Part(pd.index, ErrorCode.unsupported_version) for pd in td.partition_data]
                )
                for td in req.topic_data
            ]
        )
    _charge_quota(ctx)
    if req.transactional_id is not None and not ctx.authorized(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
    ):
        denied = ErrorCode.transactional_id_authorization_failed
        return ProduceAnswer(
            [
                TopicProduceResult(
                    td.name if v < 13 else None,
                    getattr(td, "topic_id", None),
                    [_Part(pd.index, denied) for pd in td.partition_data],
                )
                for td in req.topic_data
            ]
        )
    acks = req.acks
    snap = ctx.services.snapshot
    # per partition, in request order: a result already decided here, or its place among the appends
    slots: list[list[_Part | int]] = []
    entries: list[tuple[str, int, Any]] = []
    for td in req.topic_data:
        if v >= 13:
            info = snap.topic_by_id(td.topic_id)
            name = info.name if info else None
            missing: int = ErrorCode.unknown_topic_id
        else:
            name = td.name
            info = snap.topics.get(name)
            missing = ErrorCode.unknown_topic_or_partition  # an invalid name is simply unknown, as in Kafka
        if name is not None and not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, name):
            info, missing = None, ErrorCode.topic_authorization_failed
        elif info is not None and name in INTERNAL_TOPICS:
            info, missing = None, ErrorCode.invalid_topic_exception
        if acks not in (0, 1, -1):
            info, missing = None, ErrorCode.invalid_required_acks
        parts: list[_Part | int] = []
        for pd in td.partition_data:
            if info is None or pd.index >= len(info.partitions) or pd.index < 0:
                parts.append(_Part(pd.index, missing if info is None else ErrorCode.unknown_topic_or_partition))
            elif not pd.records:
                parts.append(_Part(pd.index, ErrorCode.invalid_record, error_message="empty records"))
            elif _more_than_one_batch(pd.records):
                parts.append(_Part(pd.index, ErrorCode.invalid_record, error_message=_ONE_BATCH))
            elif batch_is_control(pd.records):  # only the transaction coordinator writes those
                msg = f"Clients are not allowed to write control records in topic partition {info.name}-{pd.index}"
                parts.append(_Part(pd.index, ErrorCode.invalid_record, error_message=msg))
            else:
                parts.append(len(entries))
                entries.append((info.name, pd.index, pd.records))
        slots.append(parts)
    if (
        req.transactional_id is not None
        and entries
        and ctx.services.config["transaction.partition.verification.enable"]
    ):
        refused = await ctx.services.txn_verification.verify(req.transactional_id, entries, v)
        if refused:
            for parts in slots:
                for j, slot in enumerate(parts):
                    if isinstance(slot, int) and slot in refused:
                        code, message = refused[slot]
                        parts[j] = _Part(entries[slot][1], code, error_message=message)
            kept = [i for i in range(len(entries)) if i not in refused]
            renumber = {old: new for new, old in enumerate(kept)}
            for parts in slots:
                for j, slot in enumerate(parts):
                    if isinstance(slot, int):
                        parts[j] = renumber[slot]
            entries = [entries[i] for i in kept]
    results = await ctx.services.replica_manager.append_records(entries, acks, ms(req.timeout)) if entries else []
    if acks == 0:
        return NO_RESPONSE
    topics = []
    for td, parts in zip(req.topic_data, slots):
        out = []
        for pd, slot in zip(td.partition_data, parts):
            if isinstance(slot, int):
                slot = results[slot].answer(pd.index)
            out.append(slot)
        topics.append(TopicProduceResult(td.name if v < 13 else None, getattr(td, "topic_id", None), out))
    return ProduceAnswer(topics)
