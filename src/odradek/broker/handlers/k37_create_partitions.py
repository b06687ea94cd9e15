"""CreatePartitions (key 37), v0-3: grow a topic to `count` partitions.

Fewer or equal partitions: INVALID_PARTITIONS; unknown topic:
UNKNOWN_TOPIC_OR_PARTITION; assignments naming unknown brokers:
INVALID_REPLICA_ASSIGNMENT; validate_only checks without changing anything.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.protocol.errors import ErrorCode


@handles(37, 0, 3)
async def handle(ctx: RequestContext, req) -> object:
    broker = ctx.broker
    live = {b.node_id for b in broker.metadata.snapshot.brokers}
    results = []
    for t in req.topics:
        info = broker.metadata.snapshot.topics.get(t.name)
        code, message = 0, None
        if info is None:
            code, message = ErrorCode.unknown_topic_or_partition, f"The topic '{t.name}' does not exist."
        elif t.count <= len(info.partitions):
            code, message = (
                ErrorCode.invalid_partitions,
                f"Topic currently has {len(info.partitions)} partitions, "
                f"which is higher than or equal to the requested {t.count}.",
            )
        elif t.assignments and any(b not in live for a in t.assignments for b in a.broker_ids):
            code, message = ErrorCode.invalid_replica_assignment, "assignment names unknown brokers"
        elif not req.validate_only:
            try:
                broker.add_partitions(t.name, t.count)
            except Exception as e:
                code, message = ErrorCode.kafka_storage_error, str(e)
        results.append(ctx.nested("CreatePartitionsTopicResult", name=t.name, error_code=code, error_message=message))
    return ctx.respond(throttle_time=0, results=tuple(results))
