"""The transaction coordinator's markers to every partition's leader (Kafka's TransactionMarkerChannelManager).

`TransactionMarkerChannel` is the transaction coordinator's `MarkerWriter`: the partitions of
a transaction are grouped by their current leader (from the metadata); those led here are
written directly (`write_here`: broker/txn_markers.py), the others are sent as one
WriteTxnMarkers request to each leader over the channels' `txn-markers` connection to it
(broker/interbroker/channels.py: its timeout and reconnect backoff). What cannot be written
yet (no leader, NOT_LEADER_OR_FOLLOWER, not enough replicas, a timeout, a broken
connection) is retried after a short backoff with the newest metadata, until written; a
partition whose topic was deleted is dropped. The channel gives up only when the
coordinator's shard moved (its next coordinator sends the markers again) or the coordinator
is fenced (INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED).

Markers written here wait for the in-sync replicas up to `request.timeout.ms`, as a leader
does for a WriteTxnMarkers request (Kafka appends markers with its request timeout).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from odradek.broker.interbroker.channels import NodeChannels, Purpose
from odradek.cluster.store import MetadataStore
from odradek.protocol.errors import ErrorCode

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

# (topic, partition, producer id, producer epoch, coordinator epoch, commit, timeout ms) -> error code
WriteHere = Callable[[str, int, int, int, int, bool, int], Awaitable[int]]


class TransactionMarkerChannel:
    def __init__(self, node_id: int, metadata: MetadataStore, channels: NodeChannels, write_here: WriteHere) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.channels = channels
        self.write_here = write_here
        self.timeout_ms = channels.policy.request_timeout_ms

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
        if leader == self.node_id:
            errors = await asyncio.gather(
                *(
                    self.write_here(topic, p, producer_id, producer_epoch, coordinator_epoch, commit, self.timeout_ms)
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
            resp = await self.channels.request(leader, Purpose.TXN_MARKERS, WRITE_TXN_MARKERS, request)
        except Exception as e:  # noqa: BLE001 - the leader moved or is down: retried with new metadata
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return dict.fromkeys(tps, unavailable)
        out = dict.fromkeys(tps, unavailable)
        for marker in resp.markers:
            for topic in marker.topics:
                for pr in topic.partitions:
                    out[(topic.name, pr.partition_index)] = int(pr.error_code)
        return out
