"""The followers' fast path (broker/follower_fetch.py) keeps a connection's answers in request
order: a request it took and has not answered yet (a Fetch parked in the purgatory) holds back
the requests read after it, which the connection's processor answers once the fast path's
answer is sent. The real broker's services, a real socket pair; the Fetch itself is played by
a stand-in so that it stays parked until the test answers it."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from support.inprocess import InProcessBroker, socket_connection

from odradek.broker import follower_fetch


def _frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t" + body
    return struct.pack(">i", len(payload)) + payload


async def _answers(peer: socket.socket, wait_s: float) -> bytes:
    await asyncio.sleep(wait_s)
    try:
        return peer.recv(1 << 16)
    except BlockingIOError:
        return b""


def test_a_parked_fast_request_holds_back_the_next_one(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[object] = []

    class Parked:  # a follower's Fetch waiting in the purgatory
        version = 16

        def start(self) -> None:
            taken.append(self)

    monkeypatch.setattr(follower_fetch, "accept", lambda _conn, frame: Parked() if frame[:2] == b"\x00\x01" else None)

    async def main() -> None:
        async with InProcessBroker(tmp_path / "data") as b:
            async with socket_connection(b.services) as (conn, peer):
                await asyncio.sleep(0.05)  # the processor idle, waiting for a frame
                peer.sendall(_frame(1, 16, 7, b"a follower's fetch"))
                assert await _answers(peer, 0.1) == b"" and len(taken) == 1 and conn.in_flight
                peer.sendall(_frame(18, 0, 8))  # ApiVersions v0, read while the Fetch is parked
                assert await _answers(peer, 0.2) == b"", "answered before the request in front of it"
                conn.fast_answer(7, [b"fetched"], 7)
                got = await _answers(peer, 0.2)
                n, corr, tags = struct.unpack_from(">iib", got)
                assert (n, corr, tags, got[9:16]) == (12, 7, 0, b"fetched")
                rest = got[16:]
                (m, corr2) = struct.unpack_from(">ii", rest)
                assert corr2 == 8 and len(rest) == 4 + m, "the ApiVersions answer follows, whole"
                assert not conn.in_flight and len(taken) == 1

    asyncio.run(main())
