"""What a coordinator needs of the partitions of its log, and nothing more (Kafka's PartitionWriter).

A coordinator (groups over `__consumer_offsets`, transactions over `__transaction_state`)
appends the records of its state changes and must answer a request only once they are
committed (the high watermark passed them: with replication, the whole ISR has them). The
two are separate steps, as in Kafka: `append_as_leader` writes a batch to the local log at
once and returns its offsets, so that the writes of one partition go to the log in the order
their transitions ran, one right after the other; `wait_for_commit` waits (in the replica
manager's produce purgatory, woken by high-watermark advances and leadership changes) until
an offset is committed, so that several writes can be waiting for replication at once.

A coordinator rebuilds its state when elected by reading its partition up to the log end
offset, not the high watermark (Kafka's loaders read with FetchIsolation.LOG_END): a follower
that just became leader may not know yet that its tail is committed (it learns the high
watermark from the old leader's fetch responses), and that tail holds records the old leader
had committed and answered for; the new leader's log is the one its followers will take.
That tail may also hold records no leader committed (the old leader appended them and died
before every in-sync follower had them): the runtime shows no state read from it until the
high watermark passes it (coordinator/runtime.py, "Reads of committed state"). The broker's
replica manager implements this protocol; coordinator/runtime.py is its one user; the
coordinators never see the broker.

Which partitions a coordinator serves follows leadership: the broker calls the
coordinator's `on_elected(topic, partition, leader_epoch)` / `on_resigned(...)` hooks, which
the runtime follows.
"""

from __future__ import annotations

from typing import Protocol


class CoordinatorPartitions(Protocol):
    def append_as_leader(self, topic: str, partition: int, leader_epoch: int, batch: bytes) -> tuple[int, int]:
        """Append one record batch to the partition's log now, as its leader at `leader_epoch`
        (acks=all: refused while the ISR is below min.insync.replicas): (first offset, last
        offset) of its records. Raises odradek.protocol.errors.KafkaError (of the Kafka code)
        when it is not appended: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or
        UNKNOWN_LEADER_EPOCH when this broker does not lead the partition at that epoch."""
        ...

    async def wait_for_commit(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None:
        """Return once the record at `offset` (appended by `append_as_leader`) is committed:
        the high watermark passed it (and the log flushed it, when its append made the log due
        for a flush). Raises KafkaError when it cannot be known to be: NOT_LEADER_OR_FOLLOWER
        (leadership lost), NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank below
        min.insync.replicas), REQUEST_TIMED_OUT after `timeout_ms`, KAFKA_STORAGE_ERROR."""
        ...

    def read_log_bytes(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Whole batches from `offset` below the log end offset, and the log end offset.
        Plain file reads: safe to call from a worker thread."""
        ...

    def log_start_offset(self, topic: str, partition: int) -> int: ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    def high_watermark(self, topic: str, partition: int) -> int:
        """What is committed of the partition here: a coordinator shows no state from records
        at or above it (coordinator/runtime.py, "Reads of committed state")."""
        ...
