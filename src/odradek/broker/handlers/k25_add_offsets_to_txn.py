"""AddOffsetsToTxn (key 25), v0-4.

Adds the group's partition of `__consumer_offsets` to the producer's transaction (the
coordinator's AddPartitions with that one partition), so that the transaction's end
writes a marker there and the offsets committed with TxnOffsetCommit become visible (or
are dropped) with it. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2. Authorization: WRITE on
the transactional id, READ on the group (TRANSACTIONAL_ID_ / GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.records import OFFSETS_TOPIC
from odradek.protocol.errors import ErrorCode


@handles(25, 0, 4)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.group_authorization_failed)
    partition = s.group_coordinator.partition_for(req.group_id)
    err = await s.txn_coordinator.add_partitions(
        req.transactional_id, req.producer_id, req.producer_epoch, [(OFFSETS_TOPIC, partition)]
    )
    if err == ErrorCode.producer_fenced and ctx.api_version < 2:
        err = int(ErrorCode.invalid_producer_epoch)
    return ctx.respond(throttle_time=0, error_code=err)
