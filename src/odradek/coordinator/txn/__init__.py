"""Transactions: the state of each transactional id (state.py), rebuilt by replaying
__transaction_state (records.py), and its asyncio runtime (runtime.py)."""

from odradek.coordinator.txn.runtime import TransactionCoordinator, TxnConfig

__all__ = ["TransactionCoordinator", "TxnConfig"]
