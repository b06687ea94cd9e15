"""A broker in the test's own process and event loop, for tests of the broker's middle.

`InProcessBroker` runs the real `Broker` (real storage in a temporary directory, the real
metadata store, replica manager, coordinator and handlers; its listener bound to a free
loopback port) and lets a test call any API directly, as a connection would: the request
entity is built from keyword fields (kio), the handler runs with a real RequestContext, and
the response goes through the handler's own codec for that version (what would be sent)
and is read back with kio's response reader, so a test sees exactly what a client would.

    async with InProcessBroker(tmp_path, {"num.partitions": "3"}) as b:
        r = await b.call(3, 12, topics=None)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from odradek.broker.config import BrokerConfig
from odradek.broker.connection import Connection
from odradek.broker.connection_state import ConnectionState
from odradek.broker.registry import NO_RESPONSE, RequestContext, load_handlers, make
from odradek.broker.server import Broker
from odradek.broker.services import BrokerServices
from odradek.broker.transport import PlaintextTransport
from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header
from odradek.storage import FileSystem

NO_ANSWER = NO_RESPONSE


class InProcessBroker:
    def __init__(
        self, directory: str | os.PathLike, overrides: dict[str, str] | None = None, *, fs: FileSystem | None = None
    ) -> None:
        self.directory = Path(directory)
        raw = {"log.dirs": str(self.directory), "listeners": "PLAINTEXT://127.0.0.1:0"}
        raw.update(overrides or {})
        self.config = BrokerConfig(raw)
        self.broker = Broker(self.config, fs=fs)
        self._services: BrokerServices | None = None
        self._connection_ids = 0

    @property
    def services(self) -> BrokerServices:
        assert self._services is not None, "not started"
        return self._services

    async def start(self) -> InProcessBroker:
        self._services = await self.broker.start()
        return self

    async def stop(self) -> None:
        await self.broker.stop()

    async def __aenter__(self) -> InProcessBroker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def connection(self, peer: str = "127.0.0.1:5555") -> ConnectionState:
        self._connection_ids += 1
        return ConnectionState(self._connection_ids, peer)

    async def call(
        self,
        api_key: int,
        version: int,
        *,
        client_id: str = "cli",
        connection: ConnectionState | None = None,
        **fields: Any,
    ) -> Any:
        """Run one request through its handler and codec; the response as kio decodes it
        (NO_ANSWER when none is sent)."""
        handler = load_handlers()[api_key]
        request = make(messages.request_class(api_key, version), **fields)
        # the bytes a client would send (the produce quota charges them), as a frame holds them
        flexible = messages.is_flexible(api_key, version)
        size = len(encode_request_header(api_key, version, 1, client_id, flexible)) + len(messages.encode(request))
        ctx = RequestContext(self.services, connection or self.connection(), api_key, version, 1, client_id, size)
        response = await handler.fn(ctx, request)
        if response is NO_RESPONSE:
            return NO_ANSWER
        chunks, size = handler.encode_response(version, response)
        body = b"".join(c if isinstance(c, bytes | bytearray | memoryview) else _read_region(c) for c in chunks)
        assert len(body) == size, f"{handler.name} v{version}: encoder said {size} bytes, wrote {len(body)}"
        return messages.decode_response(api_key, version, body)


def _read_region(region: Any) -> bytes:
    return os.pread(region.fd, region.length, region.position)


@contextlib.asynccontextmanager
async def socket_connection(services: Any) -> AsyncIterator[tuple[Connection, socket.socket]]:
    """A broker Connection serving one end of a socket pair, running; the test's end (non-blocking)
    to send frames on and read answers from. Stopped and both ends closed at the end."""
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.setblocking(False)
    conn = Connection(
        services, PlaintextTransport(ours, asyncio.get_running_loop()), "peer:1", "PLAINTEXT", "PLAINTEXT"
    )
    task = asyncio.ensure_future(conn.run())
    try:
        yield conn, peer
    finally:
        conn.stop()
        conn.sock_shutdown()
        await asyncio.wait_for(task, 5)
        peer.close()
