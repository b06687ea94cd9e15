"""The byte pipe under a client connection: receive into lent memory, write response chunks.

A transport owns one accepted, non-blocking socket. The connection (broker/connection.py)
waits for readability on `fd` itself (one `loop.add_reader` per connection), then calls
`recv_into`; it hands `write` the chunks of one response: bytes, and file regions (objects
with fd, position, length) for Fetch record bytes.

`PlaintextTransport` writes straight to the socket. Record bytes go with `os.sendfile` from
the segment file, never through Python, except small ones (INLINE_REGION_BYTES), which are
read with `pread` and go in the same send as the response fields. The socket is driven
directly, not through an asyncio transport, so sendfile works the same on uvloop and on the
standard loop.

`TlsTransport` (listeners whose security protocol is SSL or SASL_SSL) keeps an
`ssl.SSLObject` over two `ssl.MemoryBIO`s, the socket driven the same way: `handshake()` runs
before the connection reads its first request (server.py bounds it in time); `recv_into`
reads ciphertext from the socket into the incoming BIO and returns the plaintext the SSL
object gives, taking from the socket no more ciphertext than the buffer can hold as
plaintext, so nothing decrypted waits inside the SSL object while the connection waits for
the socket (where that cannot be helped, `readable_again` is called soon); `write` has no
sendfile: a file region is read with `os.pread` in pieces of FILE_PIECE_BYTES (the one copy
through Python), encrypted, and sent.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol


class CloseConnection(Exception):
    """Raised while handling or answering a request when the only right answer is to hang up.
    `logged`: the reason was logged already (a failed authentication: its own line), so the
    close itself is logged at DEBUG only."""

    def __init__(self, reason: str, *, logged: bool = False) -> None:
        super().__init__(reason)
        self.logged = logged


# File regions of a response totalling at most this many bytes are read into memory and sent
# with the rest of the response in one send: for a small Fetch (a consumer that is caught up
# gets a batch or two) one pread + one send costs less than send + sendfile + send, and the
# client gets one segment instead of three (measured in docs/benchmarks.md, "e2e").
# Larger regions go with sendfile, never through Python.
INLINE_REGION_BYTES = 16384

_BYTES = (bytes, bytearray, memoryview)


class Transport(Protocol):
    fd: int  # what the connection waits on for readability

    def recv_into(self, buffer: memoryview, /) -> int:
        """Bytes received into `buffer`; 0 at end of stream. BlockingIOError when none are ready."""

    # Optional (plaintext and the simulator's): `send_now(data) -> int`, the bytes of `data` sent
    # at once, without waiting; a transport with it serves followers' Fetch requests on the
    # fast path (broker/follower_fetch.py).

    async def write(self, chunks: list[Any]) -> None:
        """Send one response's chunks in order (bytes, and file regions). Raises OSError if the
        peer is gone, CloseConnection if the response cannot be completed."""

    def shutdown(self) -> None:
        """Shut both directions down: a reader blocked on the socket sees end of stream."""

    def close(self) -> None: ...


class _SocketTransport:
    """What both transports do with the socket itself: send, wait, shut down, close."""

    __slots__ = ("sock", "fd", "loop")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.loop = loop

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    async def _sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
            except BlockingIOError:
                await self._writable()
                continue
            view = view[n:]

    def _writable(self) -> asyncio.Future:
        return _ready(self.loop, self.fd, self.loop.add_writer, self.loop.remove_writer)

    async def _readable(self) -> None:
        fut = _ready(self.loop, self.fd, self.loop.add_reader, self.loop.remove_reader)
        try:
            await fut
        except asyncio.CancelledError:
            self.loop.remove_reader(self.fd)  # now, before the socket is closed and its number reused
            raise


def _ready(loop: asyncio.AbstractEventLoop, fd: int, add: Callable, remove: Callable) -> asyncio.Future:
    """A future done when `fd` is ready (add_reader or add_writer), unregistered when done or cancelled."""
    fut = loop.create_future()

    def ready() -> None:
        remove(fd)
        if not fut.done():
            fut.set_result(None)

    add(fd, ready)
    fut.add_done_callback(lambda f: remove(fd) if f.cancelled() else None)
    return fut


class PlaintextTransport(_SocketTransport):
    """An unencrypted socket: file regions with os.sendfile (small ones inline)."""

    __slots__ = ("recv_into",)

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(sock, loop)
        self.recv_into = sock.recv_into  # the socket's own method: nothing in between when reading

    def send_now(self, data: bytes) -> int:
        """As much of `data` as the socket takes now (0 when it takes none); OSError when the
        peer is gone. The rest goes with `write` (the follower-Fetch fast path's first try)."""
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0

    async def write(self, chunks: list[Any]) -> None:
        data = chunks[0]
        if len(chunks) == 1 and type(data) is bytes:  # a whole response in one bytes object: the common case
            try:
                n = self.sock.send(data)
            except BlockingIOError:
                n = 0
            if n < len(data):
                await self._sendall(memoryview(data)[n:])
            return
        small = _inline_small_regions(chunks)
        if small is not None:
            await self._sendall(small)
            return
        pending: list[bytes | bytearray | memoryview] = []
        for chunk in chunks:
            if isinstance(chunk, _BYTES):
                pending.append(chunk)
                continue
            if pending:
                await self._sendall(b"".join(pending))
                pending = []
            await self._sendfile(chunk.fd, chunk.position, chunk.length)
        if pending:
            await self._sendall(pending[0] if len(pending) == 1 else b"".join(pending))

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


# Record bytes of a file region go through TLS in pieces of this size: one pread each, encrypted
# and sent before the next is read (a large Fetch never sits whole in memory twice).
FILE_PIECE_BYTES = 256 * 1024
# The most ciphertext a TLS record takes (16 KiB of plaintext and its overhead).
_TLS_RECORD_MAX = 16384 + 2048
# The most ciphertext one recv takes (it allocates that much before it knows what came).
_RECV_MAX = 256 * 1024


class TlsTransport(_SocketTransport):
    """TLS over the socket through an SSLObject and two memory BIOs (see the module doc)."""

    __slots__ = ("tls", "incoming", "outgoing", "readable_again", "_eof", "_sending")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, context: ssl.SSLContext) -> None:
        super().__init__(sock, loop)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        # Called (soon, on the loop) when decrypted bytes wait that the last recv_into could
        # not hand over: the connection's readiness callback (set by server.py).
        self.readable_again: Callable[[], None] | None = None
        self._eof = False
        # Held while ciphertext taken from the outgoing BIO is being sent: a response and bytes
        # the SSL object wrote while reading (a TLS 1.3 key update's answer) never interleave.
        self._sending = asyncio.Lock()

    async def handshake(self) -> None:
        """The TLS handshake; raises OSError (ssl.SSLError for a bad one, ConnectionError at end
        of stream). The caller bounds it in time."""
        tls = self.tls
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            await self._flush()
            data = await self._recv_some()
            if not data:
                raise ConnectionError("end of stream during the TLS handshake")
            self.incoming.write(data)
        await self._flush()

    def buffered(self) -> bool:
        """Whether bytes from the peer wait inside (not on the socket): after the handshake, a
        request the client sent with its last handshake message; after a recv_into that filled
        the buffer, the rest."""
        return bool(self.tls.pending() or self.incoming.pending)

    def peer_certificate(self) -> bytes | None:
        """The client's certificate (DER) if it sent one (and it was verified)."""
        return self.tls.getpeercert(binary_form=True)

    async def _recv_some(self) -> bytes:
        while True:
            try:
                return self.sock.recv(_TLS_RECORD_MAX)
            except BlockingIOError:
                await self._readable()

    def recv_into(self, buffer: memoryview, /) -> int:
        tls, incoming, sock = self.tls, self.incoming, self.sock
        total = len(buffer)
        n = 0
        while n < total:
            try:
                got: int = tls.read(total - n, buffer[n:])  # type: ignore[assignment]  # with a buffer: a count
            except ssl.SSLWantReadError:
                got = -1
            except ssl.SSLZeroReturnError:
                got = 0
            if got > 0:
                n += got
                continue
            if got == 0:  # the peer's close_notify
                self._eof = True
                break
            if self._eof:
                break
            # At most as much ciphertext as the rest of the buffer holds in plaintext (a partial
            # record waiting in the BIO counts), so that all of it can be handed over now.
            room = min(total - n - incoming.pending, _RECV_MAX)
            if room <= 0:
                if n:
                    break
                room = _TLS_RECORD_MAX  # a small buffer under a partial record: readable_again drains the rest
            try:
                data = sock.recv(room)
            except BlockingIOError:
                break
            if not data:
                self._eof = True
                break
            incoming.write(data)
        if self.outgoing.pending:  # e.g. a TLS 1.3 key update answered
            self.loop.create_task(self._flush_quietly())
        if n == total and self.buffered() and self.readable_again is not None:
            self.loop.call_soon(self.readable_again)
        if n == 0 and not self._eof:
            raise BlockingIOError
        return n

    async def write(self, chunks: list[Any]) -> None:
        try:
            small = _inline_small_regions(chunks) if len(chunks) > 1 else None
            if small is not None:
                chunks = [small]
            for chunk in chunks:
                if isinstance(chunk, _BYTES):
                    if chunk:
                        self.tls.write(chunk)
                    continue
                await self._flush()
                position, end = chunk.position, chunk.position + chunk.length
                while position < end:
                    data = os.pread(chunk.fd, min(FILE_PIECE_BYTES, end - position), position)
                    if not data:
                        raise CloseConnection("segment file shrank under a fetch")
                    self.tls.write(data)
                    position += len(data)
                    await self._flush()
            await self._flush()
        except ssl.SSLError as e:
            raise CloseConnection(f"TLS: {e}") from None

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except OSError:
            pass  # the connection is gone: its reader sees it

    async def _flush(self) -> None:
        outgoing = self.outgoing
        if not outgoing.pending:
            return
        async with self._sending:
            while outgoing.pending:
                await self._sendall(outgoing.read())

    def close(self) -> None:
        """Send close_notify if the socket takes it at once, then close."""
        try:
            self.tls.unwrap()
        except (ssl.SSLError, ValueError):
            pass
        if self.outgoing.pending:
            try:
                self.sock.send(self.outgoing.read())
            except OSError:
                pass
        super().close()


def _inline_small_regions(chunks: list[Any]) -> bytes | None:
    """The response as one bytes object when its file regions total at most INLINE_REGION_BYTES."""
    file_bytes = 0
    for chunk in chunks:
        if not isinstance(chunk, _BYTES):
            file_bytes += chunk.length
            if file_bytes > INLINE_REGION_BYTES:
                return None
    if not file_bytes:
        return None
    out = []
    for chunk in chunks:
        if isinstance(chunk, _BYTES):
            out.append(chunk)
        else:
            data = os.pread(chunk.fd, chunk.length, chunk.position)
            if len(data) != chunk.length:
                raise CloseConnection("segment file shrank under a fetch")
            out.append(data)
    return b"".join(out)
