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

Where TLS goes (not implemented): a `TlsTransport` with the same four members, chosen by
the listener's security protocol where the connection is made (server.py `_accept_loop`).
It keeps an `ssl.SSLObject` over two `ssl.MemoryBIO`s: `recv_into` reads ciphertext from the
socket into the incoming BIO and returns the plaintext `SSLObject.read` gives (raising
BlockingIOError on SSLWantReadError; plaintext already decrypted inside the SSL object must
be drained before waiting for readability again), and `write` has no sendfile: every chunk,
a file region too (`os.pread` in pieces of a few hundred KiB), goes through
`SSLObject.write` and the outgoing BIO's ciphertext to the socket. The handshake runs before
the connection reads its first request.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any, Protocol


class CloseConnection(Exception):
    """Raised while handling or answering a request when the only right answer is to hang up."""


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

    async def write(self, chunks: list[Any]) -> None:
        """Send one response's chunks in order (bytes, and file regions). Raises OSError if the
        peer is gone, CloseConnection if the response cannot be completed."""

    def shutdown(self) -> None:
        """Shut both directions down: a reader blocked on the socket sees end of stream."""

    def close(self) -> None: ...


class PlaintextTransport:
    """An unencrypted socket: file regions with os.sendfile (small ones inline)."""

    __slots__ = ("sock", "fd", "loop", "recv_into")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.loop = loop
        self.recv_into = sock.recv_into  # the socket's own method: nothing in between when reading

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

    async def _sendall(self, data: bytes | bytearray | memoryview) -> None:
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
        loop, fd = self.loop, self.fd
        fut = loop.create_future()

        def ready() -> None:
            loop.remove_writer(fd)
            if not fut.done():
                fut.set_result(None)

        loop.add_writer(fd, ready)
        fut.add_done_callback(lambda f: loop.remove_writer(fd) if f.cancelled() else None)
        return fut


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
