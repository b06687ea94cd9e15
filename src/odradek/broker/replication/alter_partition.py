"""Leaders report ISR changes to the controller (AlterPartition, key 56; Kafka's AlterPartitionManager).

A leader's `Partition` decides an ISR change (a follower caught up, or one lagging too long),
records it as its pending proposal (`Partition.pending`: until it is answered the high
watermark counts both sets, Kafka's maximal ISR) and submits it here. One task sends what is
queued in AlterPartition requests to the controller the metadata names: v3 carries each ISR
member's broker epoch (KIP-903, from the follower's own Fetch; -1 where unknown) and this
broker's own, v2 the ids alone. Each answer goes back to the partition
(`Partition.on_alter_partition_response`, Kafka's rules): applied; refused as not applied
(back to the committed ISR); refused because the controller has a newer state (the proposal
stays pending until the metadata brings that state: an earlier attempt may have been
applied); or to be sent again.

A proposal is never dropped for a lost answer: a connection error, a timeout, no controller
known, a top-level error or a partition missing from the answer sends it again after
`RETRY_S`, as long as it is still the partition's pending proposal. The controller writes
each change behind a version check, so a retry of an applied change is refused
(INVALID_UPDATE_VERSION) and nothing is applied twice.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from odradek.broker.partition import IsrProposal, Partition
from odradek.broker.replication.channel import ConnectionProvider, HeldConnection, direct_connections
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.cluster.store import MetadataStore

log = logging.getLogger("odradek.broker.alter_partition")

ALTER_PARTITION = 56
MAX_VERSION = 3  # new_isr_with_epochs (KIP-903)
RETRY_S = 0.5

Queued = dict[tuple[str, int], tuple[Partition, IsrProposal]]


class AlterPartitionSender:
    def __init__(self, node_id: int, metadata: MetadataStore, connect: ConnectionProvider | None = None) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self._channel = HeldConnection(connect or direct_connections(node_id), "alter-partition")
        self._queue: Queued = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, partition: Partition, proposal: IsrProposal) -> None:
        """Send `proposal` (the partition's pending one) to the controller."""
        log.info(
            "%s-%d: proposing ISR %s (was %s)",
            partition.topic,
            partition.partition,
            list(proposal.isr),
            list(partition.isr),
        )
        self._queue[partition.key] = (partition, proposal)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._channel.drop()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = {k: e for k, e in self._queue.items() if _still_pending(*e)}
            self._queue = {}
            if not batch:
                continue
            try:
                again = await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the controller moved, is unreachable, or the answer was lost
                log.info("AlterPartition to the controller failed: %r; sending again in %.1f s", e, RETRY_S)
                self._channel.drop()
                again = batch
            if again:
                await asyncio.sleep(RETRY_S)
                for key, entry in again.items():
                    if _still_pending(*entry):
                        self._queue.setdefault(key, entry)
                self._wake.set()

    async def _send(self, batch: Queued) -> Queued:
        """One AlterPartition request for `batch`; returns what is to be sent again."""
        snap = self.metadata.snapshot
        controller = snap.broker(snap.controller_id)
        if controller is None:
            raise ConnectionError("no controller known")
        conn = await self._channel.get(controller)
        version = min(conn.version(ALTER_PARTITION), MAX_VERSION)
        me = snap.broker(self.node_id)
        by_topic: dict[uuid.UUID, list[tuple[Partition, IsrProposal]]] = {}
        again: Queued = {}  # sent and not answered yet
        for key, (part, proposal) in batch.items():
            info = snap.topics.get(part.topic)
            if info is not None:  # a topic gone: its partitions go with it
                by_topic.setdefault(info.topic_id, []).append((part, proposal))
                again[key] = (part, proposal)
        names = {tid: items[0][0].topic for tid, items in by_topic.items()}
        topics = [
            {"topic_id": tid, "partitions": [_partition_data(p, proposal, version) for p, proposal in items]}
            for tid, items in by_topic.items()
        ]
        resp = await conn.request(
            ALTER_PARTITION,
            {"broker_id": self.node_id, "broker_epoch": me.epoch if me is not None else -1, "topics": topics},
            version=version,
        )
        if int(resp.error_code):
            raise ConnectionError(f"AlterPartition: error {ErrorCode(int(resp.error_code)).name}")
        for t in resp.topics:
            name = names.get(t.topic_id)
            for p in t.partitions:
                entry = again.pop((name, int(p.partition_index)), None) if name else None
                if entry is None:
                    continue
                part, proposal = entry
                code = int(p.error_code)
                if code:
                    log.info("%s-%d: ISR change refused: %s", part.topic, part.partition, ErrorCode(code).name)
                isr = tuple(int(b) for b in p.isr)
                if part.on_alter_partition_response(proposal, code, isr, int(p.leader_epoch), int(p.partition_epoch)):
                    again[part.key] = entry
        return again


def _still_pending(part: Partition, proposal: IsrProposal) -> bool:
    return part.pending is proposal and part.is_leader


def _partition_data(part: Partition, proposal: IsrProposal, version: int) -> dict[str, object]:
    data: dict[str, object] = {
        "partition_index": part.partition,
        "leader_epoch": proposal.leader_epoch,
        "leader_recovery_state": 0,
        "partition_epoch": proposal.partition_epoch,
    }
    if version >= 3:
        data["new_isr_with_epochs"] = [{"broker_id": b, "broker_epoch": e} for b, e in proposal.isr_epochs]
    else:
        data["new_isr"] = list(proposal.isr)
    return data
