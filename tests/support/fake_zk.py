"""A kazoo client stand-in for unit tests of the ZooKeeper cache: no ZooKeeper, no sockets.

It records the watches the cache sets (`data` and `children` fire the newest one as ZooKeeper
would) and answers the start's calls; subclasses make calls fail (tests/unit/cluster).
"""

from __future__ import annotations

from typing import Any

from kazoo.retry import KazooRetry


class FakeZk:
    CLUSTER_ID_ZNODE = b'{"version":"1","id":"cluster-a"}'

    def __init__(self) -> None:
        self.retry = KazooRetry(max_tries=-1, delay=0.001, max_delay=0.001, sleep_func=lambda _s: None)
        self.watches: dict[str, list[Any]] = {}

    class handler:  # noqa: N801 - kazoo's
        sleep_func = staticmethod(lambda _s: None)

    def ensure_path(self, path: str) -> None:
        pass

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        return self.CLUSTER_ID_ZNODE, None

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
        """The newest children watch on `path` sees these children."""
        self.watches[f"children {path}"][-1](children)
