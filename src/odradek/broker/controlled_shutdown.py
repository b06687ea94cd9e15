"""Controlled shutdown: before a broker stops, the controller moves its leadership away.

On SIGTERM with `controlled.shutdown.enable` (cluster mode), the broker sends
ControlledShutdown to the controller (itself, when it is the controller) and waits until
its own metadata shows the moves, retrying `controlled.shutdown.max.retries` times
`controlled.shutdown.retry.backoff.ms` apart while partitions remain (another in-sync
replica may be catching up). Then it shuts down as usual: clients that were writing to it
find the new leaders through NOT_LEADER_OR_FOLLOWER and a metadata refresh, retriable
errors they handle, instead of waiting for its ZooKeeper session to expire.

The request to another broker goes through the forwarding manager
(broker/interbroker/forwarding.py), on its connection to the controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.broker.interbroker.forwarding import ForwardingManager
    from odradek.cluster.controller import Controller
    from odradek.cluster.metadata import ClusterSnapshot

log = logging.getLogger("odradek.broker.shutdown")


async def controlled_shutdown(
    node_id: int,
    snapshot: Callable[[], ClusterSnapshot],
    controller: Controller,
    forwarding: ForwardingManager,
    retries: int,
    backoff_ms: int,
) -> bool:
    """True when this broker leads nothing that another in-sync replica could lead.
    `controller`: this broker's own (it serves the request itself when it is the active one)."""
    for attempt in range(retries + 1):
        try:
            if controller.active:
                remaining = await controller.controlled_shutdown(node_id)
            else:
                resp = await forwarding.controlled_shutdown()
                if resp.error_code:
                    raise ConnectionError(f"controller: {ErrorCode(resp.error_code).name}")
                remaining = list(resp.remaining_partitions)
        except (KafkaError, OSError) as e:  # no controller known, unreachable, timed out, moved
            log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, e)
        else:
            moved = await _seen_moved(node_id, snapshot, set(remaining))
            if not remaining and moved:
                log.info("controlled shutdown: leadership moved away")
                return True
            log.info("controlled shutdown: %d partitions have no other in-sync replica yet", len(remaining))
        if attempt < retries:
            await asyncio.sleep(backoff_ms / 1000)
    log.warning("controlled shutdown did not complete; shutting down anyway")
    return False


async def _seen_moved(
    node_id: int, snapshot: Callable[[], ClusterSnapshot], remaining: set[tuple[str, int]], timeout_s: float = 5
) -> bool:
    """Until this broker's metadata shows it leading only `remaining` (the controller's writes
    reach it through its own watches)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        snap = snapshot()
        led = {(t.name, p.partition) for t in snap.topics.values() for p in t.partitions if p.leader == node_id}
        if led <= remaining:
            return True
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
