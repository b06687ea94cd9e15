"""One shard of the transaction coordinator: the transactional ids of one partition of
`__transaction_state` and their metadata (state.py), rebuilt by replaying the partition
(Kafka's TransactionStateManager keeps one such map per partition). A `Shard` of
coordinator/runtime.py; the operations on it are coordinator.py's."""

from __future__ import annotations

from odradek.coordinator.runtime import CoordinatorResult
from odradek.coordinator.txn.records import TxnRecord, decode_key, decode_value
from odradek.coordinator.txn.state import TxnMetadata, TxnState


class TxnShard:
    def __init__(self) -> None:
        self.transactions: dict[str, TxnMetadata] = {}

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self.transactions.get(transactional_id)

    def ending(self) -> list[TxnMetadata]:
        """Transactions in PrepareCommit / PrepareAbort with nothing pending: their markers and
        completion are to be written (again, after a load)."""
        return [
            md
            for md in self.transactions.values()
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and md.pending is None
        ]

    # =================================================================== the runtime's Shard
    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        transactional_id = decode_key(key)
        v = decode_value(value)
        if v is None:
            self.transactions.pop(transactional_id, None)
        else:
            self.transactions[transactional_id] = TxnMetadata.from_log(transactional_id, v)

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """`__transaction_state` holds no transactions of its own."""

    def on_loaded(self, now: int) -> None:
        pass

    def on_unloaded(self) -> list[tuple[object, object]]:
        return []  # requests wait on their writes, which complete with NOT_COORDINATOR

    def next_deadline(self) -> int | None:
        return None  # timeouts and expiry are periodic checks (coordinator.py)

    def expire(self, now: int) -> list[CoordinatorResult[TxnRecord]]:
        return []
