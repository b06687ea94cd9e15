"""ControlledShutdown (key 7), v1-3: a broker shutting down asks the controller to move its
leadership to other in-sync replicas first, so clients see no error for those partitions.

Kafka 4 dropped the API with ZooKeeper mode; the codec is Kafka 3.x's, hand-written
(protocol/legacy/controlled_shutdown.py). Served by the controller (others answer
NOT_CONTROLLER); the answer lists the partitions the broker still leads because no other
in-sync replica is alive (it retries, then shuts down anyway, as Kafka does).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.registry import RequestContext, VersionCodec, handles
from odradek.protocol.errors import ErrorCode
from odradek.protocol.legacy import controlled_shutdown as codec
from odradek.protocol.legacy.controlled_shutdown import ControlledShutdownResponse


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
    if controller is None or not controller.active:
        return ControlledShutdownResponse(ErrorCode.not_controller)
    remaining = await controller.controlled_shutdown(req.broker_id)
    return ControlledShutdownResponse(ErrorCode.none, tuple(remaining))
