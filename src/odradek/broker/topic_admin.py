"""Topic administration: create, delete, grow and reconfigure topics through the metadata store.

Handlers (CreateTopics, DeleteTopics, CreatePartitions, the config APIs, Metadata's
auto-creation) and the coordinators (their internal topics) come here; this validates what
the store cannot (configs against storage's rules, replica assignments against the live
brokers), computes assignments (cluster/assignment.py), and writes through the store. It
creates no log: the replica manager does that when the store publishes the change.

Before writing, it checks that this broker has the file descriptors its new partitions need
(`room_problem`): when it has not, the creation is refused whole (POLICY_VIOLATION, Kafka's
answer to an operation over a broker's bound, "Unable to perform excessively large batch
operation") rather than written to the store and failed half-way in the log directory.
Other brokers' descriptors are not known here: each checks only its own replicas.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence

from odradek.broker.config import BrokerConfig
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.assignment import assign_replicas_rack_aware
from odradek.cluster.metadata import TopicInfo
from odradek.cluster.store import MetadataStore, TopicExistsError
from odradek.protocol.errors import PolicyViolationError
from odradek.storage.file_cache import FileCache

log = logging.getLogger("odradek.broker.topics")


class TopicAdmin:
    def __init__(
        self,
        store: MetadataStore,
        topic_configs: TopicConfigs,
        config: BrokerConfig,
        *,
        node_id: int = -1,
        file_cache: FileCache | None = None,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.file_cache = file_cache
        self.topic_configs = topic_configs
        self.config = config
        self._internal_lock = asyncio.Lock()

    @property
    def live_brokers(self) -> list[int]:
        return sorted(b.node_id for b in self.store.snapshot.brokers)

    def assignment(
        self, partitions: int, replication_factor: int, *, first_partition: int = 0
    ) -> list[tuple[int, ...]]:
        """Replica lists for new partitions over the live brokers, rack-aware when they have racks
        (AssignmentError when impossible)."""
        racks = {b.node_id: b.rack for b in self.store.snapshot.brokers}
        return assign_replicas_rack_aware(racks, partitions, replication_factor, first_partition=first_partition)

    async def create_topic(
        self,
        name: str,
        assignment: Sequence[Sequence[int]],
        configs: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        self.topic_configs.log_config(configs)  # ValueError before anything is written
        self._check_room(assignment)
        info = await self.store.create_topic(name, assignment, configs, topic_id)
        log.info(
            "created topic %s with %d partitions%s",
            name,
            len(assignment),
            f" and configs {dict(configs)}" if configs else "",
        )
        return info

    async def delete_topic(self, name: str, timeout_s: float | None = None) -> TopicInfo:
        info = await self.store.delete_topic(name, timeout_s)
        log.info("deleted topic %s", name)
        return info

    async def create_partitions(self, name: str, new_assignment: Sequence[Sequence[int]]) -> TopicInfo:
        self._check_room(new_assignment)
        return await self.store.create_partitions(name, new_assignment)

    def room_problem(self, assignment: Sequence[Sequence[int]]) -> str | None:
        """Why this broker cannot host its replicas in ``assignment`` now (file descriptors), or None."""
        if self.file_cache is None:
            return None
        here = sum(1 for replicas in assignment if self.node_id in replicas)
        problem = self.file_cache.room_for(here) if here else None
        if problem is not None:
            log.warning("refused to create partitions: %s", problem)
        return problem

    def _check_room(self, assignment: Sequence[Sequence[int]]) -> None:
        problem = self.room_problem(assignment)
        if problem is not None:
            raise PolicyViolationError(problem)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        self.topic_configs.log_config(configs)
        return await self.store.set_topic_configs(name, configs)

    async def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Dynamic broker settings of one broker (its id) or of every broker ("<default>")."""
        await self.store.set_broker_configs(entity, configs)

    async def ensure_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo | None:
        """Create an internal topic unless it exists (concurrent callers create it once; another
        broker of a cluster may create it first: then None until this broker's metadata has it).
        The replication factor is capped at the live brokers (documented for
        `offsets.topic.replication.factor`), so the default of 3 works on a single node."""
        async with self._internal_lock:
            info = self.store.snapshot.topics.get(name)
            if info is not None:
                return info
            rf = min(replication_factor, max(len(self.live_brokers), 1))
            try:
                return await self.create_topic(name, self.assignment(partitions, rf), configs)
            except TopicExistsError:  # as Kafka's auto-creation, not an error
                log.debug("%s was created by another broker first", name)
                return self.store.snapshot.topics.get(name)
