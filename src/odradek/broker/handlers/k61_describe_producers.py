"""DescribeProducers (key 61), v0.

Per requested partition, the producers its log on this broker knows (idempotent and
transactional, not yet expired by ``producer.id.expiration.ms``), from the partition's
producer state: producer id and epoch, the last sequence written (-1: none retained), the
timestamp of its last batch, the coordinator epoch of its last transaction marker (-1:
none), and the first offset of its open transaction (-1: none). As Kafka, any replica
with the partition's log answers (the admin client asks the leader unless told a broker);
a partition in the metadata but not hosted here gets NOT_LEADER_OR_FOLLOWER, an unknown one
UNKNOWN_TOPIC_OR_PARTITION. No authorization (none exists here yet).
Without READ on the topic: TOPIC_AUTHORIZATION_FAILED for its partitions.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(61, 0, 0)
async def handle(ctx: RequestContext, req) -> object:
    rm = ctx.services.replica_manager
    readable = ctx.authorized_names(AclOperation.READ, ResourceType.TOPIC, {t.name for t in req.topics})
    topics = []
    for t in req.topics:
        parts = []
        for index in t.partition_indexes:
            if t.name in readable:
                code, producers = rm.describe_producers(t.name, index)
            else:
                code, producers = ErrorCode.topic_authorization_failed, []
            parts.append(
                ctx.nested(
                    "PartitionResponse",
                    partition_index=index,
                    error_code=code,
                    error_message=None,
                    active_producers=tuple(
                        ctx.nested(
                            "ProducerState",
                            producer_id=p.producer_id,
                            producer_epoch=p.epoch,
                            last_sequence=p.last_seq,
                            last_timestamp=p.last_timestamp,
                            coordinator_epoch=p.coordinator_epoch,
                            current_txn_start_offset=p.txn_first_offset,
                        )
                        for p in producers
                    ),
                )
            )
        topics.append(ctx.nested("TopicResponse", name=t.name, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, topics=tuple(topics))
