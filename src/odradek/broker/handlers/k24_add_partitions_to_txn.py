"""AddPartitionsToTxn (key 24), v0-5.

v0-3 come from producers: one transaction (`v3_and_below_*`), its partitions added to the
transaction by the id's coordinator (coordinator/txn): the transaction becomes Ongoing
once the record is committed, and every partition gets the same error. A partition the
metadata does not have fails the request (UNKNOWN_TOPIC_OR_PARTITION, the others
OPERATION_NOT_ATTEMPTED), as does an internal topic (TOPIC_AUTHORIZATION_FAILED: Kafka
never authorizes a producer to write one). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
below v2.

v4+ come from brokers (KIP-890): a batch of transactions, each added or, with
`verify_only`, only checked: a partition not in the transaction is TRANSACTION_ABORTABLE
(the partition leader refuses the producer's batch). Authorization: v4+ CLUSTER_ACTION on the
cluster (CLUSTER_AUTHORIZATION_FAILED); WRITE on the transactional id (every partition
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic (TOPIC_AUTHORIZATION_FAILED, the
others OPERATION_NOT_ATTEMPTED).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.metadata import INTERNAL_TOPICS
from odradek.protocol.errors import ErrorCode


def _topic_results(ctx: RequestContext, errors: dict[tuple[str, int], int]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), err in errors.items():
        by_topic.setdefault(topic, []).append(
            nested(ctx, "AddPartitionsToTxnPartitionResult", partition_index=p, partition_error_code=err)
        )
    return tuple(
        nested(ctx, "AddPartitionsToTxnTopicResult", name=t, results_by_partition=tuple(rs))
        for t, rs in by_topic.items()
    )


async def _one(
    ctx: RequestContext, txn_id: str, producer_id: int, epoch: int, topics: Any, verify_only: bool
) -> dict[tuple[str, int], int]:
    s = ctx.services
    parts = [(t.name, int(p)) for t in topics for p in t.partitions]
    snap = s.snapshot
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return dict.fromkeys(parts, int(ErrorCode.transactional_id_authorization_failed))
    writable = ctx.authorized_names(AclOperation.WRITE, ResourceType.TOPIC, {t for t, _ in parts})
    refused: dict[tuple[str, int], int] = {}
    for topic, p in parts:
        if topic not in writable:
            refused[(topic, p)] = int(ErrorCode.topic_authorization_failed)
        elif ctx.api_version < 4 and topic in INTERNAL_TOPICS:
            refused[(topic, p)] = int(ErrorCode.topic_authorization_failed)
        elif snap.partition(topic, p) is None:
            refused[(topic, p)] = int(ErrorCode.unknown_topic_or_partition)
    if refused:
        return {tp: refused.get(tp, int(ErrorCode.operation_not_attempted)) for tp in parts}
    txn = s.txn_coordinator
    if verify_only:
        return txn.verify_partitions(txn_id, producer_id, epoch, parts)
    err = await txn.add_partitions(txn_id, producer_id, epoch, parts)
    if err == ErrorCode.producer_fenced and ctx.api_version < 2:
        err = int(ErrorCode.invalid_producer_epoch)
    return dict.fromkeys(parts, err)


@handles(24, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    if ctx.api_version < 4:
        errors = await _one(
            ctx,
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            req.v3_and_below_topics,
            False,
        )
        return ctx.respond(throttle_time=0, results_by_topic_v3_and_below=_topic_results(ctx, errors))
    if not ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):  # v4+: brokers only
        return ctx.respond(
            throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=()
        )
    results = []
    for t in req.transactions:
        errors = await _one(ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only)
        results.append(
            nested(
                ctx,
                "AddPartitionsToTxnResult",
                transactional_id=t.transactional_id,
                topic_results=_topic_results(ctx, errors),
            )
        )
    return ctx.respond(throttle_time=0, error_code=0, results_by_transaction=tuple(results))
