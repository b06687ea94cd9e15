"""SSL listeners of a broker in this process (certificates: tests/support/tls_certs): the
odradek asyncio client over SSL and mutual TLS (a large fetch goes through the TLS file-region
path), the principal each connection gets, and bad input that must close only its connection:
a client without a certificate on a mutual-TLS listener, a certificate no mapping rule maps,
garbage, a plaintext request, a truncated handshake, a handshake never finished."""

from __future__ import annotations

import asyncio
import ssl
import struct
import time
import uuid
from pathlib import Path

import pytest
from support.inprocess import InProcessBroker

from odradek.client.aio import AIOAdmin, AIOConsumer, AIOProducer

CERTS = Path(__file__).resolve().parents[2] / "support" / "tls_certs"
IDLE_MS = 1500
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)  # size, key, version, correlation id, null client id


def _broker(tmp_path: Path) -> InProcessBroker:
    listener = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(CERTS / "ca.pem"),
    }
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "connections.max.idle.ms": str(IDLE_MS),
        **{f"listener.name.ssl.{k}": v for k, v in listener.items()},
        **{f"listener.name.mtls.{k}": v for k, v in listener.items()},
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=(.*?),O=odradek$/$1/U",
    }
    return InProcessBroker(tmp_path / "data", overrides)


def _port(b: InProcessBroker, listener: str) -> int:
    names = [n for n, _h, _p in b.config.listeners]
    return b.broker.bound[names.index(listener)][1]


def _client_settings(identity: str | None) -> dict[str, str]:
    settings = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(CERTS / "ca.pem"),
    }
    if identity:
        settings.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(CERTS / f"{identity}.keystore.pem")})
    return settings


def _context(identity: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(CERTS / "ca.pem"))
    if identity:
        ctx.load_cert_chain(str(CERTS / f"{identity}.keystore.pem"))
    return ctx


async def _api_versions(port: int, ctx: ssl.SSLContext) -> bytes:
    """ApiVersions v0 over TLS; the response frame, or b"" if the broker closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        writer.write(API_VERSIONS_V0)
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return b""
    finally:
        writer.close()


@pytest.mark.parametrize(("listener", "identity", "principal"), [("SSL", None, None), ("MTLS", "alice", "User:ALICE")])
def test_odradek_client_round_trip_over_tls(tmp_path, listener, identity, principal):
    async def main() -> None:
        async with _broker(tmp_path) as b:
            config = {"bootstrap.servers": f"127.0.0.1:{_port(b, listener)}", **_client_settings(identity)}
            topic = f"t-{uuid.uuid4().hex[:8]}"
            async with AIOAdmin(config=config) as admin:
                await admin.create_topic(topic, 2, 1)
            big = bytes(range(256)) * 3600  # 900 KiB: past INLINE_REGION_BYTES, in FILE_PIECE_BYTES pieces
            values = [b"small-%d" % i for i in range(100)] + [big, big]
            async with AIOProducer(config=config) as p:
                for i, v in enumerate(values):
                    await p.send(topic, v, key=b"k%d" % (i % 7))
                await p.flush()
            cfg = {**config, "group.id": "g", "auto.offset.reset": "earliest"}
            got: list = []
            async with AIOConsumer(topic, config=cfg) as c:
                deadline = time.monotonic() + 30
                while len(got) < len(values) and time.monotonic() < deadline:
                    got += await c.poll(0.5)
            assert sorted(r.value for r in got) == sorted(values)
            states = [c.state for c in b.broker.connections if c.state.listener_name == listener]
            assert states and {s.security_protocol for s in states} == {"SSL"}
            assert {s.principal for s in states} == {principal or "User:ANONYMOUS"}

    asyncio.run(main())


def test_mutual_tls_refuses_a_client_without_a_certificate_or_with_an_unmapped_one(tmp_path):
    async def main() -> None:
        async with _broker(tmp_path) as b:
            port = _port(b, "MTLS")
            assert await _api_versions(port, _context("alice"))
            assert await _api_versions(port, _context()) == b""
            assert await _api_versions(port, _context("mallory")) == b""  # CN=mallory,O=elsewhere: no rule
            assert await _api_versions(port, _context("alice"))

    asyncio.run(main())


async def _closed_within(port: int, data: bytes, seconds: float, *, half_close: bool = False) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if data:
            writer.write(data)
            await writer.drain()
        if half_close:
            writer.write_eof()
        try:
            while await asyncio.wait_for(reader.read(4096), seconds):
                pass
        except ConnectionResetError:
            pass
        return True
    except TimeoutError:
        return False
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("bad", "half_close"),
    [
        pytest.param(b"\x00\x01garbage\xff" * 200, False, id="garbage"),
        pytest.param(API_VERSIONS_V0, False, id="plaintext-request"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", True, id="truncated-client-hello"),
    ],
)
def test_bad_handshakes_close_that_connection_only(tmp_path, bad, half_close):
    async def main() -> None:
        async with _broker(tmp_path) as b:
            port = _port(b, "SSL")
            healthy_reader, healthy = await asyncio.open_connection("127.0.0.1", port, ssl=_context())
            assert await _closed_within(port, bad, 1.0, half_close=half_close)
            healthy.write(API_VERSIONS_V0)
            await healthy.drain()
            size = struct.unpack(">i", await healthy_reader.readexactly(4))[0]
            assert len(await healthy_reader.readexactly(size)) == size
            healthy.close()

    asyncio.run(main())


def test_a_handshake_never_finished_is_closed_after_connections_max_idle_ms(tmp_path):
    async def main() -> None:
        async with _broker(tmp_path) as b:
            port = _port(b, "SSL")
            started = time.monotonic()
            assert await _closed_within(port, b"", IDLE_MS / 1000 + 3)
            assert time.monotonic() - started >= IDLE_MS / 1000 - 0.2
            assert await _api_versions(port, _context())

    asyncio.run(main())
