"""Length-prefixed frames (int32 size, then the payload), bounded by a maximum size.

Sans-IO, and shared by the broker (requests) and the client (responses). `FrameReader`
lends the caller the memory to receive into (`get_buffer()` / `buffer_updated(n)`, the
shape of `asyncio.BufferedProtocol`), so bytes are copied from the kernel once:

* frames no larger than the scratch buffer gather there; each whole one is copied out as
  `bytes` (the scratch is reused at once), and a partial one moves to the front. A reader
  holds a scratch buffer only while bytes of an unfinished frame wait in it: once it is
  empty it goes back to a pool the process's readers share, so an idle connection holds no
  receive memory (2,000 idle broker connections held 64 KiB each before: 128 MiB);
* a frame larger than the scratch buffer gets a buffer of its own, which the socket then
  fills directly; the whole frame is handed out as a read-only memoryview of it, no copy.
  Such buffers are kept for the next large frame (a fresh 1 MiB buffer costs its zeroing
  and a page fault per 4 KiB: ~20 % of a 1 KiB-record consumer's CPU), but a kept buffer is
  reused only once no memoryview refers to it any more: a response decoded into views of
  it (Fetch records) keeps its bytes for as long as it is held.

`feed(data)` is the bytes-in form of the same thing (tests, and callers that get bytes).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator

_I32 = struct.Struct(">i")
SCRATCH_SIZE = 256 * 1024
SPARE_MAX_SIZE = 64 * 1024 * 1024
_POOL_MAX = 8  # empty scratch buffers kept per size, for whichever reader receives next

# size -> [(buffer, its memoryview)]: scratch buffers no reader holds. Readers of the broker
# run on its one event loop; the client's run on their I/O threads, and list.pop/append are
# atomic, so a buffer is never handed to two readers.
_pool: dict[int, list[tuple[bytearray, memoryview]]] = {}


class ProtocolError(ValueError):
    """The peer broke the protocol; the only answer is to close the connection."""


class FrameError(ProtocolError):
    """A frame size that cannot be read past (the stream is unusable from here on)."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes", size)
        self.limit = limit


class InvalidFrame(FrameError):
    pass


class FrameReader:
    """Splits a byte stream into frame payloads: `bytes` (small) or read-only memoryviews (large).

    Whole frames wait in `frames` (a deque) for the caller to pop. A bad size raises
    `FrameError` from `buffer_updated`/`feed` once the frames before it are queued; the
    reader refuses more bytes after that.
    """

    __slots__ = (
        "frames",
        "_max",
        "_min",
        "_scratch_size",
        "_free",
        "_scratch",
        "_sview",
        "_have",
        "_frame",
        "_fview",
        "_fpos",
        "_spares",
        "_spare_count",
        "_spare_max",
        "error",
    )

    def __init__(
        self,
        max_frame_size: int,
        *,
        min_frame_size: int = 0,
        scratch_size: int = SCRATCH_SIZE,
        spare_count: int = 2,
        spare_max_size: int = SPARE_MAX_SIZE,
    ) -> None:
        self.frames: deque[bytes | memoryview] = deque()
        self._max = max_frame_size
        self._min = min_frame_size
        self._scratch_size = scratch_size
        self._free = _pool.setdefault(scratch_size, [])
        self._scratch: bytearray | None = None  # borrowed from the pool while it holds bytes
        self._sview: memoryview | None = None
        self._have = 0  # bytes pending at the start of the scratch buffer
        self._frame: bytearray | None = None  # the large frame being received (after its size)
        self._fview: memoryview | None = None
        self._fpos = 0
        self._spares: list[bytearray] = []
        self._spare_count = spare_count
        self._spare_max = spare_max_size
        self.error: FrameError | None = None  # once set, raised by every later buffer_updated

    @property
    def buffered(self) -> int:
        """Bytes received that are not yet part of a whole frame."""
        return self._fpos if self._fview is not None else self._have

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next bytes go: the rest of the large frame's buffer, or the scratch buffer's free space."""
        fview = self._fview
        if fview is not None:
            return fview[self._fpos :]
        sview = self._sview
        if sview is None:
            try:
                self._scratch, sview = self._free.pop()
            except IndexError:
                self._scratch = bytearray(self._scratch_size)
                sview = memoryview(self._scratch)
            self._sview = sview
        return sview[self._have :]

    @property
    def max_frame_size(self) -> int:
        return self._max

    @max_frame_size.setter
    def max_frame_size(self, size: int) -> None:
        """A new limit for the frames whose size is read from now on (SASL: raised once authenticated)."""
        self._max = size

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` were written at the start of the last `get_buffer()`."""
        fview = self._fview
        if fview is not None:  # a large frame in its own buffer (never after an error)
            self._fpos += nbytes
            if self._fpos == len(fview):
                frame = self._frame
                assert frame is not None
                self.frames.append(fview.toreadonly())
                fview.release()
                self._frame = self._fview = None
                if len(self._spares) < self._spare_count and len(frame) <= self._spare_max:
                    self._spares.append(frame)  # reused only once nothing refers to it (_buffer_for)
            return
        if self.error is not None:
            raise self.error
        have = self._have + nbytes
        buf, view = self._scratch, self._sview
        assert buf is not None and view is not None, "buffer_updated without get_buffer"
        frames = self.frames
        pos = 0
        while have - pos >= 4:
            size = _I32.unpack_from(buf, pos)[0]
            if size < self._min or size > self._max:
                self._have = 0
                self.error = (
                    FrameTooLarge(size, self._max)
                    if size > self._max
                    else InvalidFrame(
                        f"negative frame size {size}" if size < 0 else f"frame size {size} below {self._min}", size
                    )
                )
                raise self.error
            end = pos + 4 + size
            if end > have:
                if end - pos > len(buf):  # too big for scratch: its own buffer, filled from here on
                    got = have - pos - 4
                    frame = self._buffer_for(size)
                    fview = memoryview(frame)[:size]
                    fview[:got] = view[pos + 4 : have]
                    self._frame, self._fview, self._fpos = frame, fview, got
                    pos = have
                break
            frames.append(bytes(view[pos + 4 : end]))
            pos = end
        if pos:
            rest = have - pos
            if rest:
                buf[:rest] = view[pos:have]  # the start of the next frame moves to the front
            have = rest
        self._have = have
        if not have:  # nothing waits in the scratch buffer: back to the pool
            self._scratch = self._sview = None
            if len(self._free) < _POOL_MAX:
                self._free.append((buf, view))

    def _buffer_for(self, size: int) -> bytearray:
        """A spare buffer of at least `size` bytes that nothing refers to any more, or a new one."""
        for i, b in enumerate(self._spares):
            if len(b) >= size:
                try:  # resizing fails while any buffer view of it is alive (a frame still held)
                    b.append(0)
                except BufferError:
                    continue
                del b[-1]
                return self._spares.pop(i)
        return bytearray(size)

    def feed(self, data: bytes) -> None:
        """Copy `data` in (through get_buffer/buffer_updated); whole frames land in `frames`."""
        view = memoryview(data)
        while view:
            buf = self.get_buffer(len(view))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            view = view[n:]
            self.buffer_updated(n)

    def __iter__(self) -> Iterator[bytes | memoryview]:
        """Pop the whole frames received so far."""
        frames = self.frames
        while frames:
            yield frames.popleft()


def encode_frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload
