"""ElectLeaders (key 43), v0-2: preferred (0) or unclean (1) leader election, per partition or
for all (null). Served by the controller, which applies it with its epoch check (another broker passes
the request on to it: clients may still name the previous controller):
ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION per partition (cluster/controller.py `elect_leaders`).
A single node has no controller (nobody else could lead): NOT_CONTROLLER.
Without ALTER on the cluster: CLUSTER_AUTHORIZATION_FAILED (and for every partition named).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(43, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    controller = ctx.services.controller
    wanted = None
    if req.topic_partitions is not None:
        wanted = [(t.topic, int(p)) for t in req.topic_partitions for p in t.partitions]
    results: dict[tuple[str, int], tuple[int, str | None]]  # (error code, message) per partition
    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER):
        results = dict.fromkeys(wanted or (), (ErrorCode.cluster_authorization_failed, None))
        top = ErrorCode.cluster_authorization_failed
    elif controller is None:
        results = dict.fromkeys(wanted or (), (ErrorCode.not_controller, "not the controller"))
        top = ErrorCode.not_controller
    elif not controller.active:
        return await _forward(ctx, req)
    else:
        unclean = getattr(req, "election_type", 0) == 1
        results = await controller.elect_leaders(unclean, wanted)
        top = ErrorCode.none
    by_topic: dict[str, list] = {}
    for (topic, p), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            ctx.nested("PartitionResult", partition_id=p, error_code=code, error_message=message)
        )
    out = tuple(
        ctx.nested("ReplicaElectionResult", topic=t, partition_result=tuple(parts)) for t, parts in by_topic.items()
    )
    return ctx.respond(throttle_time=0, error_code=top, replica_election_results=out)


async def _forward(ctx: RequestContext, req) -> object:
    forwarding = ctx.services.forwarding
    resp = await forwarding.forward(ctx.api_key, req, ctx.api_version) if forwarding is not None else None
    if resp is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.not_controller, replica_election_results=())
    return resp
