"""Cluster metadata: brokers, topics, partitions, leaders, ISR, topic ids.

Immutable values; a store (local.py for the single node, zookeeper.py for a
cluster) replaces the snapshot as a whole when anything changes.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249


def topic_name_problem(name: str | None) -> str | None:
    """Kafka's topic name rules (Topic.validate): None when the name is valid."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, '
            "it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int = 0
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str] = field(default_factory=dict)  # per-topic overrides only

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    topics: dict[str, TopicInfo]

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None
