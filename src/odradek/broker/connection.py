"""One client connection: read frames, process requests one after another, write responses.

Concurrency (see docs/architecture.md): everything here runs on the broker's single
event loop. A readiness callback turns bytes into frames and queues them; a processor task
handles them strictly in order (as Kafka does), so responses go out in request
order while clients may pipeline. Reading pauses when `queued.max.requests` frames
are waiting. Writes go straight to the non-blocking socket; record bytes of Fetch
responses go with `os.sendfile` from the segment file, never through Python, except
small ones (INLINE_REGION_BYTES), which go in the same send as the response fields.

A malformed frame, an unknown API key or an unparseable request closes this
connection only; nothing here may raise into the server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from odradek.broker.connection_state import ConnectionState
from odradek.broker.registry import NO_RESPONSE, REGISTRY, RequestContext
from odradek.protocol import messages
from odradek.protocol.framing import FrameDecoder, FrameTooLarge, InvalidFrame
from odradek.protocol.headers import API_VERSIONS_KEY, InvalidHeader, parse_request_header, peek_header, response_header

if TYPE_CHECKING:
    from odradek.broker.services import BrokerServices

log = logging.getLogger("odradek.broker.connection")
_SIZE = struct.Struct(">i")


def _debug() -> bool:
    return log.isEnabledFor(logging.DEBUG)


class CloseConnection(Exception):
    """Raised while handling a request when the only right answer is to hang up."""


class Connection:
    _next_id = 0

    def __init__(self, services: BrokerServices, sock: socket.socket, peer: str, listener_name: str) -> None:
        Connection._next_id += 1
        self.id = Connection._next_id
        self.services = services
        self.state = ConnectionState(self.id, peer, listener_name)
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.loop = asyncio.get_running_loop()
        cfg = services.config
        self.decoder = FrameDecoder(cfg["socket.request.max.bytes"])
        self.max_queued = cfg["queued.max.requests"]
        self.queue: deque[bytes] = deque()
        self._waiter: asyncio.Future | None = None  # the processor, waiting for a frame
        self._reading = False
        self.closed = False
        self.eof = False
        self.in_flight = False
        self.last_active = time.monotonic()
        self.metrics = services.metrics

    # ------------------------------------------------------------------ tasks
    async def run(self) -> None:
        self._start_reading()
        try:
            await self._process_loop()
        finally:
            self.closed = True
            self._stop_reading()
            try:
                self.sock.close()
            except OSError:
                pass

    def stop(self) -> None:
        """Graceful shutdown: read nothing more; the request in flight completes."""
        self.queue.clear()
        self.closed = True
        self._stop_reading()
        self._wake()

    def sock_shutdown(self) -> None:
        """Wake a reader blocked in recv (it sees EOF) so the connection winds down."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ---------------------------------------------------------------- reading
    # The socket stays registered with the event loop while we read (one epoll
    # registration per connection, not one per recv as with loop.sock_recv) and the
    # readiness callback receives and frames the bytes itself: no task switch per read.
    def _start_reading(self) -> None:
        if not self._reading and not self.eof and not self.closed:
            self.loop.add_reader(self.fd, self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            try:
                self.loop.remove_reader(self.fd)
            except (OSError, ValueError):  # socket already closed
                pass

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    def _reader_done(self) -> None:
        self.eof = True
        self._stop_reading()
        self._wake()

    def _on_readable(self) -> None:
        if self.closed:
            self._reader_done()
            return
        try:
            data = self.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset, or shut down under us
            self._reader_done()
            return
        if not data:
            self._reader_done()
            return
        self.last_active = time.monotonic()
        queue = self.queue
        try:
            for frame in self.decoder.feed(data):
                queue.append(frame)
        except (FrameTooLarge, InvalidFrame) as e:
            log.warning("closing connection %s from %s: %s", self.id, self.peer, e)
            self.closed = True  # queued requests are dropped with the connection
            self._reader_done()
            return
        if queue:
            self._wake()
            if len(queue) >= self.max_queued:
                self._stop_reading()  # backpressure: resumed when the processor catches up

    async def _process_loop(self) -> None:
        queue = self.queue
        while not self.closed:
            if not queue:
                if self.eof:
                    return
                self._waiter = self.loop.create_future()
                await self._waiter
                continue
            frame = queue.popleft()
            if not self._reading and len(queue) < self.max_queued:
                self._start_reading()
            self.in_flight = True
            try:
                await self._handle_frame(frame)
            except CloseConnection as e:
                log.warning("closing connection %s from %s: %s", self.id, self.peer, e)
                return
            except OSError as e:
                log.debug("connection %s from %s lost while writing: %s", self.id, self.peer, e)
                return
            finally:
                self.in_flight = False

    # --------------------------------------------------------------- requests
    async def _handle_frame(self, frame: bytes) -> None:
        parsed = parse_frame(frame)
        if isinstance(parsed, bytes):  # a complete response already (ApiVersions fallback)
            await self._send([_SIZE.pack(len(parsed)) + parsed])
            return
        handler, header, request, flexible = parsed
        api_key, version, correlation_id = header.api_key, header.api_version, header.correlation_id
        ctx = RequestContext(self.services, self.state, api_key, version, correlation_id, header.client_id)
        started = time.perf_counter()
        if _debug():
            log.debug("conn %d %s: %s v%d corr %d", self.id, header.client_id, handler.name, version, correlation_id)
        try:
            response = await handler.fn(ctx, request)
        except CloseConnection:
            raise
        except Exception:
            log.exception(
                "%s v%d handler failed (connection %s, client %s)", handler.name, version, self.id, header.client_id
            )
            if self.metrics:
                self.metrics.request_error(handler.name)
            raise CloseConnection(f"internal error handling {handler.name}") from None
        if response is NO_RESPONSE:
            return
        head = response_header(correlation_id, flexible and api_key != API_VERSIONS_KEY)
        body, size = handler.encode_response(version, response)
        prefix = _SIZE.pack(len(head) + size) + head
        if len(body) == 1 and isinstance(body[0], bytes):
            chunks = [prefix + body[0]]
        else:
            chunks = [prefix, *body]
        await self._send(chunks)
        if _debug():
            log.debug(
                "conn %d: answered corr %d in %.1f ms", self.id, correlation_id, (time.perf_counter() - started) * 1000
            )
        if self.metrics:
            self.metrics.request_done(handler.name, time.perf_counter() - started)

    # ---------------------------------------------------------------- writing
    async def _send(self, chunks: list[Any]) -> None:
        if len(chunks) > 1:
            small = _inline_small_regions(chunks)
            if small is not None:
                await self._sendall(small)
                return
        pending: list[bytes] = []
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                pending.append(chunk)
                continue
            if pending:
                await self._sendall(b"".join(pending))
                pending = []
            await self._sendfile(chunk.fd, chunk.position, chunk.length)
        if pending:
            await self._sendall(pending[0] if len(pending) == 1 else b"".join(pending))

    async def _sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
            except BlockingIOError:
                await self._writable()
                continue
            view = view[n:]

    async def _sendfile(self, fd: int, position: int, length: int) -> None:
        end = position + length
        while position < end:
            try:
                sent = os.sendfile(self.fd, fd, position, end - position)
            except BlockingIOError:
                await self._writable()
                continue
            if sent == 0:
                # The file is shorter than the region we promised: the response can't be completed.
                raise CloseConnection("segment file shrank under a fetch")
            position += sent

    def _writable(self) -> asyncio.Future:
        fut = self.loop.create_future()

        def ready() -> None:
            self.loop.remove_writer(self.fd)
            if not fut.done():
                fut.set_result(None)

        self.loop.add_writer(self.fd, ready)
        fut.add_done_callback(lambda f: self.loop.remove_writer(self.fd) if f.cancelled() else None)
        return fut


# File regions of a response totalling at most this many bytes are read into memory and sent
# with the rest of the response in one send: for a small Fetch (a consumer that is caught up
# gets a batch or two) one pread + one send costs less than send + sendfile + send, and the
# client gets one segment instead of three (measured in docs/benchmarks.md, "e2e").
# Larger regions go with sendfile, never through Python.
INLINE_REGION_BYTES = 16384


def _inline_small_regions(chunks: list[Any]) -> bytes | None:
    file_bytes = 0
    for chunk in chunks:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            file_bytes += chunk.length
            if file_bytes > INLINE_REGION_BYTES:
                return None
    if not file_bytes:
        return None
    out = []
    for chunk in chunks:
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            out.append(chunk)
        else:
            data = os.pread(chunk.fd, chunk.length, chunk.position)
            if len(data) != chunk.length:
                raise CloseConnection("segment file shrank under a fetch")
            out.append(data)
    return b"".join(out)


def parse_frame(frame: bytes) -> tuple[Any, Any, Any, bool] | bytes:
    """A request frame -> (handler, header, request, flexible), or the bytes of a
    complete response for requests answered without a handler.

    Raises CloseConnection for anything that can't be answered. Pure: no I/O, so it
    can be fuzzed directly.
    """
    try:
        api_key, version, correlation_id = peek_header(frame)
    except InvalidHeader as e:
        raise CloseConnection(f"malformed request header: {e}") from None
    handler = REGISTRY.get(api_key)
    if handler is None:
        raise CloseConnection(f"unknown API key {api_key}")
    if api_key == API_VERSIONS_KEY and version > handler.max_version:
        # KIP-511: answer in the v0 layout with our own range, header v0.
        from odradek.broker.handlers.k18_api_versions import unsupported_version_response

        return response_header(correlation_id, False) + unsupported_version_response()
    if not handler.advertised_min <= version <= handler.max_version:
        raise CloseConnection(f"unsupported version {version} of {handler.name}")
    legacy = version < handler.min_version
    flexible = not legacy and messages.is_flexible(api_key, version)
    try:
        header = parse_request_header(frame, flexible)
    except InvalidHeader as e:
        raise CloseConnection(f"malformed {handler.name} v{version} header: {e}") from None
    try:
        decode = handler.request_decoder(version)
        if decode is not None:
            request = decode(version, frame, header.size)
        else:
            request = messages.decode_request(api_key, version, frame, header.size)
    except Exception as e:  # kio raises ValueError/IndexError/OverflowError... on malformed bodies
        raise CloseConnection(f"malformed {handler.name} v{version} request: {type(e).__name__}: {e}") from None
    return handler, header, request, flexible
