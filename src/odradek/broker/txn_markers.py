"""Transaction markers: writing them here, and the coordinator's channel to every partition's leader.

`write_marker_here` appends one marker to a partition this broker leads (WriteTxnMarkers,
k27, and the channel for local partitions both use it); a marker on a partition of
`__consumer_offsets` also completes the producer's transactional offset commits in the
group coordinator.

`MarkerChannel` is the transaction coordinator's `MarkerWriter` (Kafka's
TransactionMarkerChannelManager): the partitions of a transaction are grouped by their
current leader (from the metadata); those led here are written directly, the others are
sent as one WriteTxnMarkers request to each leader over an inter-broker connection. What
cannot be written yet (no leader, NOT_LEADER_OR_FOLLOWER, not enough replicas, a timeout,
a broken connection) is retried after a short backoff with the newest metadata, until
written; a partition whose topic was deleted is dropped. The channel gives up only when
the coordinator's shard moved (its next coordinator sends the markers again) or the
coordinator is fenced (INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.client.conn import Connection
from odradek.coordinator.group.records import OFFSETS_TOPIC
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.services import BrokerServices
    from odradek.cluster.store import MetadataStore

log = logging.getLogger("odradek.broker.txn_markers")

WRITE_TXN_MARKERS = 27
RETRY_BACKOFF_S = 0.1
# Kafka's TransactionMarkerRequestCompletionHandler: these are retried, ...
RETRIABLE = frozenset(
    {
        int(ErrorCode.unknown_topic_or_partition),
        int(ErrorCode.not_leader_or_follower),
        int(ErrorCode.not_enough_replicas),
        int(ErrorCode.not_enough_replicas_after_append),
        int(ErrorCode.request_timed_out),
        int(ErrorCode.kafka_storage_error),
        int(ErrorCode.coordinator_load_in_progress),
        int(ErrorCode.coordinator_not_available),
        int(ErrorCode.not_coordinator),
    }
)
# ... these mean a newer coordinator (or producer epoch) owns the transaction: stop.
FENCED = frozenset({int(ErrorCode.invalid_producer_epoch), int(ErrorCode.transaction_coordinator_fenced)})
# (anything else, a marker the partition cannot take, is logged and the partition dropped)


async def write_marker_here(
    services: BrokerServices,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timeout_ms: int,
) -> int:
    """Append one marker to a partition led here; for `__consumer_offsets`, then complete
    the producer's pending offsets in the group coordinator."""
    err = int(
        await services.replica_manager.write_txn_marker(
            topic, partition, producer_id, producer_epoch, coordinator_epoch, commit, timeout_ms
        )
    )
    if not err and topic == OFFSETS_TOPIC:
        services.group_coordinator.complete_transaction(partition, producer_id, producer_epoch, commit)
    return err


class MarkerChannel:
    def __init__(self, services_of: Callable[[], BrokerServices], metadata: MetadataStore, timeout_ms: int) -> None:
        self._services_of = services_of
        self.metadata = metadata
        self.timeout_ms = timeout_ms
        self._conns: dict[int, Connection] = {}

    @property
    def node_id(self) -> int:
        return self._services_of().node_id

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: frozenset[tuple[str, int]],
        still_valid: Callable[[], bool],
    ) -> bool:
        """True once every partition has the marker; False when given up (see the module doc)."""
        pending = set(partitions)
        while pending:
            if not still_valid():
                return False
            snap = self.metadata.snapshot
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(pending):
                if tp[0] not in snap.topics:
                    log.info("dropping the marker of producer %d for %s-%d: the topic is gone", producer_id, *tp)
                    pending.discard(tp)
                    continue
                info = snap.partition(*tp)
                if info is not None and info.leader >= 0:
                    by_leader.setdefault(info.leader, []).append(tp)
            sends = [
                self._send(leader, tps, producer_id, producer_epoch, coordinator_epoch, commit)
                for leader, tps in by_leader.items()
            ]
            for results in await asyncio.gather(*sends):
                for tp, err in results.items():
                    if not err:
                        pending.discard(tp)
                    elif err in FENCED:
                        log.warning(
                            "marker of producer %d epoch %d for %s-%d refused (%s): the coordinator is fenced",
                            producer_id,
                            producer_epoch,
                            *tp,
                            ErrorCode(err).name,
                        )
                        return False
                    elif err not in RETRIABLE:
                        log.error(
                            "marker of producer %d for %s-%d failed with %s; dropping it",
                            producer_id,
                            *tp,
                            ErrorCode(err).name if err in ErrorCode._value2member_map_ else err,
                        )
                        pending.discard(tp)
            if pending:
                await asyncio.sleep(RETRY_BACKOFF_S)
        return True

    async def _send(
        self,
        leader: int,
        tps: list[tuple[str, int]],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> dict[tuple[str, int], int]:
        services = self._services_of()
        if leader == services.node_id:
            errors = await asyncio.gather(
                *(
                    write_marker_here(
                        services, topic, p, producer_id, producer_epoch, coordinator_epoch, commit, self.timeout_ms
                    )
                    for topic, p in tps
                )
            )
            return dict(zip(tps, errors))
        by_topic: dict[str, list[int]] = {}
        for topic, p in tps:
            by_topic.setdefault(topic, []).append(p)
        request = {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": commit,
                    "coordinator_epoch": coordinator_epoch,
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                }
            ]
        }
        unavailable = int(ErrorCode.not_leader_or_follower)
        try:
            conn = await self._connection(leader)
            if conn is None:
                return dict.fromkeys(tps, unavailable)
            resp = await conn.request(WRITE_TXN_MARKERS, request, timeout=self.timeout_ms / 1000 + 5)
        except Exception as e:  # noqa: BLE001 - the leader moved or is down: retried with new metadata
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, e)
            self._drop(leader)
            return dict.fromkeys(tps, unavailable)
        out = dict.fromkeys(tps, unavailable)
        for marker in resp.markers:
            for topic in marker.topics:
                for pr in topic.partitions:
                    out[(topic.name, pr.partition_index)] = int(pr.error_code)
        return out

    async def request_to(self, node_id: int, api_key: int, data: Any, *, version: int) -> Any:
        """One request to another broker over this channel's connection to it (KIP-890's
        verify-only AddPartitionsToTxn); raises ConnectionError when it cannot be sent."""
        conn = await self._connection(node_id)
        if conn is None:
            raise ConnectionError(f"broker {node_id} is not in the metadata")
        try:
            return await conn.request(api_key, data, version=version, timeout=self.timeout_ms / 1000 + 5)
        except Exception:
            self._drop(node_id)
            raise

    async def _connection(self, node_id: int) -> Connection | None:
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        self._drop(node_id)
        broker = self.metadata.snapshot.broker(node_id)
        if broker is None:
            return None
        conn = await Connection(
            broker.host, broker.port, node_id=node_id, client_id=f"broker-{self.node_id}-txn-markers"
        ).connect()
        self._conns[node_id] = conn
        return conn

    def _drop(self, node_id: int) -> None:
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node_id in list(self._conns):
            self._drop(node_id)
