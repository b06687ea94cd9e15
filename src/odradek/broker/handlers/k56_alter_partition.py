"""AlterPartition (key 56), v2-3: a leader asks the controller to change a partition's ISR.

Served by the controller only (others answer NOT_CONTROLLER); cluster/controller.py applies
Kafka's rules and writes the new state to ZooKeeper behind its epoch check. Per partition:
FENCED_LEADER_EPOCH (an older leader epoch), NOT_LEADER_OR_FOLLOWER (not from the leader),
INVALID_UPDATE_VERSION (based on an older partition epoch), INVALID_REQUEST (an ISR without
the leader or with a non-replica), INELIGIBLE_REPLICA (adding a broker that is not alive),
UNKNOWN_TOPIC_ID. v3 carries broker epochs with each ISR member (accepted, not checked).
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.protocol.errors import ErrorCode


@handles(56, 2, 3)
async def handle(ctx: RequestContext, req) -> object:
    controller = ctx.services.controller
    snap = ctx.services.snapshot
    if controller is None or not controller.active:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.not_controller, topics=())
    topics = []
    for t in req.topics:
        info = snap.topic_by_id(t.topic_id)
        parts = []
        for p in t.partitions:
            isr = (
                tuple(int(b.broker_id) for b in p.new_isr_with_epochs)
                if hasattr(p, "new_isr_with_epochs")
                else tuple(int(b) for b in p.new_isr)
            )
            code: int
            if info is None:
                code, st, epoch = ErrorCode.unknown_topic_id, None, -1
            else:
                code, st, epoch = await controller.alter_partition(
                    info.name, p.partition_index, req.broker_id, p.leader_epoch, isr, p.partition_epoch
                )
            parts.append(
                ctx.nested(
                    "PartitionData",
                    partition_index=p.partition_index,
                    error_code=code,
                    leader_id=st.leader if st else -1,
                    leader_epoch=st.leader_epoch if st else -1,
                    isr=st.isr if st else (),
                    leader_recovery_state=0,
                    partition_epoch=epoch,
                )
            )
        topics.append(ctx.nested("TopicData", topic_id=t.topic_id, partitions=tuple(parts)))
    return ctx.respond(throttle_time=0, error_code=0, topics=tuple(topics))
