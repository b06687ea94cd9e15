"""One client connection: the transport around the sans-IO protocol core.

The protocol itself (frames, request headers, decoding, the KIP-511 ApiVersions fallback,
the authentication gate, response framing) is `odradek.protocol.connection.ServerConnection`;
the bytes go through the transport it is given (broker/transport.py: plaintext with
sendfile, or TLS, built per socket by server.py's accept loop; the simulator
gives its own, odradek/testing/sim/net.py). What is left here is the driving: socket readiness, backpressure, in-order
processing, idle tracking, and handing each request to its handler.

Concurrency (see docs/architecture.md): everything here runs on the broker's single
event loop. A readiness callback receives straight into the protocol's buffer, which splits
the bytes into frames; a processor task takes them strictly in order (as Kafka does), so
responses go out in request order while clients may pipeline. Reading pauses when
`queued.max.requests` frames are waiting.

A malformed frame, an unknown API key or an unparseable request closes this
connection only; nothing here may raise into the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import struct
import time
from typing import TYPE_CHECKING

from odradek.broker import fast_produce, follower_fetch
from odradek.broker.connection_state import ANONYMOUS, ConnectionState
from odradek.broker.quotas.manager import REQUEST_QUOTA_EXEMPT, ClientQuotas, charging, user_of
from odradek.broker.registry import NO_RESPONSE, REGISTRY, RequestContext, load_handlers
from odradek.broker.security.sasl import SASL_PROTOCOLS, AuthenticationFailed, State
from odradek.broker.transport import INLINE_REGION_BYTES, CloseConnection, TlsTransport, Transport
from odradek.protocol.connection import (
    NEED_DATA,
    ImmediateResponse,
    ProtocolError,
    RequestReceived,
    SaslTokenReceived,
    ServedApi,
    ServerConnection,
)
from odradek.protocol.headers import response_header

if TYPE_CHECKING:
    from odradek.broker.services import BrokerServices

__all__ = ["INLINE_REGION_BYTES", "CloseConnection", "Connection", "served_apis"]

log = logging.getLogger("odradek.broker.connection")
_I32 = struct.Struct(">i").pack


_served: dict[int, ServedApi] | None = None


def served_apis() -> dict[int, ServedApi]:
    """The protocol's view of the handler registry: what each API key is served at."""
    global _served
    if _served is None or len(_served) != len(REGISTRY):
        _served = {
            h.api_key: ServedApi(
                h.advertised_min,
                h.min_version,
                h.max_version,
                {v: c.decode for v, c in h.codecs.items() if c.decode is not None},
                frozenset(v for v, c in h.codecs.items() if c.decode is not None and c.flexible),
            )
            for h in load_handlers().values()
        }
    return _served


def _abandoned(event: object) -> bool:
    """Is `event`, read before the peer closed the connection, a request its client gave up on?

    Its answer can no longer reach the client, which has counted it as failed (a client closes
    a connection to abandon what it sent there, e.g. at its request timeout) and may have sent
    a later request elsewhere since: running it now could undo that one (an offset commit
    landing after the commit the client retried on a new connection, simulator seed 13637).
    Kafka differs here on purpose: it reads a connection's next request once the one in flight
    is answered and still runs it after the close (tests/reference/test_closed_connection_reference.py).
    Only a Produce with acks=0 still runs: its client expects no answer and counted it as sent.
    """
    if isinstance(event, RequestReceived):
        return not (event.api_key == 0 and event.request.acks == 0)
    return True


def _with_throttle(response: object, throttle_ms: int) -> object:
    """The response with its throttle_time_ms at least `throttle_ms`: a kio entity's
    `throttle_time`, or the `throttle_ms` of Produce's and Fetch's own response values."""
    if hasattr(response, "throttle_ms"):
        response.throttle_ms = max(response.throttle_ms, throttle_ms)
        return response
    current = getattr(response, "throttle_time", None)
    if isinstance(current, datetime.timedelta) and current < datetime.timedelta(milliseconds=throttle_ms):
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))  # type: ignore[type-var]
    return response


class Connection:
    _next_id = 0

    def __init__(
        self,
        services: BrokerServices,
        transport: Transport,
        peer: str,
        listener_name: str,
        security_protocol: str,
        *,
        principal: str = ANONYMOUS,
    ) -> None:
        """`security_protocol`: the listener's (listener.security.protocol.map); `principal`: who
        the transport says the client is (SSL: its certificate's), replaced on a SASL listener by
        the one authentication gives."""
        Connection._next_id += 1
        self.id = Connection._next_id
        self.services = services
        self.loop = asyncio.get_running_loop()
        self.transport = transport
        cfg = services.config
        self.state = state = ConnectionState(self.id, peer, listener_name, security_protocol, principal)
        pre_auth_max = None
        if security_protocol in SASL_PROTOCOLS and services.sasl is not None:  # the authentication gate
            state.sasl = services.sasl.session(listener_name, peer)
            state.authenticated = False
            state.principal = ANONYMOUS  # until SASL says who
            pre_auth_max = state.sasl.listener.max_receive_size
        self.proto = ServerConnection(
            served_apis(),
            cfg["socket.request.max.bytes"],
            authenticated=state.authenticated,
            pre_auth_max_frame_size=pre_auth_max,
        )
        self.max_queued = cfg["queued.max.requests"]
        self._waiter: asyncio.Future | None = None  # the processor, waiting for a frame
        self._reading = False
        self.closed = False
        self.eof = False
        self.in_flight = False
        self.last_active = time.monotonic()
        self.metrics = services.metrics
        # followers' Fetch requests (broker/follower_fetch.py) and common Produce requests
        # (broker/fast_produce.py) served from the readiness callback where the transport
        # sends at once and no SASL session is to be checked
        self._fast = hasattr(transport, "send_now") and state.sasl is None
        self._fast_busy = False  # a request taken by the fast path is not answered yet
        self._fast_started = 0.0
        self._fast_api = "fetch"  # the handler's name of the request it took, as metrics count it
        self._fast_starting = False  # in `_try_fast`, which takes the next request when one is answered at once
        self._fast_write: asyncio.Task | None = None
        if isinstance(transport, TlsTransport):
            transport.readable_again = self._on_readable  # decrypted bytes left over: read again

    @property
    def peer(self) -> str:
        return self.state.peer

    # ------------------------------------------------------------------ tasks
    async def run(self) -> None:
        self._start_reading()
        if isinstance(self.transport, TlsTransport) and self.transport.buffered():
            self.loop.call_soon(self._on_readable)  # the first request came with the handshake's last message
        try:
            await self._process_loop()
        finally:
            self.closed = True
            self._stop_reading()
            self.transport.close()

    def stop(self) -> None:
        """Graceful shutdown: read nothing more; the request in flight completes."""
        self.proto.discard_waiting()
        self.closed = True
        self._stop_reading()
        self._wake()

    def sock_shutdown(self) -> None:
        """Wake a reader blocked in recv (it sees EOF) so the connection winds down."""
        self.transport.shutdown()

    # ---------------------------------------------------------------- reading
    # The socket stays registered with the event loop while we read (one epoll
    # registration per connection, not one per recv as with loop.sock_recv) and the
    # readiness callback receives into the protocol's buffer itself: no task switch per read.
    def _start_reading(self) -> None:
        if not self._reading and not self.eof and not self.closed:
            self.loop.add_reader(self.transport.fd, self._on_readable)
            self._reading = True

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            try:
                self.loop.remove_reader(self.transport.fd)
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
        proto = self.proto
        try:
            n = self.transport.recv_into(proto.get_buffer())
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset, or shut down under us
            self._reader_done()
            return
        if not n:
            self._reader_done()
            return
        self.last_active = time.monotonic()
        try:
            proto.buffer_updated(n)
        except ProtocolError as e:  # a frame size we cannot read past
            log.warning("closing connection %s from %s: %s", self.id, self.state.peer, e)
            self.closed = True  # queued requests are dropped with the connection
            self._reader_done()
            return
        waiting = proto.frames_waiting
        if waiting:
            if self._fast_busy:  # the processor waits for the fast path's answer first (in order)
                if waiting >= self.max_queued:
                    self._stop_reading()
                return
            if self._fast and self._waiter is not None and self._try_fast():
                if proto.frames_waiting >= self.max_queued:
                    self._stop_reading()
                return
            self._wake()
            if waiting >= self.max_queued:
                self._stop_reading()  # backpressure: resumed when the processor catches up

    # ------------------------------------------------------------- fast path
    # A follower's Fetch (broker/follower_fetch.py) or a common Produce (broker/fast_produce.py)
    # taken from the readiness callback while the processor is idle: no task wakes for it. The
    # processor waits while it is unanswered, so requests are still answered in order.
    def _try_fast(self) -> bool:
        """Take the requests waiting, in order, while the fast path serves them: True when it
        took the first (the processor then waits until what it took is answered; it is woken
        here for what is left when that was at once)."""
        taken = False
        proto = self.proto
        while not self._fast_busy and not self.closed and not self.eof:
            frame = proto.peek_frame()
            if type(frame) is not bytes or self.state.throttle_ms or log.isEnabledFor(logging.DEBUG):
                break
            if len(frame) < 10 or frame[0]:  # API keys 0 and 1 only
                break
            key = frame[1]
            served: fast_produce.FastProduce | follower_fetch.FollowerFetch | None
            if key == 0:
                served, api = fast_produce.accept(self, frame), "produce"
            elif key == 1:
                served, api = follower_fetch.accept(self, frame), "fetch"
            else:
                break
            if served is None:
                break
            proto.drop_frame()
            taken = self._fast_busy = self.in_flight = self._fast_starting = True
            self._fast_started = time.perf_counter()
            self._fast_api = api
            try:
                served.start()
            except Exception:
                self.fast_failed(served.version)
            finally:
                self._fast_starting = False
        if taken and not self._fast_busy and (proto.frames_waiting or self.eof or self.closed):
            self._wake()
        return taken

    def fast_answer(self, correlation_id: int, chunks: list, size: int, flexible: bool = True) -> None:
        """Send the fast path's answer (a flexible version's: response header v1)."""
        head = response_header(correlation_id, flexible)
        prefix = _I32(len(head) + size) + head
        if len(chunks) == 1 and type(chunks[0]) is bytes:
            data = prefix + chunks[0]
            try:
                n = self.transport.send_now(data)  # type: ignore[attr-defined]
            except OSError as e:
                log.debug("connection %s from %s lost while writing: %s", self.id, self.state.peer, e)
                self._fast_close()
                return
            if n == len(data):
                self._fast_answered()
                return
            rest: list = [memoryview(data)[n:]]
        else:
            rest = [prefix, *chunks]
        self._fast_write = self.loop.create_task(self._fast_write_rest(rest))

    async def _fast_write_rest(self, chunks: list) -> None:
        try:
            await self.transport.write(chunks)
        except CloseConnection as e:
            log.warning("closing connection %s from %s: %s", self.id, self.state.peer, e)
            self._fast_close()
            return
        except OSError as e:
            log.debug("connection %s from %s lost while writing: %s", self.id, self.state.peer, e)
            self._fast_close()
            return
        finally:
            self._fast_write = None
        self._fast_answered()

    def _fast_answered(self) -> None:
        if self.metrics:
            self.metrics.request_done(self._fast_api, time.perf_counter() - self._fast_started)
        self.fast_done()

    def fast_done(self) -> None:
        """The fast path's request is over: the next one waiting is taken by the fast path if
        it serves it, else by the processor (which also winds the connection down)."""
        self._fast_busy = self.in_flight = False
        if not self._reading and self.proto.frames_waiting < self.max_queued:
            self._start_reading()  # paused while requests queued behind this one (no processor resumes it here)
        if self._fast_starting:  # answered at once: `_try_fast` goes on
            return
        if self.proto.frames_waiting and self._waiter is not None and self._try_fast():
            return
        if self.proto.frames_waiting or self.eof or self.closed:
            self._wake()

    def fast_failed(self, version: int) -> None:
        """The fast path raised: as a handler's failure, logged and the connection closed."""
        log.exception("%s v%d handler failed (connection %s, fast path)", self._fast_api, version, self.id)
        if self.metrics:
            self.metrics.request_error(self._fast_api)
        self._fast_close()

    def _fast_close(self) -> None:
        self.closed = True
        self.fast_done()

    async def _process_loop(self) -> None:
        proto = self.proto
        while not self.closed:
            if self._fast_busy:  # a request the fast path took is not answered yet
                self._waiter = self.loop.create_future()
                await self._waiter
                continue
            try:
                event = proto.next_event()
            except ProtocolError as e:
                log.warning("closing connection %s from %s: %s", self.id, self.state.peer, e)
                return
            if event is NEED_DATA:
                if self.eof:
                    return
                self._waiter = self.loop.create_future()
                await self._waiter
                continue
            if not self._reading and proto.frames_waiting < self.max_queued:
                self._start_reading()
            if self.eof and _abandoned(event):
                log.debug("connection %s from %s closed: a request read before is not run", self.id, self.state.peer)
                continue
            self.in_flight = True
            try:
                await self._handle(event)
            except CloseConnection as e:
                level = logging.DEBUG if e.logged else logging.WARNING
                log.log(level, "closing connection %s from %s: %s", self.id, self.state.peer, e)
                return
            except OSError as e:
                log.debug("connection %s from %s lost while writing: %s", self.id, self.state.peer, e)
                return
            finally:
                self.in_flight = False

    # --------------------------------------------------------------- requests
    def _context(self, event: RequestReceived) -> RequestContext:
        """What the handler of `event` gets besides the request."""
        return RequestContext(
            self.services,
            self.state,
            event.api_key,
            event.api_version,
            event.correlation_id,
            event.client_id,
            event.size,
        )

    async def _handle(self, event: RequestReceived | ImmediateResponse | SaslTokenReceived) -> None:
        if isinstance(event, ImmediateResponse):  # answered by the protocol itself (ApiVersions fallback)
            await self.transport.write([event.data])
            return
        sasl = self.state.sasl
        if isinstance(event, SaslTokenReceived):  # after SaslHandshake v0: bare tokens
            await self._sasl_token(event.token)
            return
        if sasl is not None:
            if not sasl.allows(event.api_key):
                why = f"unexpected {REGISTRY[event.api_key].name} request during SASL {sasl.state.value}"
                if event.api_key == 18 and sasl.state is State.AUTHENTICATE:  # Kafka answers it ILLEGAL_SASL_STATE
                    error = self._context(event).respond(error_code=34, api_keys=(), throttle_time=0)
                    body, size = REGISTRY[18].encode_response(event.api_version, error)
                    await self.transport.write(self.proto.send_chunks(event, body, size))
                raise CloseConnection(why)
            if sasl.expired() and event.api_key not in (17, 36):  # KIP-368
                raise CloseConnection("SASL session expired without re-authentication")
        handler = REGISTRY[event.api_key]
        version, correlation_id = event.api_version, event.correlation_id
        services = self.services
        ctx = RequestContext(services, self.state, event.api_key, version, correlation_id, event.client_id, event.size)
        started = time.perf_counter()
        debug = log.isEnabledFor(logging.DEBUG)  # asked once per request
        quotas = services.client_quotas() if services.quotas is not None else None
        # the request quota charges the handler's processing time: the thread's CPU clock (a system
        # call, ~0.7 us) read around each of its steps only when a request_percentage quota is set
        charged = quotas is not None and quotas.request.enabled
        self.state.request_cpu, self.state.request_step = (0.0 if charged else None), None
        if debug:
            log.debug("conn %d %s: %s v%d corr %d", self.id, event.client_id, handler.name, version, correlation_id)
        try:
            running = handler.fn(ctx, event.request)
            response = await (charging(running, self.state) if charged else running)
        except CloseConnection:
            raise
        except Exception:
            log.exception(
                "%s v%d handler failed (connection %s, client %s)", handler.name, version, self.id, event.client_id
            )
            if self.metrics:
                self.metrics.request_error(handler.name)
            raise CloseConnection(f"internal error handling {handler.name}") from None
        proto = self.proto
        if sasl is not None:
            if event.api_key == 18:
                sasl.versions_answered()
            elif sasl.raw_tokens and sasl.state is State.AUTHENTICATE:  # SaslHandshake v0 answered
                proto.raw_sasl_tokens = True
        if not proto.authenticated and self.state.authenticated:  # SASL completed in this request
            proto.mark_authenticated()
        if not charged and not self.state.throttle_ms:  # the common case: no quota throttles it
            throttle_ms = 0
        else:
            throttle_ms = self._throttle_ms(event, quotas, response is not NO_RESPONSE)
        if response is NO_RESPONSE:
            if throttle_ms:
                await self._mute(throttle_ms)
            return
        if throttle_ms:
            response = _with_throttle(response, throttle_ms)
        body, size = handler.encode_response(version, response)
        await self.transport.write(proto.send_chunks(event, body, size))
        if self.state.close_after_response:
            raise CloseConnection(self.state.close_after_response, logged=True)  # the handler's failure logged it
        if throttle_ms:
            await self._mute(throttle_ms)
        if debug:
            log.debug(
                "conn %d: answered corr %d in %.1f ms", self.id, correlation_id, (time.perf_counter() - started) * 1000
            )
        if self.metrics:
            self.metrics.request_done(handler.name, time.perf_counter() - started)

    def _throttle_ms(self, event: RequestReceived, quotas: ClientQuotas | None, answered: bool) -> int:
        """The larger of what the handler's quota gave (Produce, Fetch, controller mutations) and
        the request quota's for this request's processing time (KIP-124; not charged for a
        request without an answer, Produce acks=0, as Kafka; nor here when the handler charged
        it, Fetch)."""
        state = self.state
        ms, state.throttle_ms = state.throttle_ms, 0
        if quotas is None or state.request_cpu is None or not answered or event.api_key in REQUEST_QUOTA_EXEMPT:
            state.request_cpu = None
            return ms
        client_id = event.client_id or ""
        request_ms = quotas.charge_request(state, client_id)
        if request_ms:
            quotas.request.throttled(user_of(state.principal), client_id, request_ms)
        return max(ms, request_ms)

    async def _mute(self, throttle_ms: int) -> None:
        """KIP-219: the response went out at once; the channel reads nothing more for the
        throttle time (requests already buffered wait too), as Kafka mutes it."""
        if throttle_ms <= 0 or self.closed:
            return
        self._stop_reading()
        await asyncio.sleep(throttle_ms / 1000)
        if not self.closed:
            self._start_reading()

    async def _sasl_token(self, token: bytes) -> None:
        """A bare SASL token (Kafka's framing after SaslHandshake v0): the answer is a bare token;
        a failure closes the connection without one, as Kafka's does."""
        sasl = self.state.sasl
        try:
            response = sasl.authenticate(token)
        except AuthenticationFailed as e:
            raise CloseConnection(f"SASL authentication failed: {e}", logged=True) from None
        if sasl.state is State.COMPLETE:
            self.state.principal, self.state.authenticated = sasl.principal, True
            self.proto.mark_authenticated()
        await self.transport.write([self.proto.send_token(response)])
