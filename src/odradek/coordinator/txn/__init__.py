"""The transaction coordinator over `__transaction_state`: the service the handlers call
(coordinator.py), one shard per partition (shard.py) holding the state of each transactional
id (state.py), and the record format (records.py)."""

from odradek.coordinator.txn.coordinator import TransactionCoordinator, TxnConfig

__all__ = ["TransactionCoordinator", "TxnConfig"]
