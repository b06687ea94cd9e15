"""OffsetForLeaderEpoch (key 23), v2-4.

For each partition, the end offset of the requested leader epoch: the start offset of the
next larger epoch, or the log end offset when the requested epoch is the current one
(storage's leader-epoch cache). A current_leader_epoch newer than the partition's:
UNKNOWN_LEADER_EPOCH; older: FENCED_LEADER_EPOCH (the partition's fencing,
broker/partition.py); a broker that does not lead it: NOT_LEADER_OR_FOLLOWER. Authorization:
DESCRIBE on the topic (TOPIC_AUTHORIZATION_FAILED); a follower (v3+ replica_id) CLUSTER_ACTION
(CLUSTER_AUTHORIZATION_FAILED for every partition).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(23, 2, 4)
async def handle(ctx: RequestContext, req) -> object:
    rm = ctx.services.replica_manager
    names = {t.topic for t in req.topics}
    if getattr(req, "replica_id", -1) >= 0:  # a follower: CLUSTER_ACTION, for every partition
        cluster_denied = not ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
        described = set() if cluster_denied else names
    else:
        cluster_denied = False
        described = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code: int
            if cluster_denied:
                code, epoch, end = ErrorCode.cluster_authorization_failed, -1, -1
            elif t.topic not in described:
                code, epoch, end = ErrorCode.topic_authorization_failed, -1, -1
            else:
                code, epoch, end = rm.last_offset_for_leader_epoch(
                    t.topic, p.partition, p.leader_epoch, getattr(p, "current_leader_epoch", -1)
                )
            parts.append(
                ctx.nested("EpochEndOffset", error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end)
            )
        topics.append(ctx.nested("OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
