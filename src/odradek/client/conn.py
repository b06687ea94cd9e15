"""One TCP connection to one broker: framing, correlation ids, pipelined in-flight requests.

Requests are written as soon as they are made; responses come back in the order the
requests were sent (Kafka guarantees FIFO per connection), so the in-flight queue is a
deque and each response must carry the correlation id at its head. On connect the
connection negotiates versions with ApiVersions: for each API it uses the highest version
both the broker and kio (and the client's own cap) know.

A request that times out closes the connection (as the Java client does): everything
still in flight fails with `RequestTimedOutError` or `KafkaConnectionError`, and the
cluster layer refreshes metadata and reconnects.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from odradek.protocol import messages
from odradek.protocol.errors import KafkaError, error_class
from odradek.protocol.fetch_codec import DECODE_MAX_VERSION as FETCH_DECODE_MAX
from odradek.protocol.fetch_codec import decode_fetch_response
from odradek.protocol.framing import FrameError, FrameReader
from odradek.protocol.headers import encode_request_header

from . import _wire
from .errors import KafkaConnectionError, RequestTimedOutError, UnsupportedVersionError

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
API_VERSIONS = 18
FETCH = 1
_SASL_APIS = (17, 36)  # SaslHandshake, SaslAuthenticate: the only requests sent while re-authenticating

# Versions whose layout or meaning the client code does not handle (topic ids in
# Produce/Fetch v13+, batched OffsetFetch/FindCoordinator, ...): never go above these.
CLIENT_MAX_VERSION = {
    0: 11,  # Produce
    1: 12,  # Fetch (v13+ addresses topics by id)
    2: 8,  # ListOffsets
    3: 12,  # Metadata
    8: 8,  # OffsetCommit
    9: 7,  # OffsetFetch (v8+ batches groups)
    10: 3,  # FindCoordinator (v4+ batches keys)
    # Group APIs: the last fixed-layout versions. librdkafka's mock cluster advertises the
    # flexible ones but drops the connection on them; they add nothing the client uses.
    11: 5,  # JoinGroup
    12: 3,  # Heartbeat
    13: 3,  # LeaveGroup
    14: 3,  # SyncGroup
    15: 5,  # DescribeGroups
    16: 4,  # ListGroups
    22: 4,  # InitProducerId (v5+ is KIP-939's two-phase commit)
    # Transactions as "transaction version 1": the client adds partitions itself (AddPartitionsToTxn
    # v4+ is the brokers' batched verification; EndTxn v5+, TxnOffsetCommit v5+ and AddOffsetsToTxn
    # v5+ mean transaction version 2, where the broker bumps the epoch at every EndTxn).
    24: 3,  # AddPartitionsToTxn
    25: 4,  # AddOffsetsToTxn
    26: 4,  # EndTxn
    28: 4,  # TxnOffsetCommit
}
# Versions below these do not exist in kio or in any broker we care about.
CLIENT_MIN_VERSION = {1: 4}
_SCRATCH = 256 * 1024  # receive buffer for small frames (larger ones get their own)
_SPARE_MAX = 64 * 1024 * 1024  # large-frame buffers up to this size are kept for reuse (at most 2)


@dataclass(frozen=True, slots=True)
class HandWrittenCodec:
    """How to talk an API kio has no schema for (ControlledShutdown, which Kafka 4 dropped):
    the request goes as an already encoded body with header v2 when `flexible` (else v1), and
    `decode(version, frame, offset)` reads the response from after its header."""

    flexible: bool
    decode: Callable[[int, Any, int], Any]


class Connection:
    """An asyncio connection to one broker."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str = "odradek",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        max_frame_size: int = 256 * 1024 * 1024,
        ssl_context: ssl.SSLContext | None = None,
        authenticate: Callable[[Connection], Awaitable[int | None]] | None = None,
    ) -> None:
        self.host = host
        self.ssl_context = ssl_context  # TLS (security.protocol SSL): client/tls.py
        self._authenticate = authenticate  # SASL (client/sasl.py), after ApiVersions
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.max_frame_size = max_frame_size
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._versions: dict[int, int] = {}
        self._transport: asyncio.Transport | None = None
        self._in_flight: collections.deque = collections.deque()
        self._corr = 0
        # Reading (asyncio.BufferedProtocol: the transport receives straight into the reader's
        # memory). Small frames gather in a scratch buffer; a frame larger than it gets a buffer
        # of its own that the socket fills directly, kept for reuse once nothing refers to it
        # (a Fetch response's records are views of it until the consumer has decoded them).
        self._reader = FrameReader(
            max_frame_size, min_frame_size=4, scratch_size=_SCRATCH, spare_count=2, spare_max_size=_SPARE_MAX
        )
        self._closed_exc: BaseException | None = None
        self._write_ok: asyncio.Event | None = None
        self._close_callbacks: list = []
        # KIP-368: requests made while the connection re-authenticates wait here (written after)
        self._held: list[tuple[bytes, bytes, tuple | None]] | None = None
        self._reauth_timer: asyncio.TimerHandle | None = None
        self.reauthentications = 0

    def __repr__(self) -> str:
        return f"<Connection node={self.node_id} {self.host}:{self.port}>"

    # ------------------------------------------------------------------ lifecycle
    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed_exc is None

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered, with those held while re-authenticating."""
        return len(self._in_flight) + (len(self._held) if self._held else 0)

    def on_close(self, cb) -> None:
        self._close_callbacks.append(cb)

    async def connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        self._write_ok = asyncio.Event()
        self._write_ok.set()
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Protocol(self),
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context is not None else None,
                ),
                self.connect_timeout,
            )
        except (TimeoutError, OSError) as e:
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {e!r}") from None
        try:
            await self._negotiate()
        except BaseException:
            self.close(KafkaConnectionError("ApiVersions negotiation failed"))
            raise
        if self._authenticate is not None:
            try:
                lifetime_ms = await self._authenticate(self)
            except BaseException as e:
                self.close(KafkaConnectionError(f"SASL authentication failed: {e}"))
                raise
            self._schedule_reauthentication(lifetime_ms)
        return self

    def _schedule_reauthentication(self, lifetime_ms: int | None) -> None:
        """KIP-368: re-authenticate at 85-95 % of the session lifetime the broker gave (as Java's
        client), before the broker closes the connection at its end."""
        if lifetime_ms and lifetime_ms > 0 and self._closed_exc is None:
            delay = lifetime_ms / 1000 * (0.85 + 0.1 * random.random())
            self._reauth_timer = asyncio.get_running_loop().call_later(delay, self._begin_reauthentication)

    def _begin_reauthentication(self) -> None:
        self._reauth_timer = None
        if self._closed_exc is None and self._authenticate is not None:
            self._held = []
            asyncio.get_running_loop().create_task(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        """SaslHandshake and SaslAuthenticate on this connection, behind the requests in flight
        (answered in order, so none is lost); requests made meanwhile are written after it."""
        assert self._authenticate is not None
        try:
            lifetime_ms = await self._authenticate(self)
        except BaseException as e:
            self._held = None
            self.close(KafkaConnectionError(f"SASL re-authentication failed: {e}"))
            if not isinstance(e, Exception):
                raise
            return
        held, self._held = self._held or [], None
        self.reauthentications += 1
        t = self._transport
        if t is not None:
            for head, body, entry in held:
                t.write(head)
                t.write(body)
                if entry is not None:
                    self._in_flight.append(entry)
        self._schedule_reauthentication(lifetime_ms)

    async def _negotiate(self) -> None:
        lo, hi = messages.schema_versions(API_VERSIONS)
        version = min(hi, 3)
        data = {"client_software_name": "odradek-python", "client_software_version": "0.1.0"}
        for _attempt in range(4):
            resp = await self.request(API_VERSIONS, data, version=version)
            code = int(resp.error_code)
            if code == 35:  # UNSUPPORTED_VERSION: the v0 layout carries the broker's range
                theirs = {int(k.api_key): int(k.max_version) for k in resp.api_keys}
                version = min(theirs.get(API_VERSIONS, version - 1), version - 1)
                if version < 0:
                    break
                continue
            if code:
                raise error_class(code)(f"ApiVersions from {self.host}:{self.port}")
            self.api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
            self._versions.clear()
            return
        raise UnsupportedVersionError(f"{self.host}:{self.port}: cannot agree on an ApiVersions version")

    def version(self, api_key: int) -> int:
        """The highest version of `api_key` both sides support."""
        v = self._versions.get(api_key)
        if v is not None:
            return v
        broker = self.api_versions.get(api_key)
        mine = messages.schema_versions(api_key)
        if broker is None or mine is None:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} does not support {messages.api_name(api_key)}"
            )
        hi = min(broker[1], mine[1], CLIENT_MAX_VERSION.get(api_key, mine[1]))
        lo = max(broker[0], mine[0], CLIENT_MIN_VERSION.get(api_key, 0))
        if hi < lo:
            raise UnsupportedVersionError(
                f"no common version of {messages.api_name(api_key)}: broker {broker}, client {lo}..{hi}"
            )
        self._versions[api_key] = hi
        return hi

    def supports(self, api_key: int) -> bool:
        try:
            self.version(api_key)
            return True
        except UnsupportedVersionError:
            return False

    def close(self, exc: BaseException | None = None) -> None:
        if self._closed_exc is None:
            self._closed_exc = exc or KafkaConnectionError(f"connection to {self.host}:{self.port} closed")
        t, self._transport = self._transport, None
        if t is not None:
            t.close()
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
        err = self._closed_exc
        held, self._held = self._held or [], None
        for _head, _body, entry in held:
            if entry is not None and not entry[3].done():
                entry[3].set_exception(_copy_exc(err))
                entry[3].exception()
        while self._in_flight:
            entry = self._in_flight.popleft()
            fut = entry[3]
            if fut is not None and not fut.done():
                fut.set_exception(_copy_exc(err))
                fut.exception()  # awaiters still see it; nobody left waiting is not an error
        if self._write_ok is not None:
            self._write_ok.set()
        cbs, self._close_callbacks = self._close_callbacks, []
        for cb in cbs:
            try:
                cb(self)
            except Exception:  # pragma: no cover - callbacks must not break close
                log.exception("connection close callback failed")

    # ------------------------------------------------------------------ requests
    def send(
        self,
        api_key: int,
        data: Any,
        *,
        version: int | None = None,
        expect_response: bool = True,
        codec: HandWrittenCodec | None = None,
    ) -> asyncio.Future | None:
        """Write one request now; the future resolves to the decoded response entity.
        `data`: a dict of fields, an entity, or the encoded body (bytes) when `version` is given
        (and must be, with a hand-written `codec`)."""
        if self._closed_exc is not None or self._transport is None:
            raise _copy_exc(self._closed_exc or KafkaConnectionError(f"{self.host}:{self.port} not connected"))
        if version is None:
            version = self.version(api_key)
        if isinstance(data, bytes):  # already encoded for `version` (the producer's Produce bodies)
            body = data
        else:
            entity = data if not isinstance(data, dict) else _wire.request(api_key, version, data)
            body = messages.encode(entity)
        flexible = codec.flexible if codec is not None else messages.is_flexible(api_key, version)
        self._corr = corr = (self._corr + 1) & 0x7FFFFFFF
        header = encode_request_header(api_key, version, corr, self.client_id, flexible)
        head = _I32.pack(len(header) + len(body)) + header
        fut = asyncio.get_running_loop().create_future() if expect_response else None
        entry = (corr, api_key, version, fut, codec) if expect_response else None
        if self._held is not None and api_key not in _SASL_APIS:  # re-authenticating: written after
            self._held.append((head, body, entry))
            return fut
        t = self._transport
        t.write(head)
        t.write(body)
        if entry is not None:
            self._in_flight.append(entry)
        return fut

    async def request(
        self,
        api_key: int,
        data: Any,
        *,
        version: int | None = None,
        timeout: float | None = None,
        codec: HandWrittenCodec | None = None,
    ) -> Any:
        """Send and await the response. A timeout closes the connection (the response would
        arrive out of step with the next ones), failing this and every other request on it.
        A timer on the future rather than `wait_for`, which costs a Task per request."""
        fut = self.send(api_key, data, version=version, codec=codec)
        timer = fut.get_loop().call_later(timeout or self.request_timeout, self._expire, fut, api_key)
        try:
            return await fut
        finally:
            timer.cancel()

    def _expire(self, fut: asyncio.Future, api_key: int) -> None:
        if not fut.done():
            self.close(RequestTimedOutError(f"{messages.api_name(api_key)} to {self.host}:{self.port} timed out"))

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self._write_ok is not None and not self._write_ok.is_set():
            await self._write_ok.wait()

    # ------------------------------------------------------------------ reading
    def _frames_received(self, bad: FrameError | None = None) -> None:
        """Answer the whole frames the reader holds, in order; then, after a bad frame size, close."""
        frames = self._reader.frames
        while frames:
            frame = frames.popleft()
            try:
                self._handle_frame(frame)
            finally:
                if type(frame) is memoryview:
                    # A large frame's buffer is reused once no view of it is left: what the
                    # response keeps (Fetch records) holds it, this view must not.
                    frame.release()
            if self._closed_exc is not None:
                return
        if bad is not None:
            self.close(KafkaConnectionError(f"bad frame size {bad.size} from {self.host}:{self.port}"))

    def _handle_frame(self, frame: bytes) -> None:
        (corr,) = _I32.unpack_from(frame, 0)
        if not self._in_flight:
            self.close(KafkaConnectionError(f"unexpected response {corr} from {self.host}:{self.port}"))
            return
        expected, api_key, version, fut, codec = self._in_flight.popleft()
        if corr != expected:
            self.close(
                KafkaConnectionError(
                    f"correlation id mismatch from {self.host}:{self.port}: got {corr}, expected {expected}"
                )
            )
            if not fut.done():
                fut.set_exception(KafkaConnectionError("correlation id mismatch"))
            return
        pos = 4
        if codec is not None:
            if codec.flexible:
                pos = _skip_tagged(frame, pos)
        elif api_key != API_VERSIONS and messages.is_flexible(api_key, version):
            pos = _skip_tagged(frame, pos)
        if fut.done():  # cancelled or timed out by the caller
            return
        try:
            if codec is not None:
                resp = codec.decode(version, frame, pos)
            elif api_key == API_VERSIONS and version > 0 and len(frame) >= 6 and frame[4:6] == b"\x00\x23":
                # KIP-511 says the v0 layout; some brokers (librdkafka's mock) answer otherwise
                try:
                    resp = messages.decode_response(API_VERSIONS, 0, frame, pos)
                except Exception:
                    resp = _UnsupportedApiVersions()
            elif api_key == FETCH and version <= FETCH_DECODE_MAX:
                # records stay in the frame (memoryviews): the consumer decodes them from there
                resp = decode_fetch_response(version, frame, pos)
            else:
                resp = messages.decode_response(api_key, version, frame, pos)
        except Exception as e:
            # The frame was whole, so the connection stays usable. Group APIs start with
            # throttle_time + error_code: brokers that send nulls in error answers (librdkafka's
            # mock: SyncGroup assignment = null) still tell us the error that way.
            code = 0
            if api_key in (11, 12, 13, 14) and version >= (2 if api_key == 11 else 1) and len(frame) >= pos + 6:
                code = struct.unpack_from(">h", frame, pos + 4)[0]
            if code:
                fut.set_exception(error_class(code)(f"{messages.api_name(api_key)} from {self.host}:{self.port}"))
            else:
                fut.set_exception(KafkaError(f"cannot decode {messages.api_name(api_key)} v{version} response: {e!r}"))
            return
        fut.set_result(resp)


class _UnsupportedApiVersions:
    error_code = 35
    api_keys = ()


def _skip_tagged(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _copy_exc(exc: BaseException) -> BaseException:
    try:
        return type(exc)(*exc.args)
    except Exception:
        return exc


class _Protocol(asyncio.BufferedProtocol):
    __slots__ = ("conn", "reader")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.reader = conn._reader

    def connection_made(self, transport) -> None:
        self.conn._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        reader = self.reader
        try:
            reader.buffer_updated(nbytes)
        except FrameError as e:  # the frames before it are still answered
            self.conn._frames_received(e)
            return
        if reader.frames:  # most reads of a large frame complete none
            self.conn._frames_received()

    def connection_lost(self, exc) -> None:
        self.conn.close(
            KafkaConnectionError(
                f"connection to {self.conn.host}:{self.conn.port} lost" + (f": {exc!r}" if exc else "")
            )
        )

    def pause_writing(self) -> None:
        if self.conn._write_ok is not None:
            self.conn._write_ok.clear()

    def resume_writing(self) -> None:
        if self.conn._write_ok is not None:
            self.conn._write_ok.set()
