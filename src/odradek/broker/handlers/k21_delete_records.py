"""DeleteRecords (key 21), v0-2: advance a partition's log start offset.

offset -1 means the high watermark. An offset above the high watermark:
OFFSET_OUT_OF_RANGE. The new low watermark is persisted by storage
(log-start-offset-checkpoint) and whole segments below it are deleted.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles


@handles(21, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    rm = ctx.services.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, low = rm.delete_records(t.name, p.partition_index, p.offset)
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
