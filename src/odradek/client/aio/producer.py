"""AIOProducer: the asyncio producer."""

from __future__ import annotations

import asyncio
from typing import Any

from ..producer.accumulator import FutureRecordMetadata, RecordMetadata
from ..producer.core import ProducerCore


class AIOProducer:
    """``p = AIOProducer({"bootstrap.servers": ...}); await p.start()``.

    ``fut = await p.send(topic, value, key=..., headers=..., partition=..., timestamp=...)``
    queues the record (waiting up to max.block.ms for metadata and buffer space) and returns
    a future to await for its `RecordMetadata`; ``await p.send_and_wait(...)`` does both.

    With ``transactional_id=...``: ``await p.init_transactions()`` once, then per transaction
    ``p.begin_transaction()``, sends, optionally ``await p.send_offsets_to_transaction(...)``,
    and ``await p.commit_transaction()`` or ``await p.abort_transaction()``.
    """

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._core = ProducerCore(config, kwargs)
        self.config = self._core.config

    async def start(self) -> AIOProducer:
        await self._core.start()
        return self

    async def __aenter__(self) -> AIOProducer:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def send(
        self,
        topic: str,
        value=None,
        key=None,
        headers=None,
        partition: int | None = None,
        timestamp: int | None = None,
        callback=None,
    ) -> FutureRecordMetadata:
        core = self._core
        parts = core.partitions(topic)
        if parts is None or (partition is not None and partition >= len(parts[0])):
            await core.cluster.wait_for_topic(topic, core.max_block, partition)
            parts = core.partitions(topic)
        p, ts, kb, vb, hs, size = core.prepare(topic, value, key, headers, partition, timestamp, parts)
        if core.txn is not None:
            core.txn.maybe_add_partition((topic, p))
        acc = core.acc
        fut = acc.try_append(topic, p, ts, kb, vb, hs, size)
        if fut is None:
            fut = await acc.append_async(topic, p, ts, kb, vb, hs, size, core.max_block)
        elif acc.yield_due:
            # A send() that never suspends would starve the sender until the caller awaits
            # something else: everything would queue first and go out afterwards.
            acc.yield_due = False
            await asyncio.sleep(0)
        if callback is not None:
            fut.add_callback(callback)
        return fut

    async def send_and_wait(
        self, topic: str, value=None, key=None, headers=None, partition: int | None = None, timestamp: int | None = None
    ) -> RecordMetadata:
        fut = await self.send(topic, value, key, headers, partition, timestamp)
        return await fut

    async def flush(self, timeout: float | None = None) -> None:
        await self._core.flush(timeout)

    # Transactions (``transactional.id``), as Java's KafkaProducer: timeouts default to max.block.ms.
    async def init_transactions(self, timeout: float | None = None) -> None:
        """Get the transactional id's producer id and epoch from its coordinator, fencing older
        producers with the same id and completing (or aborting) their open transaction."""
        await self._core.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._core.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: dict, group_metadata, timeout: float | None = None) -> None:
        """Commit `offsets` ({TopicPartition: OffsetAndMetadata | int}, the next offsets to read)
        for the consumer group of `group_metadata` (`AIOConsumer.group_metadata()`, or a group
        id) as part of the transaction: visible only if it commits."""
        await self._core.send_offsets_to_transaction(offsets, group_metadata, timeout)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit: every record of the transaction becomes visible to read_committed
        consumers, with the offsets sent to it."""
        await self._core.commit_transaction(timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the records not sent yet, wait for those in flight, and abort the transaction."""
        await self._core.abort_transaction(timeout)

    async def partitions_for(self, topic: str) -> list[int]:
        await self._core.cluster.wait_for_topic(topic, self._core.max_block)
        return self._core.partitions(topic)[0]

    async def close(self, timeout: float | None = None) -> None:
        await self._core.close(timeout)

    @property
    def metrics(self) -> dict:
        return {"buffer_used": self._core.acc.used, "incomplete_batches": len(self._core.acc.incomplete)}
