"""Small helpers shared by the group API handlers (broker/handlers/k08..k47)."""

from __future__ import annotations

from typing import Any

from odradek.protocol.errors import ErrorCode

NOT_AVAILABLE = int(ErrorCode.coordinator_not_available)
UNKNOWN_OPERATIONS = -2147483648
# READ(3), DELETE(6), DESCRIBE(8): what a group grants without an authorizer.
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


def coordinator(ctx: Any) -> Any:
    """The broker's GroupCoordinator, or None while it is not there."""
    return getattr(ctx.broker, "group_coordinator", None)


def client_host(ctx: Any) -> str:
    """Kafka's client host form: "/" + the peer address."""
    peer = ctx.peer or ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def nested(ctx: Any, class_name: str, **fields: Any) -> Any:
    """Like ctx.nested, but a field may be called `name` (topic entries)."""
    from odradek.broker.registry import make

    return make(getattr(ctx.module, class_name), **fields)
