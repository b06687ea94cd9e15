"""OffsetDelete (key 47), v0 (KIP-496).

Deletes committed offsets of a group (tombstones in __consumer_offsets). Allowed for
Empty groups, and for active "consumer" groups on topics they do not subscribe to
(GROUP_SUBSCRIBED_TO_TOPIC per partition otherwise); other active groups get
NON_EMPTY_GROUP; unknown groups GROUP_ID_NOT_FOUND. Without DELETE on the group:
GROUP_AUTHORIZATION_FAILED; without READ on a topic: TOPIC_AUTHORIZATION_FAILED for its partitions.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(47, 0, 0)
async def handle(ctx: RequestContext, req) -> object:
    wanted = [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]
    if not ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return ctx.respond(error_code=ErrorCode.group_authorization_failed, throttle_time=0, topics=())
    readable = ctx.authorized_names(AclOperation.READ, ResourceType.TOPIC, {t for t, _ in wanted})
    err, errors = await ctx.services.group_coordinator.delete_offsets(
        req.group_id, [(t, ps) for t, ps in wanted if t in readable]
    )
    if err:
        return ctx.respond(error_code=err, throttle_time=0, topics=())
    errors = dict(errors)
    for t, ps in wanted:
        if t not in readable:
            errors.update({(t, p): ErrorCode.topic_authorization_failed for p in ps})
    topics = tuple(
        nested(
            ctx,
            "OffsetDeleteResponseTopic",
            name=t,
            partitions=tuple(
                nested(ctx, "OffsetDeleteResponsePartition", partition_index=p, error_code=errors.get((t, p), 0))
                for p in parts
            ),
        )
        for t, parts in wanted
    )
    return ctx.respond(error_code=0, throttle_time=0, topics=topics)
