"""AlterPartition (key 56), v2-3: a leader asks the controller to change a partition's ISR.

Served by the controller only (others answer NOT_CONTROLLER); cluster/controller.py applies
Kafka's rules (cluster/decisions.py `check_isr_change`) and writes the accepted changes to
ZooKeeper behind its epoch check. For the whole request: STALE_BROKER_EPOCH when the sender
is not registered or `broker_epoch` is not its registration's (-1: not checked),
NOT_CONTROLLER, REQUEST_TIMED_OUT (ZooKeeper did not take the write in time),
UNKNOWN_SERVER_ERROR. Per partition: NOT_CONTROLLER (the leader knows a newer state than
the controller), FENCED_LEADER_EPOCH (an older leader epoch), INVALID_REQUEST (not from the
leader; an ISR without the leader or with a non-replica), INVALID_UPDATE_VERSION (based on
an older partition epoch, or the state changed meanwhile), INELIGIBLE_REPLICA (a member not
registered, in controlled shutdown, or, v3 (KIP-903), whose broker epoch is not its current
registration's: a follower that restarted since), UNKNOWN_TOPIC_ID. A change to the ISR it
already has answers the current state (a retried request).
Without CLUSTER_ACTION on the cluster (brokers only): CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.controller import ControllerError, IsrChange
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.alter_partition")


@handles(56, 2, 3)
async def handle(ctx: RequestContext, req) -> object:
    controller = ctx.services.controller
    snap = ctx.services.snapshot
    if not ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, topics=())
    if controller is None:
        return ctx.respond(throttle_time=0, error_code=ErrorCode.not_controller, topics=())
    changes: list[IsrChange] = []
    asked: list[tuple[object, list[tuple[int, int]]]] = []  # topic id, [(partition, index in changes or -1)]
    for t in req.topics:
        info = snap.topic_by_id(t.topic_id)
        parts = []
        for p in t.partitions:
            if info is None:
                parts.append((int(p.partition_index), -1))
                continue
            if hasattr(p, "new_isr_with_epochs"):  # v3
                isr = tuple(int(b.broker_id) for b in p.new_isr_with_epochs)
                epochs: tuple[int, ...] | None = tuple(int(b.broker_epoch) for b in p.new_isr_with_epochs)
            else:
                isr, epochs = tuple(int(b) for b in p.new_isr), None
            parts.append((int(p.partition_index), len(changes)))
            changes.append(
                IsrChange(info.name, int(p.partition_index), int(p.leader_epoch), isr, int(p.partition_epoch), epochs)
            )
        asked.append((t.topic_id, parts))
    try:
        outcomes = await controller.alter_partition(int(req.broker_id), int(req.broker_epoch), changes)
    except ControllerError as e:
        log.info("AlterPartition from broker %d: %s", req.broker_id, e.message)
        return ctx.respond(throttle_time=0, error_code=e.error_code, topics=())
    except Exception:
        log.exception("AlterPartition from broker %d failed", req.broker_id)
        return ctx.respond(throttle_time=0, error_code=ErrorCode.unknown_server_error, topics=())
    topics = []
    for topic_id, parts in asked:
        out = []
        for partition, i in parts:
            code, st, epoch = outcomes[i] if i >= 0 else (ErrorCode.unknown_topic_id, None, -1)
            out.append(
                ctx.nested(
                    "PartitionData",
                    partition_index=partition,
                    error_code=code,
                    leader_id=st.leader if st else -1,
                    leader_epoch=st.leader_epoch if st else -1,
                    isr=st.isr if st else (),
                    leader_recovery_state=0,
                    partition_epoch=epoch,
                )
            )
        topics.append(ctx.nested("TopicData", topic_id=topic_id, partitions=tuple(out)))
    return ctx.respond(throttle_time=0, error_code=0, topics=tuple(topics))
