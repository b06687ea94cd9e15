"""DeleteRecords (key 21), v0-2: advance a partition's log start offset.

offset -1 means the high watermark. An offset above the high watermark:
OFFSET_OUT_OF_RANGE. The new low watermark is persisted by storage
(log-start-offset-checkpoint) and whole segments below it are deleted.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.replica_manager import error_for
from odradek.protocol.errors import ErrorCode


@handles(21, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    rm = ctx.broker.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            lg = rm.get_log(t.name, p.partition_index)
            code, low = 0, -1
            if lg is None:
                code = ErrorCode.unknown_topic_or_partition
            else:
                target = lg.high_watermark if p.offset == -1 else p.offset
                if target < 0 or target > lg.high_watermark:
                    code = ErrorCode.offset_out_of_range
                else:
                    try:
                        low = lg.delete_records(target) if target > lg.log_start_offset else lg.log_start_offset
                    except Exception as e:
                        code = error_for(e)
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
