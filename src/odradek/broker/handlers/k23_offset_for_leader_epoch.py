"""OffsetForLeaderEpoch (key 23), v2-4.

For each partition, the end offset of the requested leader epoch: the start
offset of the next larger epoch, or the log end offset when the requested epoch
is the current one (storage's leader-epoch cache). A current_leader_epoch newer
than ours: UNKNOWN_LEADER_EPOCH; older: FENCED_LEADER_EPOCH.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.replica_manager import error_for
from odradek.protocol.errors import ErrorCode


@handles(23, 2, 4)
async def handle(ctx: RequestContext, req) -> object:
    broker = ctx.broker
    rm = broker.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            lg = rm.get_log(t.topic, p.partition)
            code, epoch, end = 0, -1, -1
            ours = broker.leader_epoch(t.topic, p.partition)
            current = getattr(p, "current_leader_epoch", -1)
            if lg is None:
                code = ErrorCode.unknown_topic_or_partition
            elif current > ours:
                code = ErrorCode.unknown_leader_epoch
            elif 0 <= current < ours:
                code = ErrorCode.fenced_leader_epoch
            else:
                try:
                    epoch, end = lg.end_offset_for_epoch(p.leader_epoch)
                except Exception as e:
                    code = error_for(e)
            parts.append(
                ctx.nested("EpochEndOffset", error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end)
            )
        topics.append(ctx.nested("OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
