"""InitProducerId (key 22), v0-5, for idempotent producers.

Without a transactional id: a new producer id (epoch 0), or, when the client
passes its current id and epoch (v3+, KIP-360), the same id with the epoch
bumped. Ids come from a block persisted in the metadata directory so they are
never reused across restarts. Transactional ids are answered by the transaction
coordinator; until one exists they get TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
a fatal error, so a transactional producer fails at once instead of retrying.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles, ms
from odradek.protocol.errors import ErrorCode

MAX_EPOCH = 32767


@handles(22, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    if req.transactional_id:
        txn = s.txn_coordinator
        if txn is None:
            return ctx.respond(
                throttle_time=0,
                error_code=ErrorCode.transactional_id_authorization_failed,
                producer_id=-1,
                producer_epoch=-1,
            )
        return await txn.init_producer_id(
            req.transactional_id,
            ms(req.transaction_timeout),
            getattr(req, "producer_id", -1),
            getattr(req, "producer_epoch", -1),
        )
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return ctx.respond(throttle_time=0, error_code=0, producer_id=pid, producer_epoch=epoch + 1)
    return ctx.respond(throttle_time=0, error_code=0, producer_id=await s.producer_ids.next_id(), producer_epoch=0)
