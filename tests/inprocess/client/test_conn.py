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
            a = asyncio.ensure_future(
                conn.request(18, {"client_software_name": "t", "client_software_version": "1"}, version=3, timeout=0.2)
            )
            b = asyncio.ensure_future(
                conn.request(18, {"client_software_name": "t", "client_software_version": "1"}, version=3, timeout=5)
            )
            await asyncio.sleep(0.05)
            b.cancel()
            with pytest.raises(asyncio.CancelledError):
                await b
            assert conn.connected
            with pytest.raises(RequestTimedOutError):
                await a
            assert not conn.connected

    asyncio.run(go())


# --------------------------------------------------------------------------- framing
def _api_versions_v0(corr: int, n_entries: int) -> bytes:
    """A whole ApiVersions v0 response frame listing `n_entries` made-up APIs."""
    import struct

    body = struct.pack(">ih i", corr, 0, n_entries) + b"".join(
        struct.pack(">hhh", i % 30000, 0, i % 7) for i in range(n_entries)
    )
    return struct.pack(">i", len(body)) + body


async def _scripted_server(n_requests: int, chunks_of):
    """Reads `n_requests` request frames, then writes their responses (sizes from
    `sizes`) in the pieces `chunks_of(all_bytes)` gives, with a pause between pieces."""
    import struct

    async def handle(reader, writer):
        corrs = []
        while len(corrs) < n_requests:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            frame = await reader.readexactly(size)
            corrs.append(struct.unpack_from(">i", frame, 4)[0])
        data = b"".join(_api_versions_v0(c, handle.sizes[i]) for i, c in enumerate(corrs))
        for piece in chunks_of(data):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.001)
        await reader.read()  # until the client closes

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], handle


async def _raw_connection(port: int) -> Connection:
    from odradek.client.conn import _Protocol

    conn = Connection("127.0.0.1", port, request_timeout_ms=10000)
    conn._write_ok = asyncio.Event()
    conn._write_ok.set()
    await asyncio.get_running_loop().create_connection(lambda: _Protocol(conn), "127.0.0.1", port)
    return conn


@pytest.mark.parametrize("how", ["one write", "byte by byte", "uneven pieces", "cut past each frame"])
def test_responses_framed_whatever_the_segmentation(how):
    """Small and large (past the 256 KiB scratch buffer) responses, back to back, arrive
    whole and in order however the bytes are cut up on the wire."""
    import random

    # 60000 entries = 360 KB frames; the later large ones land in reused (larger) buffers
    sizes = [1, 3, 60000, 2, 70000, 0, 5, 65000, 50000, 1]
    if how == "byte by byte":
        sizes = [1, 3, 2, 0, 5, 40]  # small frames only: a byte per write is slow

    def chunks_of(data: bytes):
        if how == "one write":
            return [data]
        if how == "byte by byte":
            return [data[i : i + 1] for i in range(len(data))]
        if how == "cut past each frame":  # every read ends 6 bytes into the next frame
            import struct

            cuts, i = [], 0
            while i < len(data):
                i += 4 + struct.unpack_from(">i", data, i)[0]
                cuts.append(min(i + 6, len(data)))
            return [data[a:b] for a, b in zip([0] + cuts, cuts)]
        rnd = random.Random(7)
        out, i = [], 0
        while i < len(data):
            n = rnd.choice([1, 3, 4, 5, 17, 4096, 65536, 300000])
            out.append(data[i : i + n])
            i += n
        return out

    async def go():
        server, port, handle = await _scripted_server(len(sizes), chunks_of)
        handle.sizes = sizes
        async with server:
            conn = await _raw_connection(port)
            futs = [asyncio.ensure_future(conn.request(18, {}, version=0)) for _ in sizes]
            resps = await asyncio.gather(*futs)
            assert [len(r.api_keys) for r in resps] == sizes
            for r, n in zip(resps, sizes):
                if n:
                    last = r.api_keys[-1]
                    assert (int(last.api_key), int(last.max_version)) == ((n - 1) % 30000, (n - 1) % 7)
            assert conn.connected and conn.in_flight == 0
            conn.close(None)

    asyncio.run(go())


def test_bad_frame_size_closes_the_connection_with_a_clear_error():
    import struct

    from odradek.client.errors import KafkaConnectionError

    async def go():
        server, port, handle = await _scripted_server(1, lambda data: [struct.pack(">i", -5) + data])
        handle.sizes = [1]
        async with server:
            conn = await _raw_connection(port)
            with pytest.raises(KafkaConnectionError, match="bad frame size -5"):
                await conn.request(18, {}, version=0)
            assert not conn.connected

    asyncio.run(go())


def test_a_fetch_response_keeps_its_records_while_later_ones_arrive():
    """Fetch responses' records are views of the receive buffer; a buffer is reused only when
    nothing refers to it, so a response still held keeps its bytes when the next large one
    (answering a pipelined request) arrives."""
    import struct
    import uuid

    from odradek.protocol.fetch_codec import PartitionResult, TopicResult, encode_fetch_response

    payloads = [bytes([65 + i]) * 400_000 for i in range(3)]

    async def handle(reader, writer):
        corrs = []
        while len(corrs) < len(payloads):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            corrs.append(struct.unpack_from(">i", await reader.readexactly(size), 4)[0])
        out = b""
        for corr, data in zip(corrs, payloads):
            chunks, _ = encode_fetch_response(
                4, [TopicResult("t", uuid.UUID(int=0), [PartitionResult(0, records=[data])])]
            )
            body = struct.pack(">i", corr) + b"".join(chunks)
            out += struct.pack(">i", len(body)) + body
        writer.write(out)
        await writer.drain()
        await reader.read()

    fetch = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "rack_id": "",
        "forgotten_topics_data": [],
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "last_fetched_epoch": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
    }

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        async with server:
            conn = await _raw_connection(server.sockets[0].getsockname()[1])
            resps = await asyncio.gather(*[conn.request(1, fetch, version=4) for _ in payloads])
            got = [bytes(r.responses[0].partitions[0].records) for r in resps]
            assert got == payloads
            conn.close(None)

    asyncio.run(go())


# --------------------------------------------------------------------------- negotiation
def test_api_versions_falls_back_and_each_api_uses_the_highest_common_version():
    """A broker that knows ApiVersions only up to v2 answers our v3 with UNSUPPORTED_VERSION in
    the v0 layout (its range inside); the client asks again at v2, then uses for every API the
    highest version both sides support, and refuses an API with no common version."""
    import struct

    from odradek.client.errors import UnsupportedVersionError
    from odradek.protocol import messages

    # (api_key, min, max) as this made-up broker advertises them
    advertised = [(0, 0, 7), (1, 4, 20), (2, 0, 30), (3, 0, 5), (18, 0, 2), (19, 2, 3), (32, 9, 12)]
    asked = []

    def entries(rows):
        return struct.pack(">i", len(rows)) + b"".join(struct.pack(">hhh", *r) for r in rows)

    async def handle(reader, writer):
        while True:
            try:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
            except asyncio.IncompleteReadError:
                return
            frame = await reader.readexactly(size)
            key, version, corr = struct.unpack_from(">hhi", frame)
            asked.append((key, version))
            if version > 2:  # v0 layout: error, the broker's ApiVersions range
                body = struct.pack(">ih", corr, 35) + entries([(18, 0, 2)])
            else:
                body = struct.pack(">ih", corr, 0) + entries(advertised) + struct.pack(">i", 0)
            writer.write(struct.pack(">i", len(body)) + body)

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        async with server:
            conn = Connection("127.0.0.1", server.sockets[0].getsockname()[1], request_timeout_ms=5000)
            await conn.connect()
            conn.close()
            await asyncio.sleep(0.05)  # the handler sees the close before the server goes
        return conn

    conn = asyncio.run(go())
    assert asked == [(18, 3), (18, 2)]
    ours = {k: messages.schema_versions(k)[1] for k, _lo, _hi in advertised}
    assert conn.version(0) == min(7, ours[0])  # the broker's max is lower
    assert conn.version(1) == 12  # Fetch v13+ addresses topics by id: the client stops at 12
    assert conn.version(3) == 5
    assert conn.version(19) == min(3, ours[19])
    with pytest.raises(UnsupportedVersionError, match="join_group"):
        conn.version(11)  # not advertised
    assert ours[32] < 9  # DescribeConfigs: the broker's min is above what the client knows
    with pytest.raises(UnsupportedVersionError, match="no common version"):
        conn.version(32)
    assert conn.supports(2) and not conn.supports(11)
