"""TxnOffsetCommit (key 28), v0-4.

A transactional producer commits a consumer group's offsets in its transaction (after
AddOffsetsToTxn). The offsets are appended to the group's partition of __consumer_offsets
as one transactional batch of the producer (its id and epoch, base sequence 0, as Kafka's) and the
answer comes once they are durable; they stay pending, invisible to OffsetFetch, until the
transaction coordinator's marker commits or aborts them (WriteTxnMarkers calls the group
coordinator's complete_transaction).

The group is checked as Kafka checks it: an unknown group is accepted with generation -1
(v0-2 have no generation) and ILLEGAL_GENERATION otherwise; v3+ (KIP-447) member id,
generation and group instance id must be current when given (UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION, FENCED_INSTANCE_ID); unlike OffsetCommit, a request without member id
is accepted whatever the group's state, and CompletingRebalance is no error. Metadata longer
than offset.metadata.max.bytes: OFFSET_METADATA_TOO_LARGE for that partition. A partition of
a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION, before the group is consulted.
v0-1 see COORDINATOR_NOT_AVAILABLE instead of COORDINATOR_LOAD_IN_PROGRESS (Kafka's KAFKA-7296
compatibility). A producer epoch older than the partition's: INVALID_PRODUCER_EPOCH.
Authorization: WRITE on the transactional id, then READ on the group (else every partition
TRANSACTIONAL_ID_ / GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED).

Not served: v5 (transactions v2, KIP-890 part 2: the coordinator adds the partition to the
transaction itself), v6 (topic ids, KIP-1319: no kio schema yet; Kafka 4.4 serves v0-6);
Kafka's KIP-890 part 1 check that AddOffsetsToTxn added the partition before the append.
"""

from __future__ import annotations

from odradek.broker.handlers._groups import all_partitions, offset_commit_topics, offsets_to_commit
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.requests import OffsetCommitRequest
from odradek.protocol.errors import ErrorCode


@handles(28, 0, 4)
async def handle(ctx: RequestContext, req) -> object:
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        errors = all_partitions(req, ErrorCode.transactional_id_authorization_failed)
        return ctx.respond(throttle_time=0, topics=offset_commit_topics(ctx, req, errors, "TxnOffsetCommit"))
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, req.group_id):
        errors = all_partitions(req, ErrorCode.group_authorization_failed)
        return ctx.respond(throttle_time=0, topics=offset_commit_topics(ctx, req, errors, "TxnOffsetCommit"))
    entries, errors = offsets_to_commit(ctx, req)
    if entries:
        errors |= await ctx.services.group_coordinator.commit_offsets(
            OffsetCommitRequest(
                req.group_id,
                getattr(req, "member_id", ""),
                getattr(req, "group_instance_id", None),
                getattr(req, "generation_id", -1),
                entries,
                transactional=True,
                producer_id=req.producer_id,
                producer_epoch=req.producer_epoch,
            )
        )
    if ctx.api_version < 2:
        errors = {
            tp: ErrorCode.coordinator_not_available if e == ErrorCode.coordinator_load_in_progress else e
            for tp, e in errors.items()
        }
    return ctx.respond(throttle_time=0, topics=offset_commit_topics(ctx, req, errors, "TxnOffsetCommit"))
