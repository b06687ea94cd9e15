"""Client exceptions: every broker error code's class from `odradek.protocol.errors`,
plus the few errors only a client raises.

Each class has `code`, `name` and `retriable`; catch `KafkaError` for all of them.
"""

from __future__ import annotations

from odradek.protocol import errors as _perrors
from odradek.protocol.errors import *  # noqa: F403  (one class per Kafka error code)
from odradek.protocol.errors import KafkaError, NetworkExceptionError


class KafkaConnectionError(NetworkExceptionError):
    """The connection to a broker failed or was lost (retriable)."""

    retriable = True


class KafkaTimeoutError(KafkaError):
    """A client-side deadline passed (max.block.ms, delivery.timeout.ms, a blocking call)."""

    name = "timeout"
    retriable = True


class NoBrokersAvailable(KafkaConnectionError):
    """None of the bootstrap servers could be reached."""


class IllegalStateError(KafkaError):
    """The client was used in a way its current state does not allow (closed, not subscribed...)."""

    name = "illegal_state"


class ProducerClosedError(IllegalStateError):
    name = "producer_closed"


class CommitFailedError(KafkaError):
    """An offset commit could not complete because the group rebalanced."""

    name = "commit_failed"


class NoOffsetForPartitionError(KafkaError):
    """auto.offset.reset=none and the partition has no committed offset."""

    name = "no_offset_for_partition"


class RecordTooLargeClientError(KafkaError):
    """A record larger than the producer's max.request.size, or a batch larger than the
    consumer's max.partition.fetch.bytes that the broker cannot return in pieces (Java's
    RecordTooLargeException)."""

    name = "record_too_large"


class TransactionAbortedError(KafkaError):
    """A record of a transaction that `abort_transaction` aborted before it was sent
    (Java's TransactionAbortedException)."""

    name = "transaction_aborted"


__all__ = [
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "NoBrokersAvailable",
    "IllegalStateError",
    "ProducerClosedError",
    "CommitFailedError",
    "NoOffsetForPartitionError",
    "RecordTooLargeClientError",
    "TransactionAbortedError",
]
__all__ += _perrors.__all__
