"""ListPartitionReassignments (key 46), v0: the reassignments in progress (all, or those of the
partitions named), with their replicas and the ones being added and removed, from the
metadata (the topic znodes' adding/removing replicas, as Kafka keeps them in ZooKeeper mode).
Without DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(46, 0, 0)
async def handle(ctx: RequestContext, req) -> object:
    controller = ctx.services.controller
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        code = ErrorCode.cluster_authorization_failed
        return ctx.respond(throttle_time=0, error_code=code, error_message=None, topics=())
    wanted = None if req.topics is None else {(t.name, int(p)) for t in req.topics for p in t.partition_indexes}
    topics = []
    if controller is not None:
        view = controller.store.view
        for name in sorted(view.topics):
            a = view.topics[name]
            parts = []
            for p in sorted(set(a.adding) | set(a.removing)):
                if wanted is not None and (name, p) not in wanted:
                    continue
                parts.append(
                    ctx.nested(
                        "OngoingPartitionReassignment",
                        partition_index=p,
                        replicas=a.partitions.get(p, ()),
                        adding_replicas=a.adding.get(p, ()),
                        removing_replicas=a.removing.get(p, ()),
                    )
                )
            if parts:
                topics.append(ctx.nested("OngoingTopicReassignment", name=name, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, error_code=0, error_message=None, topics=tuple(topics))
