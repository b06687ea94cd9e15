"""DescribeCluster (key 60), v0-2: brokers, cluster id and controller; when asked, the
cluster's authorized operations from the ACLs (0 without DESCRIBE on the cluster; every one a
cluster supports with no authorizer, as Kafka)."""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.constants import UNKNOWN_OPERATIONS
from odradek.protocol.errors import ErrorCode


@handles(60, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    snap = s.snapshot
    if getattr(req, "endpoint_type", 1) not in (1,):
        return ctx.respond(
            throttle_time=0,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="only broker endpoints are served",
            endpoint_type=req.endpoint_type,
            cluster_id=s.cluster_id,
            controller_id=-1,
            brokers=(),
        )
    brokers = tuple(
        ctx.nested("DescribeClusterBroker", broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack, is_fenced=False)
        for b in (x.at(ctx.connection.listener_name) for x in snap.brokers)
        if b is not None
    )
    return ctx.respond(
        throttle_time=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=s.cluster_id,
        controller_id=snap.controller_id,
        brokers=brokers,
        cluster_authorized_operations=_cluster_operations(ctx)
        if req.include_cluster_authorized_operations
        else UNKNOWN_OPERATIONS,
    )


def _cluster_operations(ctx: RequestContext) -> int:
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER)
