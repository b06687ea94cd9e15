"""Requests this broker passes on to the controller (Kafka's ForwardingManager), and ControlledShutdown.

Clients send ElectLeaders and AlterPartitionReassignments to the broker their metadata names
as controller; right after a controller change that may be another broker, which answers
by asking the current controller itself instead of failing with NOT_CONTROLLER. The request
goes as it came (Kafka's KRaft brokers wrap it in an Envelope for a controller quorum; here
the controller is a broker that serves the API itself).

A broker stopping with `controlled.shutdown.enable` asks the controller to move its
leadership away with ControlledShutdown v3 (`protocol/legacy/controlled_shutdown.py`: Kafka 4
has no schema for it, so the body is encoded by hand); broker/controlled_shutdown.py drives
the attempts.

Both go to the broker the newest metadata names as controller, never to this one, on the
`forwarding` connection (broker/interbroker/channels.py: its timeout and backoff), which
nothing else shares: an AlterPartition does not wait behind a forwarded request.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.interbroker.channels import NodeChannels, NodeUnavailable, Purpose
from odradek.client.conn import HandWrittenCodec
from odradek.cluster.store import MetadataStore
from odradek.protocol.errors import KafkaError
from odradek.protocol.legacy import controlled_shutdown as codec

CONTROLLED_SHUTDOWN_VERSION = 3
_CONTROLLED_SHUTDOWN = HandWrittenCodec(flexible=True, decode=codec.decode_response)  # KIP-482: v3 is flexible


class ForwardingManager:
    def __init__(self, node_id: int, metadata: MetadataStore, channels: NodeChannels) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.channels = channels

    def controller(self) -> int:
        """The controller's node id, when it is another broker (NodeUnavailable otherwise)."""
        controller = self.metadata.snapshot.controller_id
        if controller < 0 or controller == self.node_id:
            raise NodeUnavailable("no other controller known")
        return controller

    async def forward(self, api_key: int, request: Any, version: int) -> Any | None:
        """The controller's answer to `request` (the same entity, passed on), or None when no
        other controller can be reached (the caller answers NOT_CONTROLLER; clients retry)."""
        try:
            return await self.channels.request(self.controller(), Purpose.FORWARDING, api_key, request, version=version)
        except (KafkaError, OSError):  # the controller moved again, or is gone
            return None

    async def controlled_shutdown(self, broker_epoch: int = -1) -> codec.ControlledShutdownResponse:
        """Ask the controller to move this broker's leadership away; its answer names the
        partitions it could not move yet. NodeUnavailable, KafkaConnectionError or
        RequestTimedOutError when it cannot be asked now."""
        conn = await self.channels.connection(self.controller(), Purpose.FORWARDING)
        body = codec.encode_request(
            CONTROLLED_SHUTDOWN_VERSION, codec.ControlledShutdownRequest(self.node_id, broker_epoch)
        )
        response: codec.ControlledShutdownResponse = await conn.request(
            codec.API_KEY, body, version=CONTROLLED_SHUTDOWN_VERSION, codec=_CONTROLLED_SHUTDOWN
        )
        return response
