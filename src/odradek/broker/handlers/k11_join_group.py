"""JoinGroup (key 11), v0-9.

The classic rebalance protocol (coordinator/group/classic_join.py, classic_groups.py). The response is a future
completed when the rebalance completes (all members joined, the rebalance timeout, or
the initial delay `group.initial.rebalance.delay.ms` of an empty group); no sleeping.
v4+ (KIP-394): a join without member id gets MEMBER_ID_REQUIRED and a generated id
`clientId-uuid`; v5+ static membership (group.instance.id, KIP-345); v0 has no
rebalance timeout (the session timeout is used); v9 skip_assignment for a static
leader rejoining a stable group (KIP-814).
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles, ms
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.requests import JoinRequest
from odradek.protocol.errors import ErrorCode


@handles(11, 0, 9)
async def handle(ctx: RequestContext, req) -> object:
    gc = ctx.services.group_coordinator
    v = ctx.api_version
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ctx.respond(
            throttle_time=0,
            error_code=ErrorCode.group_authorization_failed,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if v >= 7 else "",
            leader="",
            skip_assignment=False,
            member_id="",
            members=(),
        )
    rebalance = ms(req.rebalance_timeout) if hasattr(req, "rebalance_timeout") else -1
    r = await gc.join(
        JoinRequest(
            req.group_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            ctx.client_id or "",
            ctx.connection.client_host,
            ms(req.session_timeout),
            rebalance,
            req.protocol_type,
            tuple((p.name, bytes(p.metadata)) for p in req.protocols),
            require_known_member_id=v >= 4,
        )
    )
    protocol_name = r.protocol_name if (r.protocol_name is not None or v >= 7) else ""
    members = tuple(
        nested(ctx, "JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=md) for m, i, md in r.members
    )
    return ctx.respond(
        throttle_time=0,
        error_code=r.error,
        generation_id=r.generation,
        protocol_type=r.protocol_type,
        protocol_name=protocol_name,
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=members,
    )
