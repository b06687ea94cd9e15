"""FindCoordinator (key 10), v0-6.

v0-3 ask for one key, v4+ for a batch (`coordinator_keys`). Key type 0 (group):
this broker, after making sure `__consumer_offsets` exists (created on first use);
key type 1 (transaction): this broker as well (single node). Other key types (2,
share) get INVALID_REQUEST. When the group coordinator is not up yet the answer is
COORDINATOR_NOT_AVAILABLE, which clients retry.
"""

from __future__ import annotations

import logging

from odradek.broker.registry import RequestContext, handles
from odradek.coordinator.group.handler_support import NOT_AVAILABLE, coordinator, nested
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.find_coordinator")


async def _lookup(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str | None]:
    if key_type == 0:
        gc = coordinator(ctx)
        if gc is None or not gc.active:
            return NOT_AVAILABLE, "the group coordinator is not available"
        try:
            await gc.ensure_topic()
        except Exception as e:  # creation failed: clients retry
            log.warning("cannot create __consumer_offsets: %s", e)
            return NOT_AVAILABLE, str(e) or None
        return 0, None
    if key_type == 1:
        return 0, None
    return int(ErrorCode.invalid_request), f"unsupported key type {key_type}"


@handles(10, 0, 6)
async def handle(ctx: RequestContext, req) -> object:
    host, port = ctx.broker.advertised_endpoint()
    node = ctx.broker.node_id
    if ctx.api_version < 4:
        err, msg = await _lookup(ctx, getattr(req, "key_type", 0), req.key)
        if err:
            return ctx.respond(throttle_time=0, error_code=err, error_message=msg, node_id=-1, host="", port=-1)
        return ctx.respond(throttle_time=0, error_code=0, error_message=None, node_id=node, host=host, port=port)
    out = []
    for key in req.coordinator_keys:
        err, msg = await _lookup(ctx, req.key_type, key)
        if err:
            out.append(
                nested(ctx, "Coordinator", key=key, node_id=-1, host="", port=-1, error_code=err, error_message=msg)
            )
        else:
            out.append(
                nested(
                    ctx, "Coordinator", key=key, node_id=node, host=host, port=port, error_code=0, error_message=None
                )
            )
    return ctx.respond(throttle_time=0, coordinators=tuple(out))
