"""ListOffsets (key 2), v1-10.

Per partition, by the requested timestamp: -1 latest (high watermark; the last stable
offset under read_committed), -2 earliest (log start offset), -3 the record with the
largest timestamp (v7+), -4 earliest local (v8+, = log start here: no tiered storage), -5
earliest pending upload (v9+: none here, -1), or T >= 0: the first offset whose timestamp
is >= T and that the reader may see (-1 when there is none). A follower (replica_id >= 0)
sees the log end offset as latest. The lookup itself is the
partition's (broker/partition.py); a current leader epoch (v4+) other than the
partition's is fenced. No offset found (or the max timestamp's record above what the reader
may see): offset, timestamp and leader epoch -1. KIP-207: while a new leader's high watermark
is below the start of its leader epoch, a client's latest offset, and a timestamp or max
timestamp lookup not found below what it may read, get OFFSET_NOT_AVAILABLE (it retries), so
end offsets never go backwards across a failover. A partition named twice in one request
gets a single INVALID_REQUEST answer, as in Kafka. Without DESCRIBE on the topic:
TOPIC_AUTHORIZATION_FAILED, offset and timestamp -1.
"""

from __future__ import annotations

from collections import Counter

from odradek.broker.partition import Isolation
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(2, 1, 10)
async def handle(ctx: RequestContext, req) -> object:
    rm = ctx.services.replica_manager
    if getattr(req, "replica_id", -1) >= 0:
        isolation = Isolation.LOG_END  # a follower asking for its leader's log end
    elif getattr(req, "isolation_level", 0) == 1:
        isolation = Isolation.TXN_COMMITTED
    else:
        isolation = Isolation.HIGH_WATERMARK
    names = {t.name for t in req.topics}
    described = ctx.authorized_names(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    asked = Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    answered: set[tuple[str, int]] = set()
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            key = (t.name, p.partition_index)
            code: int
            if t.name not in described:
                code, ts, offset, epoch = ErrorCode.topic_authorization_failed, -1, -1, -1
            elif asked[key] > 1:  # named twice: one INVALID_REQUEST answer for it, as Kafka
                if key in answered:
                    continue
                answered.add(key)
                code, ts, offset, epoch = ErrorCode.invalid_request, -1, -1, -1
            else:
                code, ts, offset, epoch = rm.list_offset(
                    t.name, p.partition_index, p.timestamp, isolation, getattr(p, "current_leader_epoch", -1)
                )
            parts.append(
                ctx.nested(
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(ctx.nested("ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
