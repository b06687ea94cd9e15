"""DeleteGroups (key 42), v0-2.

Deletes Empty groups: tombstones for every committed offset and for the group
metadata are appended to __consumer_offsets; the answer comes once durable.
GROUP_ID_NOT_FOUND for unknown groups, NON_EMPTY_GROUP for groups with members,
INVALID_GROUP_ID for an empty id.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles


@handles(42, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    names = list(req.groups_names)
    results = await ctx.services.group_coordinator.delete_groups(names)
    out = tuple(nested(ctx, "DeletableGroupResult", group_id=g, error_code=e) for g, e in results)
    return ctx.respond(throttle_time=0, results=out)
