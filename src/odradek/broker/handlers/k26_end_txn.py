"""EndTxn (key 26), v0-5.

Commits or aborts the producer's transaction: the coordinator writes PrepareCommit /
PrepareAbort and answers once it is committed; the markers and CompleteCommit /
CompleteAbort follow in the background (a retry meanwhile gets CONCURRENT_TRANSACTIONS,
then success once complete). A stale epoch is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
below v2); ending a transaction the other way than it is ending, or one that never
started, is INVALID_TXN_STATE. v5 answers the producer id and epoch (the same ones: the
epoch bump of transaction.version 2 is not offered). Without WRITE on the transactional id:
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(26, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        code = ErrorCode.transactional_id_authorization_failed
        return ctx.respond(throttle_time=0, error_code=code, producer_id=-1, producer_epoch=-1)
    err, pid, epoch = await ctx.services.txn_coordinator.end_txn(
        req.transactional_id, req.producer_id, req.producer_epoch, req.committed
    )
    if err == ErrorCode.producer_fenced and ctx.api_version < 2:
        err = int(ErrorCode.invalid_producer_epoch)
    return ctx.respond(throttle_time=0, error_code=err, producer_id=pid, producer_epoch=epoch)
