"""DeleteRecords (key 21), v0-2: advance a partition's log start offset.

offset -1 means the high watermark. An offset above the high watermark:
OFFSET_OUT_OF_RANGE. The new low watermark is persisted by storage
(log-start-offset-checkpoint) and whole segments below it are deleted. Without DELETE on the
topic: TOPIC_AUTHORIZATION_FAILED, low watermark -1.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(21, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    rm = ctx.services.replica_manager
    deletable = ctx.authorized_names(AclOperation.DELETE, ResourceType.TOPIC, {t.name for t in req.topics})
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name in deletable:
                code, low = rm.delete_records(t.name, p.partition_index, p.offset)
            else:
                code, low = ErrorCode.topic_authorization_failed, -1
            parts.append(
                ctx.nested(
                    "DeleteRecordsPartitionResult",
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=code,
                )
            )
        topics.append(ctx.nested("DeleteRecordsTopicResult", name=t.name, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
