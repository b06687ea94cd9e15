"""Length-prefixed frames (int32 size, then the payload), bounded by a maximum size.

Sans-IO: feed bytes in, take whole frames out. Frames are handed out as
memoryviews into the bytes received (no copy); a frame split across several
reads is joined once, when its last byte arrives.
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
    """Accumulates bytes and yields complete frame payloads (as memoryviews)."""

    __slots__ = ("_pending", "_pending_len", "_need", "_max")

    def __init__(self, max_frame_size: int) -> None:
        self._pending: list[bytes] = []  # pieces of an incomplete frame
        self._pending_len = 0
        self._need = 0  # bytes the incomplete frame needs in all (0: size not known yet)
        self._max = max_frame_size

    def feed(self, data: bytes) -> Iterator[memoryview]:
        if self._pending:
            self._pending.append(data)
            self._pending_len += len(data)
            if self._need and self._pending_len < self._need:
                return
            data = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0
            self._need = 0
        view = memoryview(data)
        pos = 0
        n = len(data)
        while n - pos >= 4:
            size = int.from_bytes(view[pos : pos + 4], "big", signed=True)
            if size < 0:
                raise InvalidFrame(f"negative frame size {size}")
            if size > self._max:
                raise FrameTooLarge(size, self._max)
            end = pos + 4 + size
            if end > n:
                self._need = 4 + size
                break
            yield view[pos + 4 : end]
            pos = end
        if pos < n:
            rest = data[pos:] if pos else data
            self._pending = [rest]
            self._pending_len = len(rest)

    @property
    def buffered(self) -> int:
        return self._pending_len


def encode_frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload
