"""Broker-to-broker traffic, in one place (Kafka's inter-broker NetworkClients and their managers).

- `channels.py`: `NodeChannels`, the connections to the other brokers, one per (peer, purpose),
  with one endpoint, timeout and reconnect-backoff policy; the replica fetchers and the
  AlterPartition sender get theirs through `NodeChannels.connect(node, purpose)`.
- `forwarding.py`: `ForwardingManager`, requests this broker passes on to the controller
  (Kafka's ForwardingManager), and ControlledShutdown.
- `marker_channel.py`: `TransactionMarkerChannel`, the transaction coordinator's markers to the
  partition leaders (Kafka's TransactionMarkerChannelManager).
- `add_partitions_to_txn.py`: `AddPartitionsToTxnManager`, a partition leader's KIP-890
  verification request to a transaction coordinator.

docs/architecture.md ("Broker-to-broker traffic") draws who uses which.
"""
