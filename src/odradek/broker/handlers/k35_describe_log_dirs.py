"""DescribeLogDirs (key 35), v1-4: per log directory, the partitions it holds
with their sizes, and (v4) the directory's total and usable bytes. An offline
directory is reported with KAFKA_STORAGE_ERROR.

Without DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED and no directories.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(35, 1, 4)
async def handle(ctx: RequestContext, req) -> object:
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted = None if req.topics is None else {t.topic: set(t.partitions) for t in req.topics}
    results = []
    for d in ctx.services.replica_manager.describe_log_dirs(wanted):
        by_topic: dict[str, list] = {}
        for topic, partition, size in d.partitions:
            by_topic.setdefault(topic, []).append(
                ctx.nested(
                    "DescribeLogDirsPartition",
                    partition_index=partition,
                    partition_size=size,
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        topics = tuple(
            ctx.nested("DescribeLogDirsTopic", name=name, partitions=tuple(parts))
            for name, parts in sorted(by_topic.items())
        )
        results.append(
            ctx.nested(
                "DescribeLogDirsResult",
                error_code=ErrorCode.kafka_storage_error if d.offline else 0,
                log_dir=d.path,
                topics=topics,
                total_bytes=d.total_bytes,
                usable_bytes=d.usable_bytes,
            )
        )
    return ctx.respond(throttle_time=0, error_code=0, results=tuple(results))
