"""DescribeGroups (key 15), v0-5.

State, protocol type, and members of each group. Member metadata and assignments,
and the protocol name, are only given for Stable groups (as Kafka). Unknown groups
are reported in state "Dead" without error; an empty group id gets INVALID_GROUP_ID.
authorized_operations (v3+), when asked for, from the ACLs (READ|DELETE|DESCRIBE with no
authorizer), else Integer.MIN_VALUE. Without DESCRIBE on the group: GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.constants import UNKNOWN_OPERATIONS
from odradek.protocol.errors import ErrorCode


@handles(15, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    gc = ctx.services.group_coordinator
    with_ops = getattr(req, "include_authorized_operations", False)
    out = []
    for gid in req.groups:
        denied = not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, gid)
        if not gid or denied:
            out.append(
                nested(
                    ctx,
                    "DescribedGroup",
                    error_code=ErrorCode.group_authorization_failed if denied else ErrorCode.invalid_group_id,
                    group_id=gid,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=UNKNOWN_OPERATIONS,
                )
            )
            continue
        d = gc.describe_group(gid)
        members = tuple(
            nested(
                ctx,
                "DescribedGroupMember",
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in d.members
        )
        out.append(
            nested(
                ctx,
                "DescribedGroup",
                error_code=d.error,
                group_id=gid,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol_data,
                members=members,
                authorized_operations=ctx.authorized_operations(ResourceType.GROUP, gid)
                if with_ops
                else UNKNOWN_OPERATIONS,
            )
        )
    return ctx.respond(throttle_time=0, groups=tuple(out))
