"""AlterPartitionReassignments (key 45), v0-1: move partitions to new replicas, or cancel a move
(null replicas). Served by the controller (another broker passes the request on to it): the
new replicas copy the log as followers while the old ones keep serving, and once they are
all in the ISR the move completes (cluster/controller.py). Per partition:
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (duplicates, no replicas, a broker
that is not alive), NO_REASSIGNMENT_IN_PROGRESS (cancelling nothing).
Without ALTER on the cluster: CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(45, 0, 1)
async def handle(ctx: RequestContext, req) -> object:
    controller = ctx.services.controller
    forwarding = ctx.services.forwarding
    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER):
        denied = ErrorCode.cluster_authorization_failed
        return ctx.respond(throttle_time=0, error_code=denied, error_message=None, responses=())
    if controller is not None and not controller.active and forwarding is not None:
        forwarded = await forwarding.forward(ctx.api_key, req, ctx.api_version)
        if forwarded is not None:
            return forwarded
    moves = {
        (t.name, p.partition_index): (tuple(int(b) for b in p.replicas) if p.replicas is not None else None)
        for t in req.topics
        for p in t.partitions
    }
    results: dict[tuple[str, int], tuple[int, str | None]]  # (error code, message) per partition
    if controller is None or not controller.active:
        results = dict.fromkeys(moves, (ErrorCode.not_controller, "not the controller"))
        top = ErrorCode.not_controller
    else:
        results = await controller.alter_reassignments(moves)
        top = ErrorCode.none
    by_topic: dict[str, list] = {}
    for (topic, p), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(
            ctx.nested("ReassignablePartitionResponse", partition_index=p, error_code=code, error_message=message)
        )
    return ctx.respond(
        throttle_time=0,
        error_code=top,
        error_message=None,
        responses=tuple(
            ctx.nested("ReassignableTopicResponse", name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )
