"""ListOffsets (key 2), v1-10.

Per partition, by the requested timestamp: -1 latest (high watermark; the last
stable offset under read_committed), -2 earliest (log start offset), -3 the
record with the largest timestamp (v7+), -4 earliest local (v8+, = log start
here: no tiered storage), -5 earliest pending upload (v9+: none here, -1), or
T >= 0: the first offset whose timestamp is >= T (-1 when there is none).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.protocol.errors import ErrorCode

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5


@handles(2, 1, 10)
async def handle(ctx: RequestContext, req) -> object:
    broker = ctx.broker
    rm = broker.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, ts, offset = _lookup(rm, t.name, p.partition_index, p.timestamp, getattr(req, "isolation_level", 0))
            parts.append(
                ctx.nested(
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=broker.leader_epoch(t.name, p.partition_index) if not code else -1,
                )
            )
        topics.append(ctx.nested("ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))


def _lookup(rm, topic: str, partition: int, timestamp: int, isolation: int) -> tuple[int, int, int]:
    log = rm.get_log(topic, partition)
    if log is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    try:
        if timestamp == LATEST:
            return 0, -1, log.last_stable_offset if isolation == 1 else log.high_watermark
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return 0, -1, log.log_start_offset
        if timestamp == EARLIEST_PENDING_UPLOAD:
            return 0, -1, -1
        if timestamp == MAX_TIMESTAMP:
            offset, ts = log.max_timestamp_offset()
            return 0, ts, offset
        if timestamp < 0:
            return ErrorCode.invalid_request, -1, -1
        found = log.offset_for_timestamp(timestamp)
        if found is None:
            return 0, -1, -1
        offset, ts = found
        return 0, ts, offset
    except Exception as e:
        from odradek.broker.replica_manager import error_for

        return error_for(e), -1, -1
