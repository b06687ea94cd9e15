"""The internal topics the coordinators create on first use, with Kafka's settings for them.

`__consumer_offsets` (group coordinator) and `__transaction_state` (transaction coordinator)
are created by the first FindCoordinator that needs them, through `TopicAdmin`, which caps
the replication factor at the live brokers (so the default of 3 works on a single node).
`__transaction_state`'s `min.insync.replicas` is `transaction.state.log.min.isr` capped at
that replication factor, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.coordinator.group.records import OFFSETS_TOPIC
from odradek.coordinator.txn.records import TXN_STATE_TOPIC

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig
    from odradek.broker.topic_admin import TopicAdmin


@dataclass(frozen=True)
class InternalTopic:
    name: str
    partitions: int
    replication_factor: int  # wanted; TopicAdmin caps it at the live brokers
    configs: Mapping[str, str]


def offsets_topic(config: BrokerConfig) -> InternalTopic:
    return InternalTopic(
        OFFSETS_TOPIC,
        config["offsets.topic.num.partitions"],
        config["offsets.topic.replication.factor"],
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(config["offsets.topic.segment.bytes"]),
            "compression.type": "producer",
        },
    )


def transaction_state_topic(config: BrokerConfig, live_brokers: int) -> InternalTopic:
    rf = min(config["transaction.state.log.replication.factor"], max(live_brokers, 1))
    return InternalTopic(
        TXN_STATE_TOPIC,
        config["transaction.state.log.num.partitions"],
        rf,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
            "min.insync.replicas": str(min(config["transaction.state.log.min.isr"], rf)),
            "unclean.leader.election.enable": "false",
            "compression.type": "uncompressed",
        },
    )


class InternalTopics:
    """The coordinators' `ensure_topic` callables."""

    def __init__(self, config: BrokerConfig, topics: TopicAdmin) -> None:
        self.config = config
        self.topics = topics

    async def ensure_offsets_topic(self) -> None:
        await self._ensure(offsets_topic(self.config))

    async def ensure_transaction_state_topic(self) -> None:
        await self._ensure(transaction_state_topic(self.config, len(self.topics.live_brokers)))

    async def _ensure(self, topic: InternalTopic) -> None:
        await self.topics.ensure_internal_topic(topic.name, topic.partitions, topic.replication_factor, topic.configs)
