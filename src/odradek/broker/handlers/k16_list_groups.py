"""ListGroups (key 16), v0-5.

Every group this coordinator knows (not Dead), with its protocol type; v4+ its state
and a case-insensitive state filter (KIP-518); v5+ its type ("classic") and a type
filter (KIP-848). COORDINATOR_LOAD_IN_PROGRESS (with the groups known so far) while
__consumer_offsets is loading. Without DESCRIBE on the cluster, only the groups the principal
may DESCRIBE, as Kafka.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType


@handles(16, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    gc = ctx.services.group_coordinator
    states = list(getattr(req, "states_filter", ()) or ())
    types = list(getattr(req, "types_filter", ()) or ())
    err, groups = gc.list_groups(states or None, types or None)
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):  # only the groups it may describe
        groups = [g for g in groups if ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, g[0])]
    out = tuple(
        nested(ctx, "ListedGroup", group_id=g, protocol_type=pt, group_state=st, group_type="classic")
        for g, pt, st in groups
    )
    return ctx.respond(throttle_time=0, error_code=err, groups=out)
