"""Length-prefixed frames (int32 size, then the payload), bounded by a maximum size.

Sans-IO: feed bytes in, take whole frames out.
"""

from __future__ import annotations

from collections.abc import Iterator


class FrameTooLarge(ValueError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class InvalidFrame(ValueError):
    pass


class FrameDecoder:
    """Accumulates bytes and yields complete frame payloads."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_size: int) -> None:
        self._buf = bytearray()
        self._max = max_frame_size

    def feed(self, data: bytes) -> Iterator[bytes]:
        if not self._buf:
            # Fast path: frames are sliced straight out of what was received (one copy
            # fewer); only a trailing partial frame is kept.
            yield from self._feed_fresh(data)
            return
        buf = self._buf
        buf += data
        pos = 0
        n = len(buf)
        try:
            while n - pos >= 4:
                size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
                if size < 0:
                    raise InvalidFrame(f"negative frame size {size}")
                if size > self._max:
                    raise FrameTooLarge(size, self._max)
                end = pos + 4 + size
                if end > n:
                    break
                yield bytes(buf[pos + 4 : end])
                pos = end
        finally:
            if pos:
                del buf[:pos]

    def _feed_fresh(self, data: bytes) -> Iterator[bytes]:
        pos = 0
        n = len(data)
        while n - pos >= 4:
            size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
            if size < 0:
                raise InvalidFrame(f"negative frame size {size}")
            if size > self._max:
                raise FrameTooLarge(size, self._max)
            end = pos + 4 + size
            if end > n:
                break
            yield data[pos + 4 : end] if pos or end != n else data[4:]
            pos = end
        if pos < n:
            self._buf += data[pos:]

    @property
    def buffered(self) -> int:
        return len(self._buf)


def encode_frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload
