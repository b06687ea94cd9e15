"""A broker's metadata cache starts though its ZooKeeper connection drops under the first calls.

Seen in a cluster-tier run on a loaded machine: a broker restarted mid-test exited at start with
kazoo's ConnectionLoss from `ensure_path` (test_a_reassignment_completes_though_its_leader_is_killed).
Kafka's ZooKeeperClient retries a request until connected; the start now goes through kazoo's
own retry (`KazooClient.retry`, as its watch recipes do). The client here is kazoo's retry over
calls that fail the first time, no ZooKeeper behind it (unit tier: no sockets).
"""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import ConnectionLoss
from support.fake_zk import FakeZk

from odradek.cluster import zk_layout as L
from odradek.cluster.zk_cache import ZkCache


class DroppingClient(FakeZk):
    """ensure_path and get fail once each with ConnectionLoss, then answer."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []
        self.dropped: set[str] = set()

    def _drop_once(self, what: str) -> None:
        if what not in self.dropped:
            self.dropped.add(what)
            raise ConnectionLoss()

    def ensure_path(self, path: str) -> None:
        self._drop_once(f"ensure {path}")
        self.paths.append(path)

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        self._drop_once(f"get {path}")
        assert path == L.CLUSTER_ID
        return super().get(path, watch)


def test_the_cache_starts_through_connections_lost_under_its_first_calls():
    zk = DroppingClient()
    cache = ZkCache(zk, 1, "PLAINTEXT", lambda: None)
    cache.start()
    assert zk.paths == list(L.PERSISTENT_PATHS)  # each made once it got through
    assert len(zk.dropped) == len(L.PERSISTENT_PATHS) + 1  # every call was dropped once
    assert cache.view().cluster_id == "cluster-a"
