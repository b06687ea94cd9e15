"""Requests a broker passes on to the controller (as Kafka's KRaft brokers forward admin requests).

Clients send ElectLeaders to the broker their metadata names as controller; right after a
controller change that may be another broker, which answers by asking the current
controller itself instead of failing with NOT_CONTROLLER.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.client.conn import Connection

if TYPE_CHECKING:
    from odradek.broker.registry import RequestContext
    from odradek.cluster.store import MetadataStore


class ControllerChannel:
    def __init__(self, node_id: int, metadata: MetadataStore) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self._conn: Connection | None = None
        self._to = -1

    async def request(self, api_key: int, data: Any, version: int, timeout_s: float = 30) -> Any:
        snap = self.metadata.snapshot
        controller = snap.broker(snap.controller_id)
        if controller is None or controller.node_id == self.node_id:
            raise ConnectionError("no other controller known")
        if self._conn is None or not self._conn.connected or self._to != controller.node_id:
            if self._conn is not None:
                self._conn.close()
            self._conn = await Connection(
                controller.host, controller.port, node_id=controller.node_id, client_id=f"broker-{self.node_id}"
            ).connect()
            self._to = controller.node_id
        return await self._conn.request(api_key, data, version=version, timeout=timeout_s)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


async def forward_to_controller(ctx: RequestContext, request: Any) -> Any | None:
    """The controller's answer to `request` (the same entity, passed on), or None when no
    other controller can be reached (the caller answers NOT_CONTROLLER; clients retry)."""
    channel = ctx.services.controller_channel
    if channel is None:
        return None
    try:
        return await channel.request(ctx.api_key, request, ctx.api_version)
    except Exception:  # noqa: BLE001 - the controller moved again, or is gone
        return None
