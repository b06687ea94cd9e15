"""OffsetFetch (key 9), v1-9.

Committed offsets of a group (v8+: of several groups per request). A null topic list
(v2+) means every committed offset of the group. Partitions without a committed offset
get offset -1, leader epoch -1, empty metadata. While the group's partition of
__consumer_offsets loads: COORDINATOR_LOAD_IN_PROGRESS (per partition for v1, which
has no top-level error). Offsets committed in a transaction that is still open
(TxnOffsetCommit) are not returned; with require_stable (v7+, KIP-447) a partition that has
some gets UNSTABLE_OFFSET_COMMIT instead of its committed offset, so that a consumer of a
consume-transform-produce application waits for the transaction to end. v9's member
id/epoch only concern KIP-848 groups.
Authorization: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), DESCRIBE on each topic
named (TOPIC_AUTHORIZATION_FAILED, offset -1); a null topic list answers the topics the principal
may describe. v10 (topic ids) is not served.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


def _fetch(ctx: RequestContext, group_id: str, topics, require_stable: bool) -> tuple[int, list]:
    gc = ctx.services.group_coordinator
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, []
    if topics is None:  # every committed offset: of the topics the principal may describe
        err, rows = gc.fetch_offsets(group_id, None, require_stable=require_stable)
        return err, [(t, parts) for t, parts in rows if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t)]
    allowed = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC, {t.name for t in topics})
    wanted = [(t.name, list(t.partition_indexes)) for t in topics if t.name in allowed]
    err, rows = gc.fetch_offsets(group_id, wanted, require_stable=require_stable) if wanted else (0, [])
    if err:
        return err, rows
    denied = ErrorCode.topic_authorization_failed
    return err, list(rows) + [
        (t.name, [(p, -1, -1, "", denied) for p in t.partition_indexes]) for t in topics if t.name not in allowed
    ]


@handles(9, 1, 9)
async def handle(ctx: RequestContext, req) -> object:
    v = ctx.api_version
    require_stable = bool(getattr(req, "require_stable", False))
    if v >= 8:
        groups = []
        for g in req.groups:
            err, rows = _fetch(ctx, g.group_id, g.topics, require_stable)
            topics = tuple(
                nested(
                    ctx,
                    "OffsetFetchResponseTopics",
                    name=t,
                    partitions=tuple(
                        nested(
                            ctx,
                            "OffsetFetchResponsePartitions",
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=e,
                            metadata=md,
                            error_code=pe,
                        )
                        for p, o, e, md, pe in parts
                    ),
                )
                for t, parts in rows
            )
            groups.append(
                nested(
                    ctx,
                    "OffsetFetchResponseGroup",
                    group_id=g.group_id,
                    topics=topics if not err else (),
                    error_code=err,
                )
            )
        return ctx.respond(throttle_time=0, groups=tuple(groups))
    err, rows = _fetch(ctx, req.group_id, req.topics, require_stable)
    if err and v < 2:
        rows = [(t.name, [(p, -1, -1, "", err) for p in t.partition_indexes]) for t in req.topics or ()]
    elif err:
        rows = []
    topics = tuple(
        nested(
            ctx,
            "OffsetFetchResponseTopic",
            name=t,
            partitions=tuple(
                nested(
                    ctx,
                    "OffsetFetchResponsePartition",
                    partition_index=p,
                    committed_offset=o,
                    committed_leader_epoch=e,
                    metadata=md,
                    error_code=pe,
                )
                for p, o, e, md, pe in parts
            ),
        )
        for t, parts in rows
    )
    return ctx.respond(throttle_time=0, topics=topics, error_code=err)
