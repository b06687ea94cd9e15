"""ControlledShutdown (key 7), v1-3: a broker shutting down asks the controller to move its
leadership to other in-sync replicas first, so clients see no error for those partitions.

Kafka 4 dropped the API with ZooKeeper mode; the codec is Kafka 3.x's, hand-written
(protocol/legacy/controlled_shutdown.py). Served by the controller (others answer
NOT_CONTROLLER); the answer lists the partitions the broker still leads because no other
in-sync replica is alive (it retries, then shuts down anyway, as Kafka does). A request
the controller cannot serve gets Kafka's error code, never a closed connection:
NOT_CONTROLLER (not, or no longer, the controller; stopping), REQUEST_TIMED_OUT (ZooKeeper
did not take the moves in time), BROKER_NOT_AVAILABLE (the broker is not registered),
STALE_BROKER_EPOCH (v2+: from an older registration of the broker).
Without CLUSTER_ACTION on the cluster (brokers only): CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.registry import RequestContext, VersionCodec, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.controller import ControllerError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.legacy import controlled_shutdown as codec
from odradek.protocol.legacy.controlled_shutdown import ControlledShutdownResponse

log = logging.getLogger("odradek.broker.shutdown")


def _encode(version: int, resp: ControlledShutdownResponse) -> tuple[list[Any], int]:
    body = codec.encode_response(version, resp)
    return [body], len(body)


@handles(
    7,
    1,
    3,
    codecs={
        range(1, 3): VersionCodec(codec.decode_request, _encode),
        3: VersionCodec(codec.decode_request, _encode, flexible=True),  # KIP-482: v3 is flexible
    },
)
async def handle(ctx: RequestContext, req: codec.ControlledShutdownRequest) -> object:
    controller = ctx.services.controller
    if not ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return ControlledShutdownResponse(ErrorCode.cluster_authorization_failed)
    if controller is None:
        return ControlledShutdownResponse(ErrorCode.not_controller)
    try:
        remaining = await controller.controlled_shutdown(req.broker_id, req.broker_epoch)
    except ControllerError as e:
        log.info("controlled shutdown of broker %d: %s", req.broker_id, e.message)
        return ControlledShutdownResponse(e.error_code)
    except Exception:
        log.exception("controlled shutdown of broker %d failed", req.broker_id)
        return ControlledShutdownResponse(ErrorCode.unknown_server_error)
    return ControlledShutdownResponse(ErrorCode.none, tuple(remaining))
