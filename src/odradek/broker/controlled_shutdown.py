"""Controlled shutdown: before a broker stops, the controller moves its leadership away.

On SIGTERM with `controlled.shutdown.enable` (cluster mode), the broker sends
ControlledShutdown to the controller (itself, when it is the controller) and waits until
its own metadata shows the moves, retrying `controlled.shutdown.max.retries` times
`controlled.shutdown.retry.backoff.ms` apart while partitions remain (another in-sync
replica may be catching up). Then it shuts down as usual: clients that were writing to it
find the new leaders through NOT_LEADER_OR_FOLLOWER and a metadata refresh, retriable
errors they handle, instead of waiting for its ZooKeeper session to expire.

The request is one frame on a fresh connection (the controller is one of ours): header v2,
ControlledShutdown v3 (protocol/legacy/controlled_shutdown.py).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import encode_request_header
from odradek.protocol.legacy import controlled_shutdown as codec

if TYPE_CHECKING:
    from odradek.broker.services import BrokerServices

log = logging.getLogger("odradek.broker.shutdown")
VERSION = 3
_SIZE = struct.Struct(">i")


async def ask_controller(
    host: str, port: int, broker_id: int, timeout_s: float = 30
) -> codec.ControlledShutdownResponse:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    try:
        header = encode_request_header(codec.API_KEY, VERSION, 1, f"broker-{broker_id}", True)
        body = codec.encode_request(VERSION, codec.ControlledShutdownRequest(broker_id))
        writer.write(_SIZE.pack(len(header) + len(body)) + header + body)
        await writer.drain()
        size = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), timeout_s))[0]
        frame = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        # response header v1: correlation id, then tagged fields (none)
        return codec.decode_response(VERSION, frame, 5)
    finally:
        writer.close()


async def controlled_shutdown(services: BrokerServices, retries: int, backoff_ms: int) -> bool:
    """True when this broker leads nothing that another in-sync replica could lead."""
    me = services.node_id
    for attempt in range(retries + 1):
        snap = services.snapshot
        controller = services.controller
        try:
            if controller is not None and controller.active:
                remaining = await controller.controlled_shutdown(me)
            else:
                target = snap.broker(snap.controller_id)
                if target is None:
                    raise ConnectionError("no controller known")
                resp = await ask_controller(target.host, target.port, me)
                if resp.error_code:
                    raise ConnectionError(f"controller {target.node_id}: {ErrorCode(resp.error_code).name}")
                remaining = list(resp.remaining_partitions)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ConnectionError) as e:
            log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, e)
        else:
            moved = await _seen_moved(services, set(remaining))
            if not remaining and moved:
                log.info("controlled shutdown: leadership moved away")
                return True
            log.info("controlled shutdown: %d partitions have no other in-sync replica yet", len(remaining))
        if attempt < retries:
            await asyncio.sleep(backoff_ms / 1000)
    log.warning("controlled shutdown did not complete; shutting down anyway")
    return False


async def _seen_moved(services: BrokerServices, remaining: set[tuple[str, int]], timeout_s: float = 5) -> bool:
    """Until this broker's metadata shows it leading only `remaining` (the controller's writes
    reach it through its own watches)."""
    me = services.node_id
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        snap = services.snapshot
        led = {(t.name, p.partition) for t in snap.topics.values() for p in t.partitions if p.leader == me}
        if led <= remaining:
            return True
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
