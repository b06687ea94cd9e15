"""Transaction markers written here: one COMMIT or ABORT control batch on a partition this broker leads.

WriteTxnMarkers (k27), sent by a transaction coordinator on another broker, and the
coordinator's marker channel for the partitions led here (broker/interbroker/marker_channel.py)
both append through `write_marker_here`: the marker goes to the partition as leader
(`ReplicaManager.write_txn_marker`, acks=all); a marker on a partition of
`__consumer_offsets` then completes the producer's transactional offset commits in the group
coordinator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.coordinator.group.records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from odradek.broker.replica_manager import ReplicaManager
    from odradek.coordinator.group import GroupCoordinator


async def write_marker_here(
    replica_manager: ReplicaManager,
    group_coordinator: GroupCoordinator,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timeout_ms: int,
) -> int:
    """Append one marker to a partition led here (its error code, 0 when written); for
    `__consumer_offsets`, then complete the producer's pending offsets in the group coordinator."""
    err = int(
        await replica_manager.write_txn_marker(
            topic, partition, producer_id, producer_epoch, coordinator_epoch, commit, timeout_ms
        )
    )
    if not err and topic == OFFSETS_TOPIC:
        group_coordinator.complete_transaction(partition, producer_id, producer_epoch, commit)
    return err
