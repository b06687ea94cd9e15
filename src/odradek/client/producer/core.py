"""What the asyncio and blocking producers share: config, serializers, partition choice."""

from __future__ import annotations

import time
from typing import Any

from odradek.protocol import records as R

from .. import errors as E
from ..cluster import Cluster
from ..config import PRODUCER, make_config
from .accumulator import Accumulator
from .partitioner import make_partitioner
from .sender import Sender
from .transactions import State, TransactionManager

CODECS = {"none": R.NONE, None: R.NONE, "gzip": R.GZIP, "snappy": R.SNAPPY, "lz4": R.LZ4, "zstd": R.ZSTD}


def default_serializer(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"cannot serialize {type(v).__name__} without a serializer; pass bytes or str")


class ProducerCore:
    def __init__(self, config: dict | None, kwargs: dict) -> None:
        self.config = cfg = make_config(PRODUCER, config, kwargs)
        ctype = cfg["compression.type"]
        if ctype not in CODECS:
            raise ValueError(f"unknown compression.type {ctype!r}")
        self.compression = CODECS[ctype]
        self.transactional_id = cfg["transactional.id"] or None
        if self.transactional_id is not None and not cfg["enable.idempotence"]:
            raise ValueError(
                "transactional.id requires enable.idempotence=true (a transactional producer is idempotent); "
                "leave enable.idempotence unset or true"
            )
        self.batch_size = int(cfg["batch.size"])
        self.max_request_size = int(cfg["max.request.size"])
        self.max_block = int(cfg["max.block.ms"]) / 1000
        self.key_serializer = cfg["key.serializer"] or default_serializer
        self.value_serializer = cfg["value.serializer"] or default_serializer
        self._plain_keys = self.key_serializer is default_serializer
        self._plain_values = self.value_serializer is default_serializer
        self.partitioner = make_partitioner(cfg["partitioner"], self.batch_size)
        self.cluster = Cluster(cfg)
        # appends come from the loop's thread (asyncio API) until a blocking Producer says otherwise
        self.acc = Accumulator(
            batch_size=self.batch_size,
            linger_ms=float(cfg["linger.ms"]),
            buffer_memory=int(cfg["buffer.memory"]),
            threaded=False,
        )
        self.sender = Sender(self.cluster, self.acc, cfg, self.compression)
        self.txn: TransactionManager | None = None
        if self.transactional_id is not None:
            self.txn = TransactionManager(
                self.transactional_id, int(cfg["transaction.timeout.ms"]), self.cluster, self.sender, self.acc
            )
            self.sender.txn = self.txn
            self.sender.transactional_id = self.transactional_id
        self._parts_cache: dict[str, tuple[Any, tuple[list, list]]] = {}  # topic -> (metadata, parts)
        self.closed = False

    async def start(self) -> None:
        await self.cluster.start()
        await self.sender.start()

    def partitions(self, topic: str):
        """(all partitions, available partitions) from the current metadata, or None."""
        md = self.cluster.metadata
        c = self._parts_cache.get(topic)
        if c is not None and c[0] is md:
            return c[1]
        ti = md.topics.get(topic)
        if ti is None or not ti.partitions:
            return None
        allp = sorted(ti.partitions)
        parts = (allp, [p for p in allp if ti.partitions[p].leader >= 0])
        self._parts_cache[topic] = (md, parts)
        return parts

    def prepare(self, topic: str, value, key, headers, partition, timestamp, parts):
        """Serialize and place one record: (partition, ts, key bytes, value bytes, headers, size)."""
        if self.closed:
            raise E.ProducerClosedError("producer closed")
        # bytes pass the default serializers untouched: skip the call (the common case)
        kb = key if key is None or (type(key) is bytes and self._plain_keys) else self.key_serializer(key)
        vb = value if type(value) is bytes and self._plain_values else self.value_serializer(value)
        allp, avail = parts
        chosen = partition is None
        if chosen:
            partition = self.partitioner.partition(topic, kb, allp, avail)
        elif partition not in allp:
            if type(partition) is not int or partition < 0:
                raise ValueError(f"invalid partition {partition!r}: not in 0..{len(allp) - 1}")
            raise E.UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        if headers:
            headers = list(headers.items()) if isinstance(headers, dict) else list(headers)
        size = 24 + (len(kb) if kb else 0) + (len(vb) if vb else 0)
        if headers:
            size += sum(len(k) + (len(v) if v else 0) + 4 for k, v in headers)
        if size > self.max_request_size:
            raise E.RecordTooLargeClientError(
                f"record of ~{size} bytes exceeds max.request.size {self.max_request_size}"
            )
        if kb is None and chosen:  # the sticky partitioner counts only what it placed (as Java's)
            self.partitioner.on_append(topic, partition, size)
        return partition, timestamp, kb, vb, headers, size

    async def flush(self, timeout: float | None = None) -> None:
        if not self.acc.incomplete:
            return
        self.acc.flushing += 1
        self.sender.wakeup()
        try:
            await self.wait_incomplete(timeout)
        finally:
            self.acc.flushing -= 1

    async def wait_incomplete(self, timeout: float | None = None) -> None:
        """Until every batch appended so far is delivered or failed."""
        import asyncio

        pending = list(self.acc.incomplete)
        deadline = None if timeout is None else time.monotonic() + timeout
        for b in pending:
            if b.done:
                continue
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            if b.waiters is None:
                b.waiters = []
            b.waiters.append((fut, loop))
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                raise E.KafkaTimeoutError(f"flush did not complete within {timeout}s") from None

    # ------------------------------------------------------------------ transactions
    def _txn_manager(self) -> TransactionManager:
        if self.txn is None:
            raise E.IllegalStateError("transactional method called on a producer without transactional.id")
        return self.txn

    async def init_transactions(self, timeout: float | None = None) -> None:
        await self._txn_manager().init_transactions(self.max_block if timeout is None else timeout)

    def begin_transaction(self) -> None:
        self._txn_manager().begin_transaction()

    async def send_offsets_to_transaction(self, offsets: dict, group_metadata, timeout: float | None = None) -> None:
        await self._txn_manager().send_offsets_to_transaction(
            offsets, group_metadata, self.max_block if timeout is None else timeout
        )

    async def commit_transaction(self, timeout: float | None = None) -> None:
        await self._txn_manager().commit_transaction(self.flush, self.max_block if timeout is None else timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        await self._txn_manager().abort_transaction(
            self.wait_incomplete, self.max_block if timeout is None else timeout
        )

    async def close(self, timeout: float | None = None) -> None:
        if self.closed:
            return
        txn = self.txn
        if txn is not None and txn.state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR, State.ABORTING):
            # as Java's producer: a transaction still open at close is aborted (not left to time out)
            try:
                await self.abort_transaction(self.max_block if timeout is None else timeout)
            except Exception as e:  # closing anyway
                import logging

                logging.getLogger(__name__).warning("abort of the open transaction at close failed: %r", e)
        self.closed = True
        try:
            await self.sender.stop(drain=True, timeout=timeout)
        finally:
            await self.cluster.close()
