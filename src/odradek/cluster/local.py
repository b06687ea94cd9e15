"""The single-node metadata store: topics and their settings in one JSON file.

Kept in the first log directory as `odradek-metadata.json`, written atomically through
the writer the broker passes in (storage's FileSystem, where faults can be injected).
Every change replaces the in-memory snapshot whole, so readers holding the old snapshot
are never disturbed, and is then published to the listeners before the call returns.

This broker is the only one: it is the controller, every partition's only replica, leader
and ISR. Replica lists naming another broker are refused.

A directory without the file but with partition directories was written by Apache Kafka (or
lost its file): its topics are discovered from the directory (kafka_dir.py) and saved here.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from odradek.cluster.kafka_dir import discover_topics
from odradek.cluster.metadata import (
    EMPTY_SNAPSHOT,
    BrokerInfo,
    ClusterSnapshot,
    MetadataDelta,
    PartitionInfo,
    TopicInfo,
)
from odradek.cluster.store import MetadataError, MetadataListener, TopicExistsError, UnknownTopicError

log = logging.getLogger("odradek.cluster.local")

FILE_NAME = "odradek-metadata.json"
WriteAtomic = Callable[[str, bytes], None]


class LocalMetadataStore:
    def __init__(self, directory: str, node_id: int, cluster_id: str, write_atomic: WriteAtomic) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.node_id = node_id
        self._write_atomic = write_atomic
        self._listeners: list[MetadataListener] = []
        topics: dict[str, TopicInfo] = {}
        broker_configs: dict[str, dict[str, str]] = {}
        user_configs: dict[str | None, dict[str, str]] = {}
        client_configs: dict[str | None, dict[str, str]] = {}
        user_client_configs: dict[tuple[str | None, str | None], dict[str, str]] = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            broker_configs = {str(k): dict(v) for k, v in doc.get("broker_configs", {}).items()}
            name = _entity if doc.get("version", 1) >= 2 else _legacy_entity
            user_configs = _load_entities(doc.get("user_configs", []), name)
            client_configs = _load_entities(doc.get("client_configs", []), name)
            user_client_configs = {(name(u), name(c)): dict(v) for u, c, v in doc.get("user_client_configs", [])}
            for t in doc.get("topics", []):
                parts = tuple(self._partition(p, t.get("leader_epoch", 0)) for p in range(t["partitions"]))
                topics[t["name"]] = TopicInfo(t["name"], uuid.UUID(t["id"]), parts, dict(t.get("configs", {})))
        else:
            for found in discover_topics(directory):
                parts = tuple(self._partition(p, found.leader_epoch) for p in range(found.partitions))
                topics[found.name] = TopicInfo(found.name, found.topic_id, parts, found.configs)
        self._snapshot = ClusterSnapshot(
            cluster_id, node_id, (), topics, broker_configs, user_configs, client_configs, user_client_configs
        )
        if topics and not os.path.exists(self.path):
            log.warning(
                "%s: no %s; adopted %d topics from the partition directories (%s) (docs/storage.md)",
                directory,
                FILE_NAME,
                len(topics),
                ", ".join(sorted(topics)),
            )
            self._save(self._snapshot)

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        await self._publish(
            MetadataDelta(replace(EMPTY_SNAPSHOT, cluster_id=self._snapshot.cluster_id), self._snapshot)
        )

    async def stop(self) -> None:
        self._listeners.clear()

    async def register_broker(self, broker: BrokerInfo) -> None:
        if broker.node_id != self.node_id:
            raise MetadataError(f"this single-node store belongs to node {self.node_id}, not {broker.node_id}")
        await self._replace(replace(self._snapshot, brokers=(broker,)), save=False)

    # ------------------------------------------------------------------ topics
    async def create_topic(
        self,
        name: str,
        assignment: Sequence[Sequence[int]],
        configs: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        if name in self._snapshot.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        self._check_assignment(assignment)
        parts = tuple(self._partition(p) for p in range(len(assignment)))
        info = TopicInfo(name, topic_id or uuid.uuid4(), parts, dict(configs))
        await self._replace_topics({**self._snapshot.topics, name: info})
        return info

    async def delete_topic(self, name: str, timeout_s: float | None = None) -> TopicInfo:
        """At once (one broker: dropped everywhere when it returns); `timeout_s` is not needed."""
        topics = dict(self._snapshot.topics)
        info = topics.pop(name, None)
        if info is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        await self._replace_topics(topics)
        return info

    async def create_partitions(self, name: str, new_assignment: Sequence[Sequence[int]]) -> TopicInfo:
        old = self._topic(name)
        self._check_assignment(new_assignment)
        first = len(old.partitions)
        parts = old.partitions + tuple(self._partition(first + i) for i in range(len(new_assignment)))
        info = replace(old, partitions=parts)
        await self._replace_topics({**self._snapshot.topics, name: info})
        return info

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        info = replace(self._topic(name), configs=dict(configs))
        await self._replace_topics({**self._snapshot.topics, name: info})
        return info

    async def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        merged = {**self._snapshot.broker_configs, entity: dict(configs)}
        if not configs:
            del merged[entity]
        await self._replace(replace(self._snapshot, broker_configs=merged), save=True)

    async def set_user_configs(self, user: str | None, configs: Mapping[str, str]) -> None:
        merged = {**self._snapshot.user_configs, user: dict(configs)}
        if not configs:
            del merged[user]
        await self._replace(replace(self._snapshot, user_configs=merged), save=True)

    async def set_client_configs(self, client_id: str | None, configs: Mapping[str, str]) -> None:
        merged = {**self._snapshot.client_configs, client_id: dict(configs)}
        if not configs:
            del merged[client_id]
        await self._replace(replace(self._snapshot, client_configs=merged), save=True)

    async def set_user_client_configs(
        self, user: str | None, client_id: str | None, configs: Mapping[str, str]
    ) -> None:
        merged = {**self._snapshot.user_client_configs, (user, client_id): dict(configs)}
        if not configs:
            del merged[(user, client_id)]
        await self._replace(replace(self._snapshot, user_client_configs=merged), save=True)

    # ---------------------------------------------------------------- internals
    def _partition(self, p: int, leader_epoch: int = 0) -> PartitionInfo:
        n = self.node_id
        return PartitionInfo(p, n, (n,), (n,), leader_epoch)

    def _topic(self, name: str) -> TopicInfo:
        info = self._snapshot.topics.get(name)
        if info is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        return info

    def _check_assignment(self, assignment: Sequence[Sequence[int]]) -> None:
        for replicas in assignment:
            if tuple(replicas) != (self.node_id,):
                raise MetadataError(f"a single node can only place replicas on itself, not on {list(replicas)}")

    async def _replace_topics(self, topics: dict[str, TopicInfo]) -> None:
        await self._replace(replace(self._snapshot, topics=topics), save=True)

    async def _replace(self, snapshot: ClusterSnapshot, *, save: bool) -> None:
        before = self._snapshot
        if save:
            self._save(snapshot)
        self._snapshot = snapshot
        await self._publish(MetadataDelta(before, snapshot))

    def _save(self, snapshot: ClusterSnapshot) -> None:
        doc = {
            "version": 2,
            "broker_configs": snapshot.broker_configs,
            "user_configs": [[u, v] for u, v in sorted(snapshot.user_configs.items(), key=lambda i: _order(i[0]))],
            "client_configs": [[c, v] for c, v in sorted(snapshot.client_configs.items(), key=lambda i: _order(i[0]))],
            "user_client_configs": [
                [u, c, v]
                for (u, c), v in sorted(
                    snapshot.user_client_configs.items(), key=lambda i: (_order(i[0][0]), _order(i[0][1]))
                )
            ],
            "topics": [
                {
                    "name": t.name,
                    "id": str(t.topic_id),
                    "partitions": len(t.partitions),
                    "configs": t.configs,
                    "leader_epoch": max((p.leader_epoch for p in t.partitions), default=0),
                }
                for t in sorted(snapshot.topics.values(), key=lambda t: t.name)
            ],
        }
        self._write_atomic(self.path, json.dumps(doc, indent=1).encode())

    async def _publish(self, delta: MetadataDelta) -> None:
        """Every listener sees the change; the first failure is raised to the writer afterwards
        (the metadata is already changed: as in Kafka, a partition whose log could not be
        created is there but offline)."""
        failure: BaseException | None = None
        for listener in list(self._listeners):
            try:
                await listener.on_metadata(delta)
            except Exception as e:
                log.exception("metadata listener %s failed", type(listener).__name__)
                failure = failure or e
        if failure is not None:
            raise failure


# Users' and client ids' settings are kept as [name, config] pairs, null naming the default
# entity (version 2). Version 1 kept a map with "<default>" for it, which a user or client id of
# that name shared: read as the default.
def _entity(name: object) -> str | None:
    return None if name is None else str(name)


def _legacy_entity(name: object) -> str | None:
    return None if name is None or name == "<default>" else str(name)


def _load_entities(
    stored: dict[str, dict[str, str]] | list[list[Any]], name: Callable[[object], str | None]
) -> dict[str | None, dict[str, str]]:
    pairs = stored.items() if isinstance(stored, dict) else stored
    return {name(k): dict(v) for k, v in pairs}


def _order(name: str | None) -> tuple[bool, str]:
    """The default entity first, then names in order."""
    return (name is not None, name or "")
