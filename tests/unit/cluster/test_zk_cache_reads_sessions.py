"""The batched re-reads of `DataWatches` across a ZooKeeper session that expires: no change is
lost.

kazoo (2.11) fails every request queued for a session with SessionExpiredError when it learns
the session expired, drops every watch (each watcher gets a NONE event) and opens a new
session; requests sent meanwhile are queued and sent on the new session. The reader of the
watches that fired may go on across all that: a read lost with its connection is made again
(`_again`, until the new session answers), and only then does the reader get to an answer
failed with the old session. Reads made on the new session have set new watches by then, and
a change that fires one of them is marked for the reader: that mark must not be dropped with
the old session's error, or the node is neither read nor watched again (the cache keeps an
old partition state for good, as `tests/cluster/test_coord_fence.py` saw once: a coordinator
that does not catch up with a partition's state never acts as coordinator again).

`_KazooLike` answers as kazoo does, step by step under the test's control: requests wait on
the server until answered (a watch is set when its read is answered), a cut fails those
on their way with ConnectionLoss and queues the next ones, an expiry fails the queued ones
with SessionExpiredError, a new session is CONNECTED to the listeners.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from odradek.cluster.zk_cache_reads import DataWatches

WAIT_S = 5.0


class _Answer:
    def __init__(self, client: _KazooLike, path: str, watch: Any, kind: str) -> None:
        self.client, self.path, self.watch, self.kind = client, path, watch, kind
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def answer(self) -> None:
        """The server answers now (setting the watch, as kazoo registers it with the answer)."""
        c = self.client
        node = c.nodes.get(self.path)
        if self.kind == "get" and node is None:
            self._error = NoNodeError()
        elif self.kind == "get" and node is not None:
            data, version = node
            self._value = (data, SimpleNamespace(mzxid=version, version=version, czxid=1))
            c.watchers.setdefault(self.path, set()).add(self.watch)
        else:
            self._value = None if node is None else SimpleNamespace(mzxid=node[1], version=node[1])
            c.watchers.setdefault(self.path, set()).add(self.watch)
        self._done.set()
        after = c.after_read.pop(self.path, None)
        if after is not None:
            after()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def get(self) -> Any:
        assert self._done.wait(WAIT_S), f"{self.kind} {self.path} never answered"
        if self._error is not None:
            raise self._error
        return self._value


class _Handler:
    def __init__(self, client: _KazooLike) -> None:
        self.client = client
        self.threads: list[threading.Thread] = []

        self.held: list[threading.Thread] = []
        self.hold = False  # threads spawned wait for `release`

    def spawn(self, func, *args) -> threading.Thread:
        t = threading.Thread(target=func, args=args, daemon=True)
        self.threads.append(t)
        if self.hold:
            self.held.append(t)
        else:
            t.start()
        return t

    def release(self) -> None:
        self.hold = False
        held, self.held = self.held, []
        for t in held:
            t.start()

    def sleep_func(self, seconds: float) -> None:
        """A retry's wait: held while the test holds `retry_gate`."""
        self.client.retry_waits += 1
        assert self.client.retry_gate.wait(WAIT_S), "a retry waited too long"


class _KazooLike:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handler = _Handler(self)
        self.state = KazooState.CONNECTED
        self._expired = False
        self.auto = True  # answer each request at once
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.watchers: dict[str, set[Any]] = {}
        self.on_the_way: list[_Answer] = []  # sent to the server, not answered
        self.queued: list[_Answer] = []  # waiting for a connection
        self.listeners: list[Any] = []
        self.retry_gate = threading.Event()
        self.retry_gate.set()
        self.retry_waits = 0
        self.after_read: dict[str, Any] = {}  # path -> what happens once a read of it is answered

    def add_listener(self, listener) -> None:
        self.listeners.append(listener)

    def _send(self, path: str, watch: Any, kind: str) -> _Answer:
        a = _Answer(self, path, watch, kind)
        with self.lock:
            if self._expired:
                a.fail(SessionExpiredError())
            elif self.state != KazooState.CONNECTED:
                self.queued.append(a)
            elif self.auto:
                a.answer()
            else:
                self.on_the_way.append(a)
        return a

    def get_async(self, path: str, watch=None) -> _Answer:
        return self._send(path, watch, "get")

    def exists_async(self, path: str, watch=None) -> _Answer:
        return self._send(path, watch, "exists")

    # ------------------------------------------------------------ the test's hand
    def answer_on_the_way(self) -> None:
        with self.lock:
            answers, self.on_the_way = self.on_the_way, []
        for a in answers:
            a.answer()

    def set(self, path: str, data: bytes) -> None:
        """A change: the node's watchers fire (one after another, as kazoo's callback thread)."""
        _old, version = self.nodes[path]
        self.nodes[path] = (data, version + 1)
        for w in self.watchers.pop(path, set()):
            w(WatchedEvent(EventType.CHANGED, KazooState.CONNECTED, path))

    def cut(self) -> None:
        """The connection drops: what is on its way fails with ConnectionLoss, kazoo drops every
        watch (each watcher gets a NONE event); later requests wait for a connection."""
        with self.lock:
            self.state = KazooState.SUSPENDED
            lost, self.on_the_way = self.on_the_way, []
        for a in lost:
            a.fail(ConnectionLoss())
        self._reset_watchers()

    def expire(self) -> None:
        """ZooKeeper says the session expired: the queued requests fail with it."""
        with self.lock:
            self._expired = True
            self.state = KazooState.LOST
            failed, self.queued = self.queued, []
        for a in failed:
            a.fail(SessionExpiredError())
        self._reset_watchers()
        for listener in self.listeners:
            listener(KazooState.LOST)

    def new_session(self) -> None:
        with self.lock:
            self._expired = False
            self.state = KazooState.CONNECTED
            queued, self.queued = self.queued, []
        for a in queued:
            a.answer()
        for listener in self.listeners:
            listener(KazooState.CONNECTED)

    def _reset_watchers(self) -> None:
        watchers = [w for ws in self.watchers.values() for w in ws]
        self.watchers = {}
        for w in watchers:
            w(WatchedEvent(EventType.NONE, self.state, None))


def _until(condition, what: str, timeout: float = WAIT_S, *, required: bool = True) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            assert not required, what
            return False
        time.sleep(0.002)
    return True


def test_a_change_marked_on_the_new_session_is_read_though_an_old_sessions_read_fails_after_it():
    client = _KazooLike()
    paths = ["/x", "/y", "/w", "/z"]
    for p in paths:
        client.nodes[p] = (b"v1", 1)
    seen: dict[str, bytes | None] = {}

    def func_of(path: str):
        def f(data, _stat):
            seen[path] = data

        return f

    watches = DataWatches(client, max_in_flight=2)
    watches.watch([(p, func_of(p)) for p in paths])
    assert seen == {p: b"v1" for p in paths}

    # /x, /y and /w change: one reader reads them, two reads at a time
    client.auto = False
    client.handler.hold = True
    for p in ("/x", "/y", "/w"):
        client.set(p, b"v2")
    client.handler.release()
    _until(lambda: len(client.on_the_way) == 2, "the reader sent /x and /y")
    # the connection drops with /y's read on its way (lost) and /x's answered: the reader,
    # going on, sends /w's read while kazoo connects again (queued), and makes /y's again
    x = client.on_the_way.pop(0)
    client.retry_gate.clear()  # a retry after a failed attempt waits for the test
    client.cut()
    x.answer()
    _until(lambda: {a.path for a in client.queued} == {"/w", "/y"}, "the reader sent /w and /y again (queued)")
    # the session expired (both queued reads fail with it; the retry of /y waits to try again);
    # a new session reads every node again (CONNECTED). /z changes as soon as it is watched on
    # the new session, while the reader may still be in its retry of /y.
    client.expire()
    _until(lambda: client.retry_waits >= 1, "the reader waits to retry /y")
    client.after_read["/z"] = lambda: client.set("/z", b"v2")
    client.auto = True
    client.new_session()
    _until(lambda: "/z" not in client.after_read, "/z read on the new session", 0.5, required=False)
    client.retry_gate.set()  # the reader goes on: /y read again, then /w's failed answer
    _until(lambda: seen == {p: b"v2" for p in paths}, f"every change read (cache: {seen})")
    _until(lambda: all(p in client.watchers for p in paths), "every node watched again")
