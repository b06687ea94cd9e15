"""OffsetCommit (key 8), v2-9.

Appends one OffsetCommit record per partition to the group's partition of
__consumer_offsets and answers once they are durable. Generation -1 with an empty
member id commits for a group without active members (simple consumers, admin);
otherwise the member and generation must be current (UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS during CompletingRebalance,
FENCED_INSTANCE_ID for v7+ static members). Metadata longer than
offset.metadata.max.bytes gets OFFSET_METADATA_TOO_LARGE for that partition.
v2-4 retention_time (if not -1) sets an explicit expire timestamp (value v1).
A partition of a topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION before the group
is consulted, as in Kafka (committing or altering offsets of an unknown topic fails).
v10 (topic ids) is not served.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles, ms
from odradek.protocol.errors import ErrorCode


@handles(8, 2, 9)
async def handle(ctx: RequestContext, req) -> object:
    gc = ctx.services.group_coordinator
    topics_known = ctx.services.snapshot.topics
    unknown: dict[tuple[str, int], int] = {}
    entries = []
    for t in req.topics:
        info = topics_known.get(t.name)
        for p in t.partitions:
            if info is None or not 0 <= p.partition_index < len(info.partitions):
                unknown[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
                continue
            entries.append(
                (
                    t.name,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                )
            )
    retention = ms(req.retention_time) if hasattr(req, "retention_time") else -1
    errors = unknown
    if entries or not unknown:
        errors = unknown | await gc.commit_offsets(
            req.group_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            req.generation_id_or_member_epoch,
            entries,
            retention_ms=retention,
        )
    topics = tuple(
        nested(
            ctx,
            "OffsetCommitResponseTopic",
            name=t.name,
            partitions=tuple(
                nested(
                    ctx,
                    "OffsetCommitResponsePartition",
                    partition_index=p.partition_index,
                    error_code=errors.get((t.name, p.partition_index), 0),
                )
                for p in t.partitions
            ),
        )
        for t in req.topics
    )
    return ctx.respond(throttle_time=0, topics=topics)
