"""Producer ids for idempotent producers, never handed out twice.

Ids come in blocks of `BLOCK`: a block is claimed before any id of it is used, so after a
crash the next block starts past every id that may have been given out. Where blocks come
from is the metadata's business: a single node persists the end of its last block in the
first log directory (`LocalBlocks`); a cluster claims blocks in ZooKeeper's
/latest_producer_id_block with a conditional write (cluster/zookeeper.py), so no two
brokers ever hand out the same id.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

BLOCK = 1000
FILE_NAME = "producer-id-block"

NextBlock = Callable[[int], Awaitable[int]]  # (block size) -> the first id of a new block


class LocalBlocks:
    """Blocks of a single node: the end of the last block in `producer-id-block`."""

    def __init__(self, directory: str, write_atomic: Callable[[str, bytes], None]) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self._write_atomic = write_atomic
        self._end = 0
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self._end = int(f.read().strip() or 0)

    async def __call__(self, size: int) -> int:
        start = self._end
        self._write_atomic(self.path, f"{start + size}\n".encode())
        self._end = start + size
        return start


class ProducerIdAllocator:
    def __init__(self, next_block: NextBlock) -> None:
        self._next_block = next_block
        self._next = 0
        self._end = 0

    async def next_id(self) -> int:
        if self._next >= self._end:
            start = await self._next_block(BLOCK)
            self._next, self._end = start, start + BLOCK
        pid = self._next
        self._next += 1
        return pid
