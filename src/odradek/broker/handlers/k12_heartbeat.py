"""Heartbeat (key 12), v0-4.

Resets the member's session timer. REBALANCE_IN_PROGRESS while the group prepares a
rebalance (the member must rejoin); ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID (v3+, static members) as Kafka returns them.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.requests import HeartbeatRequest
from odradek.protocol.errors import ErrorCode


@handles(12, 0, 4)
async def handle(ctx: RequestContext, req) -> object:
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.group_authorization_failed)
    err = await ctx.services.group_coordinator.heartbeat(
        HeartbeatRequest(req.group_id, req.member_id, getattr(req, "group_instance_id", None), req.generation_id)
    )
    return ctx.respond(throttle_time=0, error_code=err)
