"""DescribeTransactions (key 65), v0.

For each transactional id: its state as its coordinator holds it (state name, producer
id and epoch, timeout, start time, partitions). An id this broker is not the coordinator
of is NOT_COORDINATOR (admin clients ask FindCoordinator first); an unknown or expired
one TRANSACTIONAL_ID_NOT_FOUND; an empty one INVALID_REQUEST.
Without DESCRIBE on the transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the
transaction's partitions of topics the principal may not DESCRIBE are left out.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(65, 0, 0)
async def handle(ctx: RequestContext, req) -> object:
    txn = ctx.services.txn_coordinator
    states = []
    for txn_id in req.transactional_ids:
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id)
        d = txn.describe(txn_id) if allowed else None
        if d is None or d.error_code:
            states.append(
                nested(
                    ctx,
                    "TransactionState",
                    error_code=d.error_code if d is not None else ErrorCode.transactional_id_authorization_failed,
                    transactional_id=txn_id,
                    transaction_state="",
                    transaction_timeout=0,
                    transaction_start_time=0,  # Kafka leaves the field at its default
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in d.partitions:  # the topics the principal may describe
            if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                by_topic.setdefault(topic, []).append(p)
        states.append(
            nested(
                ctx,
                "TransactionState",
                error_code=0,
                transactional_id=txn_id,
                transaction_state=d.state,
                transaction_timeout=d.timeout_ms,
                transaction_start_time=d.start_ms,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=tuple(nested(ctx, "TopicData", topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )
        )
    return ctx.respond(throttle_time=0, transaction_states=tuple(states))
