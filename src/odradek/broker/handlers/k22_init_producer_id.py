"""InitProducerId (key 22), v0-5.

Without a transactional id (idempotent producers): a new producer id (epoch 0), or, when
the client passes its current id and epoch (v3+, KIP-360), the same id with the epoch
bumped. Ids come from a block persisted in the metadata (producer_ids.py) so they are
never reused across restarts. A block the metadata cannot give (ZooKeeper's session expired
or its connection lost under the claim) is COORDINATOR_LOAD_IN_PROGRESS, which clients retry:
Kafka 4's answer while its broker waits for a block from the controller (RPCProducerIdManager).
Kafka 3.9 in ZooKeeper mode answers UNKNOWN_SERVER_ERROR to a claim whose session expired,
which the Java producer takes as fatal: an idempotent writer to a broker back from a pause
past its session died of it (tests/cluster/test_faults.py).

With a transactional id: the transaction coordinator of the id (coordinator/txn) answers:
a new producer id the first time, the epoch bumped after (an open transaction of the
previous epoch is aborted first: CONCURRENT_TRANSACTIONS, which the client retries), a
timeout above `transaction.max.timeout.ms` is INVALID_TRANSACTION_TIMEOUT, and a broker
that is not the id's coordinator answers NOT_COORDINATOR. PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v4, as Kafka does for clients that do not know it. Authorization:
WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one, IDEMPOTENT_WRITE
on the cluster or WRITE on some topic (KIP-679; CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging

from odradek.broker.registry import RequestContext, handles, ms
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.store import MetadataError
from odradek.protocol.errors import ErrorCode

MAX_EPOCH = 32767
log = logging.getLogger("odradek.broker.producer_ids")


@handles(22, 0, 5)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if req.transactional_id is not None and not ctx.authorized(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
    ):
        code = ErrorCode.transactional_id_authorization_failed
        return ctx.respond(throttle_time=0, error_code=code, producer_id=-1, producer_epoch=-1)
    if (
        req.transactional_id is None
        and not ctx.authorized(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
        and not ctx.authorized_by_type(AclOperation.WRITE, ResourceType.TOPIC)  # KIP-679
    ):
        code = ErrorCode.cluster_authorization_failed
        return ctx.respond(throttle_time=0, error_code=code, producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        err, pid, epoch = await s.txn_coordinator.init_producer_id(
            req.transactional_id, ms(req.transaction_timeout), pid, epoch
        )
        if err == ErrorCode.producer_fenced and ctx.api_version < 4:
            err = int(ErrorCode.invalid_producer_epoch)
        return ctx.respond(throttle_time=0, error_code=err, producer_id=pid, producer_epoch=epoch)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return ctx.respond(throttle_time=0, error_code=0, producer_id=pid, producer_epoch=epoch + 1)
    try:
        pid = await s.producer_ids.next_id()
    except MetadataError as e:
        log.warning("cannot allocate a producer id (the client retries): %s", e)
        return ctx.respond(
            throttle_time=0, error_code=ErrorCode.coordinator_load_in_progress, producer_id=-1, producer_epoch=-1
        )
    return ctx.respond(throttle_time=0, error_code=0, producer_id=pid, producer_epoch=0)
