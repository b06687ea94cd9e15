"""FindCoordinator (key 10), v0-6.

v0-3 ask for one key, v4+ for a batch (`coordinator_keys`). Key type 0 (group): the
leader of the group's partition of `__consumer_offsets`, from the metadata, after making
sure the topic exists (created on first use). Key type 1 (transaction): the leader of the
transactional id's partition of `__transaction_state`, created the same way. Other key
types (2, share) get INVALID_REQUEST. When the coordinator is not up or the partition
has no leader, the answer is COORDINATOR_NOT_AVAILABLE, which clients retry; so it is when
the leader is this broker and its coordinators are fenced (cut from ZooKeeper:
broker/coordinator_fence.py), whose metadata may name it where another broker leads now.
Authorization: DESCRIBE on the group or transactional id (GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging

from odradek.broker.handlers._groups import nested
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.metadata import BrokerInfo
from odradek.coordinator.group import GroupCoordinator
from odradek.coordinator.group.records import OFFSETS_TOPIC
from odradek.coordinator.txn import TransactionCoordinator
from odradek.coordinator.txn.records import TXN_STATE_TOPIC
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.find_coordinator")
NOT_AVAILABLE = int(ErrorCode.coordinator_not_available)


async def _lookup(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str | None, BrokerInfo | None]:
    """(error, message, the coordinator's broker)."""
    s = ctx.services
    coordinator: GroupCoordinator | TransactionCoordinator | None
    if key_type == 0:
        coordinator, topic, what = s.group_coordinator, OFFSETS_TOPIC, "group"
    elif key_type == 1:
        coordinator, topic, what = s.txn_coordinator, TXN_STATE_TOPIC, "transactional id"
    else:
        return int(ErrorCode.invalid_request), f"unsupported key type {key_type}", None
    if key_type == 0 and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return int(ErrorCode.group_authorization_failed), None, None
    if key_type == 1 and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return int(ErrorCode.transactional_id_authorization_failed), None, None
    if coordinator is None or not coordinator.active:
        return NOT_AVAILABLE, f"the {what} coordinator is not available", None
    try:
        await coordinator.ensure_topic()
    except Exception as e:  # creation failed: clients retry
        log.warning("cannot create %s: %s", topic, e)
        return NOT_AVAILABLE, str(e) or None, None
    snap = s.snapshot
    part = snap.partition(topic, coordinator.partition_for(key))
    leader = snap.broker(part.leader) if part is not None else None
    leader = leader.at(ctx.connection.listener_name) if leader is not None else None
    if leader is None:
        return NOT_AVAILABLE, f"{topic} has no leader for this {what} yet", None
    if part is not None and part.leader == s.node_id and coordinator.fenced is not None:
        # its metadata may be stale (broker/coordinator_fence.py): naming itself would send the
        # client to a coordinator that answers NOT_COORDINATOR, round and round
        return NOT_AVAILABLE, f"this broker does not act as coordinator now: {coordinator.fenced}", None
    return 0, None, leader


@handles(10, 0, 6)
async def handle(ctx: RequestContext, req) -> object:
    if ctx.api_version < 4:
        err, msg, b = await _lookup(ctx, getattr(req, "key_type", 0), req.key)
        if b is None:
            return ctx.respond(throttle_time=0, error_code=err, error_message=msg, node_id=-1, host="", port=-1)
        return ctx.respond(
            throttle_time=0, error_code=0, error_message=None, node_id=b.node_id, host=b.host, port=b.port
        )
    out = []
    for key in req.coordinator_keys:
        err, msg, b = await _lookup(ctx, req.key_type, key)
        if b is None:
            out.append(
                nested(ctx, "Coordinator", key=key, node_id=-1, host="", port=-1, error_code=err, error_message=msg)
            )
        else:
            out.append(
                nested(
                    ctx,
                    "Coordinator",
                    key=key,
                    node_id=b.node_id,
                    host=b.host,
                    port=b.port,
                    error_code=0,
                    error_message=None,
                )
            )
    return ctx.respond(throttle_time=0, coordinators=tuple(out))
