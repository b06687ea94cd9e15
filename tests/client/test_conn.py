"""Connection request timeouts against a peer that accepts and never answers (a real socket)."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.client.conn import Connection
from odradek.client.errors import RequestTimedOutError


async def _silent_server():
    got = []

    async def handle(reader, writer):
        while data := await reader.read(65536):
            got.append(data)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], got


def test_request_timeout_closes_the_connection():
    async def go():
        server, port, got = await _silent_server()
        async with server:
            conn = Connection("127.0.0.1", port, request_timeout_ms=300)
            t0 = time.monotonic()
            with pytest.raises(RequestTimedOutError, match="api_versions to 127.0.0.1"):
                await conn.connect()
            took = time.monotonic() - t0
            assert 0.25 < took < 5
            assert got, "the ApiVersions request reached the peer"
            assert not conn.connected and conn.in_flight == 0

    asyncio.run(go())


def test_cancelled_request_leaves_the_connection_usable_until_its_timeout():
    """A caller that gives up (cancellation) does not fail the other requests in flight; a
    request's own timeout does, since responses would arrive out of step."""
    async def go():
        server, port, _ = await _silent_server()
        async with server:
            conn = Connection("127.0.0.1", port, request_timeout_ms=400)
            # skip negotiation: connect the transport only
            loop = asyncio.get_running_loop()
            from odradek.client.conn import _Protocol

            conn._write_ok = asyncio.Event()
            conn._write_ok.set()
            await loop.create_connection(lambda: _Protocol(conn), "127.0.0.1", port)
            a = asyncio.ensure_future(conn.request(18, {"client_software_name": "t", "client_software_version": "1"},
                                                   version=3, timeout=0.2))
            b = asyncio.ensure_future(conn.request(18, {"client_software_name": "t", "client_software_version": "1"},
                                                   version=3, timeout=5))
            await asyncio.sleep(0.05)
            b.cancel()
            with pytest.raises(asyncio.CancelledError):
                await b
            assert conn.connected
            with pytest.raises(RequestTimedOutError):
                await a
            assert not conn.connected

    asyncio.run(go())
