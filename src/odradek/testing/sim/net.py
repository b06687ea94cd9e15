"""The simulated network: listeners at (host, port), TCP connections as pairs of endpoints,
links between hosts with latency, cuts and resets.

A host is a node's name (`b1`, `zk`, `producer-1`); a broker listens at (`b1`, 9092). Each
direction of a connection is a FIFO pipe: a chunk arrives after the link's latency (a base
per directed link drawn from the seed, jitter, and size over bandwidth), never before the
chunk sent ahead of it. While a direction of a link is cut, what arrives is held, as TCP
would retransmit it, and flows again in order when the cut heals; a connection closed
meanwhile drops it. Connecting while a link is cut retries the SYN every second until the
caller gives up (its connect timeout).

Both sides see ordinary asyncio shapes: a client's `loop.create_connection(...)` gets a
`SimClientTransport` (asyncio.Transport) feeding its protocol (BufferedProtocol or
Protocol); a broker's accept loop gets endpoints from `SimListener.accept()` and wraps each
in a `SimTransport` (broker/transport.py's `Transport`: fd, recv_into, write, shutdown,
close), whose `fd` is a virtual descriptor the loop's `add_reader` polls.

kill -9 of a node closes its endpoints (the kernel sends FIN to each peer, through cuts) and
its listeners (connecting is refused); a power cut or crash of the host sends nothing and
connecting hangs (the host is down) until it restarts. What peers send meanwhile on their
old connections is held, as TCP retransmits it; once the host is back its new kernel knows
none of those connections and answers each one's next segment with RST (retransmitted at
once when the host restarts, as held bytes are when a cut heals; a real stack waits for its
next retransmission timeout), so a peer that writes on an old connection learns it is gone.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import zlib
from collections.abc import Callable
from typing import Any

from odradek.broker.transport import CloseConnection
from odradek.testing.sim.loop import MONO_BASE, NODE, Node, SimLoop
from odradek.testing.sim.trace import Trace

_FIN = b""  # an end of stream in a pipe (a data chunk is never empty)
_RST = None  # a reset in a pipe
_FIRST_FD = 1 << 20  # virtual descriptors: far above any real one
BANDWIDTH = 125_000_000.0  # bytes/s (1 Gbit/s)
SYN_RETRY_S = 1.0


class Pipe:
    """One direction of one connection."""

    __slots__ = ("src", "dst", "to", "last", "queue", "timer", "held")

    def __init__(self, src: str, dst: str, to: Endpoint) -> None:
        self.src, self.dst, self.to = src, dst, to
        self.last = 0.0  # arrival time of the last chunk sent
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()  # on the wire
        self.timer: asyncio.TimerHandle | None = None  # for the head of the queue
        self.held: collections.deque[bytes | None] = collections.deque()  # arrived while cut


class Endpoint:
    """One end of a connection: what arrived for it, and the pipe to its peer."""

    __slots__ = (
        "fd",
        "node",
        "name",
        "peer_name",
        "rx",
        "eof",
        "reset",
        "closed",
        "fin_sent",
        "forgotten",
        "out",
        "on_data",
    )

    def __init__(self, fd: int, node: Node, name: str, peer_name: str) -> None:
        self.fd = fd
        self.node = node
        self.name = name  # "host:port" of this end
        self.peer_name = peer_name
        self.rx = bytearray()
        self.eof = False
        self.reset = False
        self.closed = False
        self.fin_sent = False
        self.forgotten = False  # its host lost power: once back, it answers a segment with RST
        self.out: Pipe | None = None
        self.on_data: Callable[[], None] | None = None  # client side: schedule the protocol's feed

    @property
    def readable(self) -> bool:
        return bool(self.rx) or self.eof or self.reset


class SimListener:
    def __init__(self, net: Network, node: Node, host: str, port: int) -> None:
        self.net, self.node, self.host, self.port = net, node, host, port
        self.backlog: collections.deque[Endpoint] = collections.deque()
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None

    async def accept(self) -> Endpoint:
        while not self.backlog:
            if self.closed:
                raise OSError("listener closed")
            self._waiter = self.net.loop.create_future()
            await self._waiter
        return self.backlog.popleft()

    def _arrived(self, ep: Endpoint) -> None:
        self.backlog.append(ep)
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.set_result(None)

    def close(self) -> None:
        self.closed = True
        self.net._listeners.pop((self.host, self.port), None)
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.set_result(None)


class Network:
    def __init__(self, loop: SimLoop, seed: int, trace: Trace, *, latency_ms: tuple[float, float] = (0.1, 1.0)) -> None:
        self.loop = loop
        self.seed = seed
        self.trace = trace
        self.rng = random.Random(f"net-{seed}")
        self.latency_ms = latency_ms
        self._latency: dict[tuple[str, str], float] = {}
        self._listeners: dict[tuple[str, int], SimListener] = {}
        self._fds: dict[int, Endpoint] = {}
        self._next_fd = _FIRST_FD
        self._ports: dict[str, int] = {}
        self.cut: set[tuple[str, str]] = set()  # (from host, to host) directions cut
        self.down: set[str] = set()  # hosts powered off: nothing answers
        self._held: dict[Pipe, None] = {}
        self.delivered_bytes = 0
        self.delivered_chunks = 0
        self.trace_sends = True  # every send too, not only deliveries: where two runs part shows sooner
        loop.readable = self._readable
        loop.network = self

    # ------------------------------------------------------------------ links
    def latency(self, src: str, dst: str, size: int = 0) -> float:
        base = self._latency.get((src, dst))
        if base is None:
            base = self.base_latency(src, dst)
        return base + self.rng.expovariate(5000.0) + size / BANDWIDTH

    def base_latency(self, src: str, dst: str) -> float:
        """The link's latency without jitter: drawn from the seed, or set (`set_latency`)."""
        base = self._latency.get((src, dst))
        if base is None:
            lo, hi = self.latency_ms
            base = self._latency[(src, dst)] = random.Random(f"{self.seed}:{src}->{dst}").uniform(lo, hi) / 1000
        return base

    def set_latency(self, src: str, dst: str, seconds: float | None) -> None:
        """The base latency from src to dst (None: back to the one drawn from the seed). What is
        on the wire keeps its arrival time; round trips not yet begun take the new one
        (`SimLoop.costs_changed`)."""
        if seconds is None:
            self._latency.pop((src, dst), None)
        else:
            self._latency[(src, dst)] = seconds
        self.loop.costs_changed()

    def normal_latency(self) -> None:
        """Every link back to the latency drawn from the seed."""
        self._latency.clear()
        self.loop.costs_changed()

    def blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self.cut or dst in self.down

    def cut_link(self, a: str, b: str, *, both: bool = True) -> None:
        self.cut.add((a, b))
        if both:
            self.cut.add((b, a))

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Heal the cut between a and b (both directions), or every cut."""
        if a is None:
            self.cut.clear()
        else:
            self.cut.discard((a, b))
            self.cut.discard((b, a))
        self._flush_held()

    def uncut(self, a: str, b: str) -> None:
        """Heal one direction, a to b."""
        self.cut.discard((a, b))
        self._flush_held()

    def _flush_held(self) -> None:
        for pipe in list(self._held):
            if self.blocked(pipe.src, pipe.dst):
                continue
            del self._held[pipe]
            # Retransmitted: ahead of whatever was sent after them and is still on the wire.
            now = self.loop.time()
            queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
            last = now
            for item in pipe.held:
                last = max(now + self.latency(pipe.src, pipe.dst, len(item or b"")), last)
                queue.append((last, item))
            for when, item in pipe.queue:
                last = max(when, last)
                queue.append((last, item))
            pipe.held.clear()
            pipe.queue, pipe.last = queue, last
            self._arm(pipe)

    # --------------------------------------------------------------- sending
    def _send_on(self, pipe: Pipe, item: bytes | None) -> None:
        size = len(item) if item else 0
        now = self.loop._now
        if self.trace_sends:
            self.trace.add(f"{now - MONO_BASE:.6f} send {pipe.src}>{pipe.dst} {pipe.to.name} {size}")
        arrival = now + self.latency(pipe.src, pipe.dst, size)
        if arrival < pipe.last:
            arrival = pipe.last
        pipe.last = arrival
        pipe.queue.append((arrival, item))
        if pipe.timer is None:
            self._arm(pipe)

    def _arm(self, pipe: Pipe) -> None:
        if pipe.timer is not None:
            pipe.timer.cancel()
            pipe.timer = None
        if pipe.queue:
            pipe.timer = self.loop.call_at(pipe.queue[0][0], self._drain, pipe, context=_NET_CONTEXT)

    def _drain(self, pipe: Pipe) -> None:
        pipe.timer = None
        now = self.loop.time()
        queue = pipe.queue
        while queue and queue[0][0] <= now:
            self._arrive(pipe, queue.popleft()[1])
        if queue and pipe.timer is None:
            self._arm(pipe)

    def _arrive(self, pipe: Pipe, item: bytes | None) -> None:
        if pipe.held or ((self.cut or self.down) and self.blocked(pipe.src, pipe.dst)):
            # held: retransmitted until the cut heals or the host is back (then answered with RST)
            pipe.held.append(item)
            self._held[pipe] = None
            return
        ep = pipe.to
        if ep.closed:
            if ep.forgotten and item is not _RST:
                self._forgotten(ep)
            return
        if item is _RST:
            ep.reset = True
            what = "RST"
        elif not item:
            ep.eof = True
            what = "FIN"
        else:
            ep.rx += item
            self.delivered_bytes += len(item)
            self.delivered_chunks += 1
            what = f"{len(item)} {zlib.crc32(item):08x}"
        self.trace.add(f"{self.loop._now - MONO_BASE:.6f} {pipe.src}>{pipe.dst} {ep.name} {what}")
        if ep.on_data is not None:
            ep.on_data()
        else:
            self.loop.notify_readable(ep.fd)

    def _forgotten(self, ep: Endpoint) -> None:
        """A segment reached a host back from a power cut on a connection it no longer knows:
        its kernel answers with RST (once: the peer's end is reset by the first)."""
        ep.forgotten = False
        if ep.out is not None:
            self.trace.add(f"{self.loop.elapsed:.6f} {ep.out.src} forgot {ep.name}: RST to {ep.peer_name}")
            self._send_on(ep.out, _RST)

    def send(self, ep: Endpoint, data: bytes) -> None:
        if ep.closed or ep.out is None:
            raise BrokenPipeError(f"connection {ep.name} -> {ep.peer_name} is closed")
        if ep.reset:
            raise ConnectionResetError(f"connection {ep.name} -> {ep.peer_name} was reset")
        if data:
            self._send_on(ep.out, bytes(data))

    def close(self, ep: Endpoint, *, reset: bool = False) -> None:
        if ep.closed:
            return
        ep.closed = True
        self.loop.remove_reader(ep.fd)
        self._fds.pop(ep.fd, None)
        if ep.out is not None and (reset or not ep.fin_sent):
            ep.fin_sent = True
            self._send_on(ep.out, _RST if reset else _FIN)

    def send_fin(self, ep: Endpoint) -> None:
        """Half-close: the peer reads to the end of what was sent, then end of stream."""
        if ep.out is not None and not ep.closed and not ep.fin_sent:
            ep.fin_sent = True
            self._send_on(ep.out, _FIN)

    def _readable(self, fd: int) -> bool:
        ep = self._fds.get(fd)
        return ep is not None and ep.readable

    def endpoint(self, fd: int) -> Endpoint | None:
        return self._fds.get(fd)

    # ------------------------------------------------------------- listening
    def listen(self, node: Node, host: str, port: int) -> SimListener:
        if (host, port) in self._listeners:
            raise OSError(98, f"address in use: {host}:{port}")
        listener = self._listeners[(host, port)] = SimListener(self, node, host, port)
        return listener

    def _new_fd(self) -> int:
        fd = self._next_fd
        self._next_fd += 1
        return fd

    async def connect(self, host: str, port: int) -> Endpoint:
        """A connection from the calling node to (host, port); ConnectionRefusedError when
        nothing listens there; hangs (until the caller's timeout) while the link is cut or the
        host is down."""
        node = NODE.get()
        if node is None:
            raise RuntimeError("connect from outside any node")
        loop = self.loop
        src = node.name
        fut: asyncio.Future[Endpoint] = loop.create_future()

        def syn() -> None:
            if fut.done():
                return
            if node.dead:
                return
            if self.blocked(src, host) or self.blocked(host, src):
                loop.call_later(SYN_RETRY_S, syn, context=_NET_CONTEXT)  # SYN or SYN-ACK lost: retransmit
                return
            listener = self._listeners.get((host, port))
            back = self.latency(host, src)
            if listener is None or listener.closed or listener.node.dead:
                loop.call_later(back, refuse, context=_NET_CONTEXT)
                return
            self._ports[src] = self._ports.get(src, 40000) + 1
            client_name = f"{src}:{self._ports[src]}"
            c = Endpoint(self._new_fd(), node, client_name, f"{host}:{port}")
            s = Endpoint(self._new_fd(), listener.node, f"{host}:{port}", client_name)
            c.out, s.out = Pipe(src, host, s), Pipe(host, src, c)
            self._fds[c.fd], self._fds[s.fd] = c, s
            listener._arrived(s)
            self.trace.add(f"{loop.elapsed:.6f} {src}>{host} connect {client_name}")
            loop.call_later(back, established, c, context=_NET_CONTEXT)

        def refuse() -> None:
            if not fut.done():
                fut.set_exception(ConnectionRefusedError(111, f"connection refused by {host}:{port}"))

        def established(c: Endpoint) -> None:
            if fut.done():  # the caller gave up meanwhile
                self.close(c, reset=True)
            else:
                fut.set_result(c)

        if self.trace_sends:
            self.trace.add(f"{loop.elapsed:.6f} {src} connecting to {host}:{port}")
        loop.call_later(self.latency(src, host), syn, context=_NET_CONTEXT)
        return await fut

    async def create_connection(
        self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str, port: int
    ) -> tuple[SimClientTransport, asyncio.BaseProtocol]:
        ep = await self.connect(host, int(port))
        protocol = protocol_factory()
        transport = SimClientTransport(self, ep, protocol)
        protocol.connection_made(transport)
        return transport, protocol

    # ----------------------------------------------------------------- faults
    def kill(self, node: Node, *, power: bool = False) -> None:
        """The node's process is gone: its endpoints close (FIN to each peer, unless the host
        lost power: then nothing is sent and the host stays down until `restart_host`)."""
        for (_h, _p), listener in list(self._listeners.items()):
            if listener.node is node:
                listener.close()
        if power:
            self.down.add(node.name)
        for ep in list(self._fds.values()):
            if ep.node is node:
                if power:
                    ep.closed = ep.forgotten = True
                    self.loop.remove_reader(ep.fd)
                    self._fds.pop(ep.fd, None)
                else:
                    self.close(ep)

    def restart_host(self, name: str) -> None:
        self.down.discard(name)
        self._flush_held()

    def reset_connections(self, a: str, b: str) -> int:
        """Reset every connection between hosts a and b (both ends see ECONNRESET)."""
        n = 0
        for ep in list(self._fds.values()):
            if ep.out is not None and {ep.out.src, ep.out.dst} == {a, b} and not ep.closed:
                ep.reset = True
                self.close(ep, reset=True)
                if ep.on_data is not None:
                    ep.on_data()
                n += 1
        return n


def _net_context() -> Any:
    import contextvars

    ctx = contextvars.Context()
    ctx.run(NODE.set, None)
    return ctx


_NET_CONTEXT = _net_context()


class SimClientTransport(asyncio.Transport):
    """The client side of a simulated connection, feeding an asyncio protocol."""

    def __init__(self, net: Network, ep: Endpoint, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._net = net
        self._loop = net.loop
        self._ep = ep
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)
        self._closing = False
        self._lost = False
        self._paused = False
        self._scheduled = False
        import contextvars

        self._ctx = contextvars.copy_context()
        ep.on_data = self._schedule

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            host, _, port = self._ep.peer_name.rpartition(":")
            return (host, int(port))
        if name == "sockname":
            host, _, port = self._ep.name.rpartition(":")
            return (host, int(port))
        return default

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._schedule()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def write(self, data: Any) -> None:
        if self._closing:
            return
        try:
            self._net.send(self._ep, bytes(data))
        except OSError as e:
            self._connection_lost(e)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._net.send_fin(self._ep)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._net.close(self._ep)
        self._loop.call_soon(self._connection_lost, None, context=self._ctx)

    def abort(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._net.close(self._ep, reset=True)
        self._loop.call_soon(self._connection_lost, None, context=self._ctx)

    def _schedule(self) -> None:
        if not self._scheduled and not self._lost:
            self._scheduled = True
            self._loop.call_soon(self._feed, context=self._ctx)

    def _feed(self) -> None:
        self._scheduled = False
        ep = self._ep
        protocol = self._protocol
        while ep.rx and not self._paused and not self._lost:
            if self._buffered:
                buf = protocol.get_buffer(len(ep.rx))  # type: ignore[attr-defined]
                n = min(len(buf), len(ep.rx))
                buf[:n] = ep.rx[:n]
                del ep.rx[:n]
                protocol.buffer_updated(n)  # type: ignore[attr-defined]
            else:
                data = bytes(ep.rx)
                ep.rx.clear()
                protocol.data_received(data)  # type: ignore[attr-defined]
        if self._lost or self._paused or ep.rx:
            return
        if ep.reset:
            self._closing = True
            self._net.close(ep)
            self._connection_lost(ConnectionResetError(104, "connection reset by peer"))
        elif ep.eof:
            keep = protocol.eof_received() if hasattr(protocol, "eof_received") else None
            if not keep:
                self._closing = True
                self._net.close(ep)
                self._connection_lost(None)

    def _connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        if not self._ep.closed:
            self._net.close(self._ep)
        self._protocol.connection_lost(exc)


class SimTransport:
    """The broker side of a simulated connection (broker/transport.py's `Transport`)."""

    __slots__ = ("net", "ep", "fd")

    def __init__(self, net: Network, ep: Endpoint) -> None:
        self.net = net
        self.ep = ep
        self.fd = ep.fd

    def recv_into(self, buffer: memoryview, /) -> int:
        ep = self.ep
        if ep.rx:
            n = min(len(buffer), len(ep.rx))
            buffer[:n] = ep.rx[:n]
            del ep.rx[:n]
            return n
        if ep.reset:
            raise ConnectionResetError(104, "connection reset by peer")
        if ep.eof or ep.closed:
            return 0
        raise BlockingIOError

    async def write(self, chunks: list[Any]) -> None:
        parts = []
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                parts.append(bytes(chunk))
            else:  # a file region of a segment
                data = os.pread(chunk.fd, chunk.length, chunk.position)
                if len(data) != chunk.length:
                    raise CloseConnection("segment file shrank under a fetch")
                parts.append(data)
        self.net.send(self.ep, b"".join(parts))

    def send_now(self, data: bytes) -> int:
        """All of `data`, at once (as `write`: the network takes every send whole)."""
        self.net.send(self.ep, data)
        return len(data)

    def shutdown(self) -> None:
        ep = self.ep
        ep.eof = True
        self.net.loop.notify_readable(ep.fd)
        self.net.send_fin(ep)

    def close(self) -> None:
        self.net.close(self.ep)
