"""Producer ids for idempotent producers, never reused across restarts.

Ids are handed out from blocks; the end of the current block is persisted
(atomically) before any id of it is used, so after a crash the next block starts
past every id that may have been given out.
"""

from __future__ import annotations

import os
from collections.abc import Callable

BLOCK = 1000
FILE_NAME = "producer-id-block"


class ProducerIdAllocator:
    def __init__(self, directory: str, write_atomic: Callable[[str, bytes], None]) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self._write_atomic = write_atomic
        self._next = 0
        self._end = 0
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self._next = self._end = int(f.read().strip() or 0)

    def next_id(self) -> int:
        if self._next >= self._end:
            self._end = self._next + BLOCK
            self._write_atomic(self.path, f"{self._end}\n".encode())
        pid = self._next
        self._next += 1
        return pid
