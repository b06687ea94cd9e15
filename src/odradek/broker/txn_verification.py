"""KIP-890 part 1: a partition leader checks with the transaction coordinator before it takes
the first transactional batch of a producer that has no open transaction on the partition.

A producer that appends to a partition it never added to its transaction (a bug, or a
zombie's late batch arriving after its transaction ended) would otherwise open a
transaction on the partition that no marker ever closes, holding the last stable offset
forever. So, for a Produce request with a transactional id, every partition whose batch is
transactional and whose producer has no ongoing transaction in the partition's producer
state is verified: with the coordinator in this process when this broker leads the id's
`__transaction_state` partition (`TransactionCoordinator.verify_partitions`, no wait), or
with AddPartitionsToTxn v4 `verify_only` to the broker that does
(broker/interbroker/add_partitions_to_txn.py, Kafka's AddPartitionsToTxnManager). Partitions that fail are
answered as Kafka 4 answers (ReplicaManager / AddPartitionsToTxnManager):

- not in the transaction: INVALID_TXN_STATE (TRANSACTION_ABORTABLE for Produce v11+);
- PRODUCER_FENCED: INVALID_PRODUCER_EPOCH;
- CONCURRENT_TRANSACTIONS, a coordinator loading, moved or unreachable: NOT_ENOUGH_REPLICAS
  (retriable without a metadata refresh), "Unable to verify the partition has been added to
  the transaction";
- a marker written to the partition for the producer while a remote verification was in
  flight (the transaction ended meanwhile): INVALID_TXN_STATE (Kafka's verification guard).

Requests without a transactional id, and batches of producers with an open transaction on
the partition, cost one test each: nothing is asked.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from odradek.coordinator.txn.records import TXN_STATE_TOPIC
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import TRANSACTIONAL_MASK

if TYPE_CHECKING:
    from odradek.broker.interbroker.add_partitions_to_txn import AddPartitionsToTxnManager
    from odradek.broker.replica_manager import ReplicaManager
    from odradek.cluster.store import MetadataStore
    from odradek.coordinator.txn import TransactionCoordinator

log = logging.getLogger("odradek.broker.txn_verification")

_RETRIABLE = frozenset(
    {
        int(ErrorCode.concurrent_transactions),
        int(ErrorCode.network_exception),
        int(ErrorCode.coordinator_load_in_progress),
        int(ErrorCode.coordinator_not_available),
        int(ErrorCode.not_coordinator),
    }
)

Refusal = tuple[int, str | None]  # (error code, message)


def _transactional_producer(records: Any) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional first batch (header fields read in place), or None."""
    if len(records) < 61 or not records[22] & TRANSACTIONAL_MASK:  # attributes: bytes 21-22, big endian
        return None
    return int.from_bytes(records[43:51], "big", signed=True), int.from_bytes(records[51:53], "big", signed=True)


class TxnVerification:
    """The produce path's verification: `services.txn_verification.verify(...)` (k00)."""

    def __init__(
        self,
        node_id: int,
        metadata: MetadataStore,
        replica_manager: ReplicaManager,
        txn_coordinator: TransactionCoordinator,
        add_partitions: AddPartitionsToTxnManager,
    ) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.txn_coordinator = txn_coordinator
        self.add_partitions = add_partitions

    async def verify(
        self, transactional_id: str, entries: Sequence[tuple[str, int, Any]], produce_version: int
    ) -> dict[int, Refusal]:
        """The entries (topic, partition, records) that must not be appended, by index, with their answer."""
        rm = self.replica_manager
        to_verify: dict[int, tuple[str, int]] = {}
        producers: set[tuple[int, int]] = set()
        for i, (topic, partition, records) in enumerate(entries):
            producer = _transactional_producer(records)
            if producer is None:
                continue
            producers.add(producer)
            part = rm.get_partition(topic, partition)
            if part is None or not part.is_leader or producer[0] in part.log.producer_state.ongoing:
                continue  # not led here (the append answers that), or its transaction is open here
            to_verify[i] = (topic, partition)
        if not to_verify:
            return {}
        if len(producers) > 1:
            msg = "Transactional records contained more than one producer ID"
            return {i: (int(ErrorCode.invalid_producer_id_mapping), msg) for i in to_verify}
        ((producer_id, epoch),) = producers
        tps = list(to_verify.values())
        errors = await self._ask_coordinator(transactional_id, producer_id, epoch, tps)
        out: dict[int, Refusal] = {}
        for i, tp in to_verify.items():
            err = errors.get(tp, int(ErrorCode.invalid_txn_state))
            if err:
                out[i] = _answer(err, produce_version)
        return out

    async def _ask_coordinator(
        self, txn_id: str, producer_id: int, epoch: int, tps: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        txn = self.txn_coordinator
        info = self.metadata.snapshot.partition(TXN_STATE_TOPIC, txn.partition_for(txn_id))
        if info is None or info.leader < 0:
            return dict.fromkeys(tps, int(ErrorCode.coordinator_not_available))
        if info.leader == self.node_id:
            return txn.verify_partitions(txn_id, producer_id, epoch, tps)
        rm = self.replica_manager
        guards = [rm.start_verification(topic, p, producer_id) for topic, p in tps]
        try:
            out = await self.add_partitions.verify(info.leader, txn_id, producer_id, epoch, tps)
        finally:
            ended = [rm.end_verification(g) for g in guards]
        for tp, marker_written in zip(tps, ended):
            if marker_written and not out.get(tp):
                out[tp] = int(ErrorCode.invalid_txn_state)  # the transaction ended while we asked
        return out


def _answer(err: int, produce_version: int) -> Refusal:
    if err == ErrorCode.producer_fenced:
        return int(ErrorCode.invalid_producer_epoch), None
    if err == ErrorCode.transaction_abortable and produce_version <= 10:
        err = int(ErrorCode.invalid_txn_state)
    if err == ErrorCode.invalid_txn_state:
        return err, "Partition was not added to the transaction"
    if err in _RETRIABLE:
        return (
            int(ErrorCode.not_enough_replicas),
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {ErrorCode(err).name.upper()}",
        )
    return err, None
