"""SyncGroup (key 14), v0-5.

Members wait (a future) for the leader's assignment, which is handed out verbatim
once the group metadata record carrying it is durable in __consumer_offsets. In a
stable group the member's current assignment comes back at once. Generation and
membership checks give ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
FENCED_INSTANCE_ID (v3+); v5 checks protocol type and name (INCONSISTENT_GROUP_PROTOCOL)
and returns them.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.requests import SyncRequest
from odradek.protocol.errors import ErrorCode


@handles(14, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ctx.respond(
            throttle_time=0,
            error_code=ErrorCode.group_authorization_failed,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    r = await ctx.services.group_coordinator.sync(
        SyncRequest(
            req.group_id,
            req.generation_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            getattr(req, "protocol_type", None),
            getattr(req, "protocol_name", None),
            {a.member_id: bytes(a.assignment) for a in req.assignments},
        )
    )
    return ctx.respond(
        throttle_time=0,
        error_code=r.error,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignment=r.assignment,
    )
