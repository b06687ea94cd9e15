"""OffsetForLeaderEpoch (key 23), v2-4.

For each partition, the end offset of the requested leader epoch: the start offset of the
next larger epoch, or the log end offset when the requested epoch is the current one
(storage's leader-epoch cache). A current_leader_epoch newer than the partition's:
UNKNOWN_LEADER_EPOCH; older: FENCED_LEADER_EPOCH (the partition's fencing,
broker/partition.py); a broker that does not lead it: NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles


@handles(23, 2, 4)
async def handle(ctx: RequestContext, req) -> object:
    rm = ctx.services.replica_manager
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, epoch, end = rm.last_offset_for_leader_epoch(
                t.topic, p.partition, p.leader_epoch, getattr(p, "current_leader_epoch", -1)
            )
            parts.append(
                ctx.nested("EpochEndOffset", error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end)
            )
        topics.append(ctx.nested("OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
