"""Metadata (key 3), v0-13.

Brokers, the cluster id and controller, and for each requested topic (all topics
when the list is null; none when it is empty, v1+) its stable topic id and
partitions with leader, replicas and ISR. Unknown topics are created when
`auto.create.topics.enable` is on and the request allows it (v4+ flag; always
for older versions), as Kafka does; invalid names get INVALID_TOPIC_EXCEPTION.
v10+ may ask by topic id. Internal topics are listed with is_internal. A partition
without a leader (in a cluster: its in-sync replicas are down) has LEADER_NOT_AVAILABLE.
Authorized operations (topics v8+, the cluster v8-10) when asked: every operation the
resource type supports, as Kafka without an authorizer (odradek has none yet).
"""

from __future__ import annotations

import logging
import uuid

from odradek.broker.registry import RequestContext, handles
from odradek.cluster.metadata import topic_name_problem
from odradek.protocol.constants import CLUSTER_OPERATIONS, TOPIC_OPERATIONS, UNKNOWN_OPERATIONS, ZERO_UUID
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.metadata")


@handles(3, 0, 13)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    snap = s.snapshot
    v = ctx.api_version
    results = []
    ops = TOPIC_OPERATIONS if getattr(req, "include_topic_authorized_operations", False) else UNKNOWN_OPERATIONS
    if req.topics is None or (v == 0 and not req.topics):
        wanted: list[tuple[str | None, uuid.UUID | None]] = [
            (t.name, None) for t in sorted(snap.topics.values(), key=lambda t: t.name)
        ]
        auto = False
    else:
        wanted = [(getattr(t, "name", None), getattr(t, "topic_id", None)) for t in req.topics]
        auto = getattr(req, "allow_auto_topic_creation", True) and s.config["auto.create.topics.enable"]
    for name, topic_id in wanted:
        if name is None and topic_id not in (None, ZERO_UUID):
            info = snap.topic_by_id(topic_id)
            if info is None:
                results.append(_topic_error(ctx, ErrorCode.unknown_topic_id, None, ops, topic_id))
                continue
        else:
            info = snap.topics.get(name) if name is not None else None
        if info is None:
            problem = topic_name_problem(name)
            if problem or name is None:
                results.append(_topic_error(ctx, ErrorCode.invalid_topic_exception, name, ops))
                continue
            if not auto or name.startswith("__"):
                results.append(_topic_error(ctx, ErrorCode.unknown_topic_or_partition, name, ops))
                continue
            try:
                assignment = s.topics.assignment(s.config["num.partitions"], s.config["default.replication.factor"])
                info = await s.topics.create_topic(name, assignment, {})
            except Exception:  # a storage failure (offline dir) must not break the request
                log.exception("auto-creating topic %s failed", name)
                results.append(_topic_error(ctx, ErrorCode.kafka_storage_error, name, ops))
                continue
            # Kafka 4 answers the creating request UNKNOWN_TOPIC_OR_PARTITION (its controller creates the
            # topic a moment later); a single node has it and its leader at once (docs/compatibility.md).
        results.append(_topic(ctx, info, ops))
    snap = s.snapshot
    brokers = tuple(
        ctx.nested("MetadataResponseBroker", node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in (x.at(ctx.connection.listener_name) for x in snap.brokers)
        if b is not None
    )
    return ctx.respond(
        throttle_time=0,
        brokers=brokers,
        cluster_id=s.cluster_id,
        controller_id=snap.controller_id,
        topics=tuple(results),
        cluster_authorized_operations=CLUSTER_OPERATIONS
        if getattr(req, "include_cluster_authorized_operations", False)
        else UNKNOWN_OPERATIONS,
        error_code=0,
    )


def _topic(ctx: RequestContext, info, ops: int) -> object:
    parts = tuple(
        ctx.nested(
            "MetadataResponsePartition",
            error_code=ErrorCode.leader_not_available if p.leader < 0 else 0,
            partition_index=p.partition,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas,
            isr_nodes=p.isr,
            offline_replicas=p.offline_replicas,
        )
        for p in info.partitions
    )
    return ctx.nested(
        "MetadataResponseTopic",
        error_code=0,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=parts,
        topic_authorized_operations=ops,
    )


def _topic_error(
    ctx: RequestContext, code: ErrorCode, name: str | None, ops: int, topic_id: uuid.UUID | None = None
) -> object:
    return ctx.nested(
        "MetadataResponseTopic",
        error_code=code,
        name=name if name is not None else "",
        topic_id=topic_id or ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=ops,
    )
