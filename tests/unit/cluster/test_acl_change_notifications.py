"""The ZooKeeper ACL store's change notifications (cluster/zk_acls.py) over an in-memory client
whose watches call back on a thread of their own, as kazoo's do: another broker's change is
applied with every ZooKeeper read in a worker thread, none on the watch's thread; notifications
older than 15 minutes are purged, as Kafka's ZkNodeChangeNotificationListener purges them, the
younger ones kept."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

from kazoo.exceptions import NodeExistsError, NoNodeError

from odradek.cluster.acls import encode_entries
from odradek.cluster.zk_acls import CHANGE_PREFIX, LITERAL_CHANGES, ZooKeeperAclStore, encode_change, resource_path

RESOURCE = ("LITERAL", "Topic", "orders")
ENTRY = ("User:alice", "Allow", "Read", "*")
WATCH_THREAD = "fake-kazoo-watches"


class FakeZk:
    """The KazooClient calls the store makes, over a dict; ChildrenWatch callbacks run on one
    thread of their own. `reads_on` records the thread of every read."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.nodes: dict[str, tuple[bytes, int]] = {"/": (b"", 0)}  # path -> (data, ctime ms)
        self.seq = 0
        self.reads_on: list[str] = []
        self.watches: dict[str, Callable[[list[str]], object]] = {}
        self.events: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._deliver, name=WATCH_THREAD, daemon=True)
        self.thread.start()

    def _deliver(self) -> None:
        while (item := self.events.get()) is not None:
            path, func = item
            func(self._children(path))

    def _children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix) :] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix) :])

    def _changed(self, parent: str) -> None:
        if parent in self.watches:
            self.events.put((parent, self.watches[parent]))

    def ensure_path(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.nodes.setdefault("/" + "/".join(parts[:i]), (b"", int(self.clock() * 1000)))

    def get_children(self, path: str) -> list[str]:
        self.reads_on.append(threading.current_thread().name)
        return self._children(path)

    def get(self, path: str):
        self.reads_on.append(threading.current_thread().name)
        if path not in self.nodes:
            raise NoNodeError(path)
        data, ctime = self.nodes[path]
        return data, SimpleNamespace(ctime=ctime, version=0)

    def create(self, path: str, data: bytes = b"", sequence: bool = False, makepath: bool = False) -> str:
        if sequence:
            path = f"{path}{self.seq:010d}"
            self.seq += 1
        if path in self.nodes:
            raise NodeExistsError(path)
        parent = path.rsplit("/", 1)[0] or "/"
        if makepath:
            self.ensure_path(parent)
        self.nodes[path] = (data, int(self.clock() * 1000))
        self._changed(parent)
        return path

    def set(self, path: str, data: bytes, version: int = -1) -> None:
        self.nodes[path] = (data, self.nodes[path][1])

    def delete(self, path: str, version: int = -1) -> None:
        if self.nodes.pop(path, None) is None:
            raise NoNodeError(path)
        self._changed(path.rsplit("/", 1)[0] or "/")

    def ChildrenWatch(self, path: str, func: Callable[[list[str]], object]) -> None:  # noqa: N802 (kazoo's name)
        self.watches[path] = func
        self.events.put((path, func))  # kazoo calls a new watch once at once

    def stop(self) -> None:
        self.events.put(None)
        self.thread.join(5)


def _another_broker_writes(zk: FakeZk) -> None:
    """What another broker's ZooKeeperAclStore writes: the resource, then a notification."""
    zk.create(resource_path(RESOURCE), encode_entries(frozenset({ENTRY})), makepath=True)
    root, data = encode_change(RESOURCE)
    zk.create(f"{root}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)


async def _until(condition: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return condition()


def test_another_brokers_change_is_read_off_the_watch_thread():
    zk = FakeZk(time.time)

    async def main() -> None:
        store = ZooKeeperAclStore(zk)  # type: ignore[arg-type]
        seen = []
        store.on_change(lambda: seen.append(store.view()))
        await store.start()
        zk.reads_on.clear()
        _another_broker_writes(zk)
        assert await _until(lambda: bool(seen))
        assert store.view() == {RESOURCE: frozenset({ENTRY})}
        assert zk.reads_on and WATCH_THREAD not in zk.reads_on
        await store.stop()

    try:
        asyncio.run(main())
    finally:
        zk.stop()


def test_notifications_older_than_15_minutes_are_purged():
    now = [time.time()]
    zk = FakeZk(lambda: now[0])
    for _ in range(3):  # 20 minutes old by the time the store starts
        zk.create(f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", b"TOPIC:old", sequence=True, makepath=True)
    now[0] += 20 * 60

    async def main() -> None:
        store = ZooKeeperAclStore(zk, clock=lambda: now[0])  # type: ignore[arg-type]
        await store.start()
        assert zk._children(LITERAL_CHANGES) == []  # purged at start
        _another_broker_writes(zk)  # 10 minutes later, a new one: it stays
        now[0] += 10 * 60
        assert await _until(lambda: store.view() == {RESOURCE: frozenset({ENTRY})})
        await asyncio.sleep(0.1)
        assert len(zk._children(LITERAL_CHANGES)) == 1
        now[0] += 6 * 60  # 16 minutes old: the next notification processed purges it
        zk.create(f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", b"TOPIC:other", sequence=True)
        assert await _until(lambda: len(zk._children(LITERAL_CHANGES)) == 1)
        assert zk._children(LITERAL_CHANGES) == [f"{CHANGE_PREFIX}{zk.seq - 1:010d}"]
        await store.stop()

    try:
        asyncio.run(main())
    finally:
        zk.stop()
