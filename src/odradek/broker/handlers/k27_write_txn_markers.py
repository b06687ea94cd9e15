"""WriteTxnMarkers (key 27), v1-2 (Kafka 4 serves v1+).

Sent by a transaction coordinator to the leader of each partition of a transaction that
ends: for every marker and partition, a COMMIT or ABORT control batch is appended as
leader with the coordinator's epoch (broker/txn_markers.py, ReplicaManager.write_txn_marker),
answered once the in-sync replicas have it (waiting up to `request.timeout.ms`, as Kafka
appends markers with its request timeout). A partition not led here is
NOT_LEADER_OR_FOLLOWER (UNKNOWN_TOPIC_OR_PARTITION when the metadata does not have it),
which the coordinator retries with its leader. On `__consumer_offsets` the group
coordinator then completes the producer's transactional offsets.
Without CLUSTER_ACTION on the cluster (brokers only): CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

import asyncio

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.broker.txn_markers import write_marker_here
from odradek.protocol.errors import ErrorCode


@handles(27, 1, 2)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    out = []
    cluster_action = ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    for m in req.markers:
        parts = [(t.name, int(p)) for t in m.topics for p in t.partition_indexes]
        if not cluster_action:  # brokers only: every partition refused
            errors = [int(ErrorCode.cluster_authorization_failed)] * len(parts)
        else:
            errors = await asyncio.gather(
                *(
                    write_marker_here(
                        s.replica_manager,
                        s.group_coordinator,
                        topic,
                        p,
                        m.producer_id,
                        m.producer_epoch,
                        m.coordinator_epoch,
                        m.transaction_result,
                        s.config["request.timeout.ms"],
                    )
                    for topic, p in parts
                )
            )
        by_topic: dict[str, list[object]] = {}
        for (topic, p), err in zip(parts, errors):
            by_topic.setdefault(topic, []).append(
                nested(ctx, "WritableTxnMarkerPartitionResult", partition_index=p, error_code=err)
            )
        topics = tuple(
            nested(ctx, "WritableTxnMarkerTopicResult", name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        )
        out.append(nested(ctx, "WritableTxnMarkerResult", producer_id=m.producer_id, topics=topics))
    return ctx.respond(markers=tuple(out))
