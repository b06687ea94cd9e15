"""Leaders report ISR changes to the controller (AlterPartition, key 56; Kafka's AlterPartitionManager).

A leader that wants a follower in or out of the ISR records the proposal on the partition
(`pending_isr`: until it is confirmed the high watermark counts both sets) and queues it
here; one task sends the queued proposals in AlterPartition v2 requests to the controller
the metadata names, and applies each answer: the new ISR and partition epoch, or, on an
error, drops the proposal (the next check proposes again from the new state). The
controller writes the change with a version check, so a proposal made from a stale state
is refused (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH) and nothing is lost by racing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from odradek.client.conn import Connection
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.partition import Partition
    from odradek.cluster.store import MetadataStore

log = logging.getLogger("odradek.broker.alter_partition")

ALTER_PARTITION = 56
RETRY_S = 0.5


class AlterPartitionSender:
    def __init__(self, node_id: int, metadata: MetadataStore) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self._queue: dict[tuple[str, int], tuple[Partition, tuple[int, ...], int]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self._conn_to = -1

    def propose(self, part: Partition, isr: tuple[int, ...]) -> None:
        """Ask the controller to make `isr` the partition's ISR."""
        if part.pending_isr is not None:
            return
        part.pending_isr = isr
        part.refresh_solo()
        self._queue[part.key] = (part, isr, part.leader_epoch)
        log.info("%s-%d: proposing ISR %s (was %s)", part.topic, part.partition, list(isr), list(part.isr))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._conn is not None:
            self._conn.close()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._queue:
                continue
            batch, self._queue = self._queue, {}
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the controller moved or is unreachable: propose again later
                log.info("AlterPartition to the controller failed: %r; retrying", e)
                self._drop_connection()
                for part, _isr, _epoch in batch.values():
                    part.pending_isr = None
                    part.refresh_solo()
                await asyncio.sleep(RETRY_S)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn, self._conn_to = None, -1

    async def _connection(self) -> Connection:
        snap = self.metadata.snapshot
        controller = snap.broker(snap.controller_id)
        if controller is None:
            raise ConnectionError("no controller known")
        if self._conn is None or not self._conn.connected or self._conn_to != controller.node_id:
            self._drop_connection()
            self._conn = await Connection(
                controller.host, controller.port, node_id=controller.node_id, client_id=f"broker-{self.node_id}"
            ).connect()
            self._conn_to = controller.node_id
        return self._conn

    async def _send(self, batch: dict[tuple[str, int], tuple[Partition, tuple[int, ...], int]]) -> None:
        snap = self.metadata.snapshot
        by_topic: dict[str, list[tuple[Partition, tuple[int, ...], int]]] = {}
        for part, isr, epoch in batch.values():
            by_topic.setdefault(part.topic, []).append((part, isr, epoch))
        ids: dict[uuid.UUID, str] = {}  # topic id -> name
        topics = []
        for topic, items in by_topic.items():
            info = snap.topics.get(topic)
            if info is None:
                continue
            ids[info.topic_id] = topic
            topics.append(
                {
                    "topic_id": info.topic_id,
                    "partitions": [
                        {
                            "partition_index": part.partition,
                            "leader_epoch": epoch,
                            "new_isr": list(isr),
                            "leader_recovery_state": 0,
                            "partition_epoch": part.partition_epoch,
                        }
                        for part, isr, epoch in items
                    ],
                }
            )
        conn = await self._connection()
        resp = await conn.request(
            ALTER_PARTITION, {"broker_id": self.node_id, "broker_epoch": -1, "topics": topics}, version=2
        )
        if int(resp.error_code):
            raise ConnectionError(f"AlterPartition: error {int(resp.error_code)}")
        for t in resp.topics:
            name = ids.get(t.topic_id)
            for p in t.partitions:
                entry = batch.get((name, int(p.partition_index))) if name else None
                if entry is None:
                    continue
                part, isr, epoch = entry
                code = int(p.error_code)
                if code == 0 and part.leader_epoch == epoch == int(p.leader_epoch):
                    part.isr_changed(tuple(int(b) for b in p.isr), int(p.partition_epoch))
                    continue
                if code:
                    log.info("%s-%d: ISR change refused: %s", part.topic, part.partition, ErrorCode(code).name)
                part.pending_isr = None
                part.refresh_solo()
