"""Cluster metadata: brokers, topics, partitions, leaders, ISR, topic ids.

Immutable values. A metadata store (`store.py`: the protocol; `local.py` for the single
node; a ZooKeeper store for a cluster) replaces the snapshot as a whole when anything
changes and hands its listeners a `MetadataDelta` (the snapshot before and after), from
which a broker derives what to do: create or delete logs, become leader or follower.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
NO_LEADER = -1
DEFAULT_BROKER_ENTITY = "<default>"  # Kafka's name for the dynamic settings of every broker


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
    """A broker's registration. `host`/`port`: the endpoint brokers reach each other on (the
    inter-broker listener); `endpoints`: (listener name, host, port) of every advertised
    listener, so each client is answered with the listener it came in on. `epoch`: the
    broker epoch, which changes with every registration (the czxid of `/brokers/ids/<id>`,
    Kafka's ZooKeeper-mode broker epoch; -1 on a single node or when unknown): a broker that
    registers again is a changed broker, so the snapshot (and every broker's idea of its own
    epoch) follows.

    Cluster mode adds two things a registration says of the run that made it (odradek's
    fields in the registration's JSON; Kafka's decoder ignores them): `directory_ids`, the
    ids of its log directories (meta.properties `directory.id`, as a KRaft registration
    lists them), by which a broker starting again recognises its previous run's
    registration; `may_lack_unflushed`, true when a previous run stopped without a clean
    shutdown and the host has booted since (a power cut, an OS crash): its logs may lack
    what that run had not flushed."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()
    epoch: int = -1
    directory_ids: tuple[str, ...] = ()
    may_lack_unflushed: bool = False

    def at(self, listener: str) -> BrokerInfo | None:
        """This broker as reached through `listener` (None: it has no such listener). A
        registration without listener names (a single endpoint) serves every listener."""
        if not self.endpoints:
            return self
        for name, host, port in self.endpoints:
            if name == listener:
                return replace(self, host=host, port=port)
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int = 0
    offline_replicas: tuple[int, ...] = ()
    # Bumped on every change of the partition's state (ZooKeeper's znode version, KRaft's
    # partition epoch); AlterPartition requests name the one they were based on.
    partition_epoch: int = 0
    # The broker epoch each ISR member was admitted with (in `isr`'s order; -1 unknown), where
    # the controller records it (cluster mode); None where nothing is recorded.
    isr_epochs: tuple[int, ...] | None = None

    def admitted_epoch(self, broker: int) -> int:
        """The broker epoch `broker` was admitted to the ISR with; -1 when unknown."""
        if self.isr_epochs is None or broker not in self.isr or len(self.isr_epochs) != len(self.isr):
            return -1
        return self.isr_epochs[self.isr.index(broker)]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str] = field(default_factory=dict)  # per-topic overrides only

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    topics: dict[str, TopicInfo]
    # dynamic broker settings by entity: DEFAULT_BROKER_ENTITY (every broker) or a broker id
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # per user (the name as given, not sanitized): SCRAM credentials by mechanism, as Kafka keeps
    # them in /config/users/<user> ("SCRAM-SHA-256" -> "salt=...,stored_key=...,...")
    user_configs: dict[str | None, dict[str, str]] = field(default_factory=dict)
    # client quotas (broker/quotas/entities.py) besides the users' ones above: per client id
    # (/config/clients/<client>) and per user and client id (/config/users/<user>/clients/<client>);
    # None names a default entity, in these maps and in `user_configs` (`<default>` in ZooKeeper,
    # where a user or client id of that name is sanitized, %3Cdefault%3E, as Kafka keeps them apart)
    client_configs: dict[str | None, dict[str, str]] = field(default_factory=dict)
    user_client_configs: dict[tuple[str | None, str | None], dict[str, str]] = field(default_factory=dict)
    _by_id: dict[uuid.UUID, TopicInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {t.topic_id: t for t in self.topics.values()})

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def broker(self, node_id: int) -> BrokerInfo | None:
        for b in self.brokers:
            if b.node_id == node_id:
                return b
        return None

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    def leader_epoch(self, topic: str, partition: int) -> int:
        p = self.partition(topic, partition)
        return p.leader_epoch if p is not None else 0


EMPTY_SNAPSHOT = ClusterSnapshot("", NO_LEADER, (), {})


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """What changed between two snapshots (Kafka's TopicsDelta, by comparison of values).

    A topic deleted and re-created under the same name between two snapshots shows as
    deleted and created (its id changed).
    """

    before: ClusterSnapshot
    after: ClusterSnapshot

    def deleted_topics(self) -> list[TopicInfo]:
        after = self.after.topics
        return [t for name, t in self.before.topics.items() if name not in after or after[name].topic_id != t.topic_id]

    def created_topics(self) -> list[TopicInfo]:
        before = self.before.topics
        return [t for name, t in self.after.topics.items() if name not in before or before[name].topic_id != t.topic_id]

    def changed_partitions(self) -> Iterator[tuple[TopicInfo, PartitionInfo]]:
        """Every partition that is new or whose state differs from before (created topics included)."""
        before = self.before.topics
        for name, t in self.after.topics.items():
            old = before.get(name)
            if old is t:
                continue  # kept as it was (a store replaces only what changed): not compared partition by partition
            if old is None or old.topic_id != t.topic_id:
                for p in t.partitions:
                    yield t, p
                continue
            for p in t.partitions:
                if p.partition >= len(old.partitions) or old.partitions[p.partition] != p:
                    yield t, p

    def changed_configs(self) -> list[TopicInfo]:
        """Topics that existed before (same id) whose overrides changed."""
        before = self.before.topics
        return [
            t
            for name, t in self.after.topics.items()
            if (old := before.get(name)) is not None and old.topic_id == t.topic_id and old.configs != t.configs
        ]

    @property
    def brokers_changed(self) -> bool:
        return self.before.brokers != self.after.brokers
