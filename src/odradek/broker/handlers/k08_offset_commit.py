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
Authorization: READ on the group (else GROUP_AUTHORIZATION_FAILED for every partition), READ on
each topic (TOPIC_AUTHORIZATION_FAILED).
v10 (topic ids) is not served.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import all_partitions, offset_commit_topics, offsets_to_commit
from odradek.broker.registry import RequestContext, handles, ms
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.requests import OffsetCommitRequest
from odradek.protocol.errors import ErrorCode


@handles(8, 2, 9)
async def handle(ctx: RequestContext, req) -> object:
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, req.group_id):
        errors = all_partitions(req, ErrorCode.group_authorization_failed)
        return ctx.respond(throttle_time=0, topics=offset_commit_topics(ctx, req, errors, "OffsetCommit"))
    entries, errors = offsets_to_commit(ctx, req)
    if entries or not errors:
        errors |= await ctx.services.group_coordinator.commit_offsets(
            OffsetCommitRequest(
                req.group_id,
                req.member_id,
                getattr(req, "group_instance_id", None),
                req.generation_id_or_member_epoch,
                entries,
                retention_ms=ms(req.retention_time) if hasattr(req, "retention_time") else -1,
            )
        )
    return ctx.respond(throttle_time=0, topics=offset_commit_topics(ctx, req, errors, "OffsetCommit"))
