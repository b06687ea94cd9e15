"""DeleteGroups (key 42), v0-2.

Deletes Empty groups: tombstones for every committed offset and for the group
metadata are appended to __consumer_offsets; the answer comes once durable.
GROUP_ID_NOT_FOUND for unknown groups, NON_EMPTY_GROUP for groups with members,
INVALID_GROUP_ID for an empty id, GROUP_AUTHORIZATION_FAILED without DELETE on the group.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(42, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    names = list(req.groups_names)
    allowed = ctx.authorized_names(AclOperation.DELETE, ResourceType.GROUP, names)
    deleted = iter(await ctx.services.group_coordinator.delete_groups([g for g in names if g in allowed]))
    results = [next(deleted) if g in allowed else (g, ErrorCode.group_authorization_failed) for g in names]
    out = tuple(nested(ctx, "DeletableGroupResult", group_id=g, error_code=e) for g, e in results)
    return ctx.respond(throttle_time=0, results=out)
