"""The group and transaction coordinators' settings: __consumer_offsets and offsets, group
sessions and sizes, __transaction_state, transactions and producer ids; Kafka's
GroupCoordinatorConfig and TransactionLogConfig / TransactionStateManagerConfig."""

from __future__ import annotations

from odradek.broker.settings.setting import INT_MAX, Setting, at_least

S = Setting

# groups and offsets
GROUPS: tuple[Setting, ...] = (
    S("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets.", validate=at_least(1)),
    S(
        "offsets.topic.replication.factor",
        "int",
        3,
        "Replication factor of __consumer_offsets (capped at the live broker count).",
        validate=at_least(1),
    ),
    S("offsets.topic.segment.bytes", "int", 104857600, "Segment size of __consumer_offsets.", validate=at_least(1)),
    S(
        "offsets.retention.minutes",
        "int",
        10080,
        "Offsets of empty groups expire after this long.",
        validate=at_least(1),
    ),
    S(
        "offsets.retention.check.interval.ms",
        "long",
        600000,
        "How often expired offsets are removed.",
        validate=at_least(1),
    ),
    S(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        "Maximum wait for an offset commit to be durable.",
        validate=at_least(1),
    ),
    S("offset.metadata.max.bytes", "int", 4096, "Largest metadata string of a committed offset.", validate=at_least(0)),
    S(
        "group.initial.rebalance.delay.ms",
        "int",
        3000,
        "Wait for more members before the first rebalance of an empty group.",
        validate=at_least(0),
    ),
    S(
        "group.min.session.timeout.ms",
        "int",
        6000,
        "Smallest session timeout a member may ask for.",
        validate=at_least(0),
    ),
    S(
        "group.max.session.timeout.ms",
        "int",
        1800000,
        "Largest session timeout a member may ask for.",
        validate=at_least(0),
    ),
    S("group.max.size", "int", INT_MAX, "Largest number of members in a group.", validate=at_least(1)),
)

# transactions and idempotence
TRANSACTIONS: tuple[Setting, ...] = (
    S(
        "transactional.id.expiration.ms",
        "int",
        604800000,
        "Transactional ids with no transaction for this long are removed from __transaction_state.",
        validate=at_least(1),
    ),
    S(
        "transaction.max.timeout.ms",
        "int",
        900000,
        "Largest transaction timeout a producer may ask for (larger: INVALID_TRANSACTION_TIMEOUT).",
        validate=at_least(1),
    ),
    S(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        10000,
        "How often the transaction coordinator aborts transactions older than their timeout.",
        validate=at_least(1),
    ),
    S(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        3600000,
        "How often the transaction coordinator removes expired transactional ids.",
        validate=at_least(1),
    ),
    S(
        "transaction.partition.verification.enable",
        "bool",
        True,
        "KIP-890: a partition leader verifies with the transaction coordinator that a partition was added to "
        "the producer's transaction before taking its first transactional batch there.",
    ),
    S("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state.", validate=at_least(1)),
    S(
        "transaction.state.log.replication.factor",
        "int",
        3,
        "Replication factor of __transaction_state (capped at the live broker count).",
        validate=at_least(1),
    ),
    S(
        "transaction.state.log.min.isr",
        "int",
        2,
        "min.insync.replicas of __transaction_state (capped at its replication factor).",
        validate=at_least(1),
    ),
    S(
        "transaction.state.log.segment.bytes",
        "int",
        104857600,
        "Segment size of __transaction_state.",
        validate=at_least(1),
    ),
    S(
        "producer.id.expiration.ms",
        "int",
        86400000,
        "Idle producer ids' state expires after this long.",
        validate=at_least(1),
    ),
)
