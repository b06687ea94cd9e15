"""A ZooKeeper client whose every call fails, and the ZooKeeper store over it (unit tier: no
sockets): what a broker's admin writes meet when the session expired or the connection was
lost under them (tests/unit/cluster/test_zk_admin_writes.py, tests/unit/broker/...)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from odradek.cluster.metadata import EMPTY_SNAPSHOT, TopicInfo
from odradek.cluster.zookeeper import ZooKeeperMetadataStore


class FailingClient:
    """Every ZooKeeper call raises `error` (kazoo's SessionExpiredError, ConnectionLoss, ...)."""

    def __init__(self, error: type[Exception]) -> None:
        self.error = error
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name not in ("exists", "get", "set", "create", "delete", "transaction"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise self.error()

        return call


def store_over(error: type[Exception], topics: tuple[str, ...] = ("t",)) -> ZooKeeperMetadataStore:
    """The store over a failing client, its snapshot holding `topics` (no partitions)."""
    store = ZooKeeperMetadataStore(FailingClient(error), 1)  # type: ignore[arg-type]
    infos = {name: TopicInfo(name, uuid.uuid4(), ()) for name in topics}
    store._snapshot = dataclasses.replace(EMPTY_SNAPSHOT, topics=infos)
    return store
