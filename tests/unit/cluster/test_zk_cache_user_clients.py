"""A user's client-id quotas are watched again when the user's znode is deleted and made again.

Before: the cache remembered `/config/users/<u>/clients` as watched after kazoo had ended that
watch with the node, so `kafka-configs --entity-type users --entity-name u --entity-type clients`
on a re-created user was never seen by the broker. The client here records the watches the cache
sets and fires them as ZooKeeper would (unit tier: no ZooKeeper).
"""

from __future__ import annotations

from typing import Any

from odradek.cluster import zk_layout as L
from odradek.cluster.zk_cache import ZkCache


class RecordingClient:
    def __init__(self) -> None:
        self.watches: dict[str, list[Any]] = {}

    def retry(self, f: Any, *args: Any, **kw: Any) -> Any:
        return f(*args, **kw)

    def ensure_path(self, path: str) -> None:
        pass

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        return b'{"version":"1","id":"cluster-a"}', None

    class handler:  # noqa: N801 - kazoo's
        sleep_func = staticmethod(lambda _s: None)

    def add_listener(self, listener: Any) -> None:
        pass

    def DataWatch(self, path: str, func: Any) -> None:  # noqa: N802 - kazoo's name
        self.watches.setdefault(f"data {path}", []).append(func)

    def ChildrenWatch(self, path: str, func: Any) -> None:  # noqa: N802 - kazoo's name
        self.watches.setdefault(f"children {path}", []).append(func)

    def data(self, path: str, data: bytes | None) -> None:
        """The newest data watch on `path` sees its data (None: deleted)."""
        self.watches[f"data {path}"][-1](data, None if data is None else object())

    def children(self, path: str, children: list[str]) -> None:
        self.watches[f"children {path}"][-1](children)


def test_a_recreated_users_client_quotas_are_watched_again():
    zk = RecordingClient()
    cache = ZkCache(zk, 1, "PLAINTEXT", lambda: None)
    cache.start()
    user, clients = f"{L.CONFIG_USERS}/alice", f"{L.CONFIG_USERS}/alice/clients"
    quota = b'{"version":1,"config":{"producer_byte_rate":"1024"}}'

    zk.children(L.CONFIG_USERS, ["alice"])
    zk.children(user, ["clients"])
    assert len(zk.watches[f"children {clients}"]) == 1
    zk.children(clients, ["app"])
    zk.data(f"{clients}/app", quota)
    assert cache.view().user_client_configs == {("alice", "app"): {"producer_byte_rate": "1024"}}

    # deleted, children first (kazoo ends the watches of deleted nodes), then made again
    zk.data(f"{clients}/app", None)
    zk.data(user, None)
    zk.children(L.CONFIG_USERS, [])
    assert cache.view().user_client_configs == {}
    zk.children(L.CONFIG_USERS, ["alice"])
    zk.children(user, ["clients"])
    assert len(zk.watches[f"children {clients}"]) == 2, "the re-created clients node is not watched"
    zk.children(clients, ["app"])
    zk.data(f"{clients}/app", quota)
    assert cache.view().user_client_configs == {("alice", "app"): {"producer_byte_rate": "1024"}}
