"""What a coordinator needs of the partitions of its log, and nothing more (Kafka's PartitionWriter).

A coordinator (groups over `__consumer_offsets`, transactions over `__transaction_state`)
appends the records of its state changes and must answer a request only once they are
committed (the high watermark passed them: with replication, the whole ISR has them). It
rebuilds its state when elected by reading its partition up to the log end offset, not the
high watermark (Kafka's loaders read with FetchIsolation.LOG_END): a follower that just
became leader may not know yet that its tail is committed (it learns the high watermark from
the old leader's fetch responses), and that tail holds records the old leader had committed
and answered for; the new leader's log is the one its followers will take. The broker's
replica manager implements this protocol; coordinator/runtime.py is its one user; the
coordinators never see the broker.

Which partitions a coordinator serves follows leadership: the broker calls the
coordinator's `on_elected(topic, partition, leader_epoch)` / `on_resigned(...)` hooks, which
the runtime follows.
"""

from __future__ import annotations

from typing import Protocol


class CoordinatorPartitions(Protocol):
    async def append_committed(self, topic: str, partition: int, batch: bytes, timeout_ms: int) -> int:
        """Append one record batch as leader; return its base offset once committed.
        Raises odradek.protocol.errors.KafkaError (of the Kafka code) when it is not."""
        ...

    def read_log_bytes(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Whole batches from `offset` below the log end offset, and the log end offset.
        Plain file reads: safe to call from a worker thread."""
        ...

    def log_start_offset(self, topic: str, partition: int) -> int: ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...
