"""LeaveGroup (key 13), v0-5.

v0-2 remove one member (by member id); v3+ remove a batch, each by member id or by
group.instance.id alone (KIP-345), with an error per member. For v0-2 the top-level
error is the member's. Leaving triggers a rebalance of the remaining members.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.requests import LeaveRequest
from odradek.protocol.errors import ErrorCode


@handles(13, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    gc = ctx.services.group_coordinator
    v = ctx.api_version
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.group_authorization_failed, members=())
    if v < 3:
        members: tuple[tuple[str, str | None], ...] = ((req.member_id, None),)
    else:
        members = tuple((m.member_id, m.group_instance_id) for m in req.members)
    r = await gc.leave(LeaveRequest(req.group_id, members))
    if v < 3:
        err = r.error or (r.members[0][2] if r.members else 0)
        return ctx.respond(throttle_time=0, error_code=err)
    out = tuple(nested(ctx, "MemberResponse", member_id=m, group_instance_id=i, error_code=e) for m, i, e in r.members)
    return ctx.respond(throttle_time=0, error_code=r.error, members=out if not r.error else ())
