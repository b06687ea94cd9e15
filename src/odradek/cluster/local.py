"""The single-node metadata store: topics and their settings in one JSON file.

Kept in the first log directory as `odradek-metadata.json`, written atomically
(temp file, fsync, rename). Every change replaces the in-memory snapshot whole,
so readers holding the old snapshot are never disturbed.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace

from odradek.cluster.metadata import BrokerInfo, ClusterSnapshot, PartitionInfo, TopicInfo

FILE_NAME = "odradek-metadata.json"


def atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class LocalMetadataStore:
    def __init__(self, directory: str, node_id: int, cluster_id: str, broker: BrokerInfo) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.node_id = node_id
        topics: dict[str, TopicInfo] = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            for t in doc.get("topics", []):
                parts = tuple(
                    PartitionInfo(p, node_id, (node_id,), (node_id,), t.get("leader_epoch", 0))
                    for p in range(t["partitions"])
                )
                topics[t["name"]] = TopicInfo(t["name"], uuid.UUID(t["id"]), parts, dict(t.get("configs", {})))
        self.snapshot = ClusterSnapshot(cluster_id, node_id, (broker,), topics)

    def _save(self) -> None:
        doc = {
            "version": 1,
            "topics": [
                {"name": t.name, "id": str(t.topic_id), "partitions": len(t.partitions), "configs": t.configs}
                for t in sorted(self.snapshot.topics.values(), key=lambda t: t.name)
            ],
        }
        atomic_write(self.path, json.dumps(doc, indent=1).encode())

    def _replace_topics(self, topics: dict[str, TopicInfo]) -> None:
        self.snapshot = replace(self.snapshot, topics=topics)
        self._save()

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str], topic_id: uuid.UUID | None = None
    ) -> TopicInfo:
        n = self.node_id
        info = TopicInfo(
            name,
            topic_id or uuid.uuid4(),
            tuple(PartitionInfo(p, n, (n,), (n,)) for p in range(partitions)),
            dict(configs),
        )
        self._replace_topics({**self.snapshot.topics, name: info})
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        topics = dict(self.snapshot.topics)
        info = topics.pop(name)
        self._replace_topics(topics)
        return info

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        old = self.snapshot.topics[name]
        n = self.node_id
        parts = old.partitions + tuple(PartitionInfo(p, n, (n,), (n,)) for p in range(len(old.partitions), total))
        info = replace(old, partitions=parts)
        self._replace_topics({**self.snapshot.topics, name: info})
        return info

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        info = replace(self.snapshot.topics[name], configs=dict(configs))
        self._replace_topics({**self.snapshot.topics, name: info})
        return info
