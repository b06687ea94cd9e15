"""Data watches whose reads are pipelined: many requests in flight, as Kafka's ZooKeeperClient sends them.

kazoo's `DataWatch` recipe reads its znode with one blocking round trip when it is made: a
cache that watches 10,000 partition states makes 10,000 round trips one after the other at
start and on every new topic. Kafka's ZooKeeperClient (`handleRequests`) sends a batch of
requests asynchronously, at most `zookeeper.max.in.flight.requests` (default 10) in flight, and
waits for all the answers. `DataWatches.watch` does the same for a batch of watches: each read
goes out with `get_async(path, watch)` while the previous ones are on their way, and each
watch's function is then called with its node's contents, as `DataWatch` calls it.

From then on each watch behaves as kazoo's `DataWatch`: called with `(data, stat)` (or
`(None, None)` while the node does not exist, then watched for its creation) whenever the node
changes, until its function returns False; read again whenever the client is CONNECTED again
(a new session set no watches). A node's reads are ordered: an answer older than one already
given to the function is dropped.

A watch that fires is not read on kazoo's callback thread, one blocking round trip per event
(as `DataWatch` does): it is marked changed, and one reader (a thread of kazoo's handler) reads
every node marked, pipelined the same way, until none is left. Watches that fire together (a
broker killed: thousands of ISR changes written in a few transactions) are read together, as
Kafka's controller and brokers get them (one UpdateMetadata, one LeaderAndIsr per broker), not
one round trip after another while the next events wait behind each. A new session (CONNECTED)
marks every node, read by the same reader.

A mark goes only once its node has been read since: a read lost with its connection or its
session is made again (kazoo fails every request queued for a session that expired, and the
reader may get to such an answer only after it has read other nodes on the new session, whose
changes are marked meanwhile: dropping the marks with that error left those nodes neither read
nor watched again, tests/unit/cluster/test_zk_cache_reads_sessions.py). Only a closed client
(the broker stopping, or kazoo's connection thread ended: `zk_client.start_again`) stops the
reader, its marks kept for the CONNECTED of the next session.

Blocking (call from a worker thread or kazoo's callback thread, never the event loop).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.retry import KazooRetry

log = logging.getLogger("odradek.cluster.zk")

# a read lost with its connection or its session (not ConnectionClosedError, a subclass of the
# latter: the client closed): made again
_LOST = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)

DataFunc = Callable[[bytes | None, Any], bool | None]
DEFAULT_MAX_IN_FLIGHT = 10  # zookeeper.max.in.flight.requests, Kafka's default
RETRY_MAX_DELAY_S = 1.0  # between attempts of a read lost with its connection or session


class _Watch:
    """One znode's watch (kazoo's DataWatch, its reads made by `DataWatches`)."""

    __slots__ = ("called", "delivered", "func", "issued", "lock", "owner", "path", "stopped", "version")

    def __init__(self, owner: DataWatches, path: str, func: DataFunc) -> None:
        self.owner = owner
        self.path = path
        self.func = func
        self.lock = threading.Lock()
        self.stopped = False
        self.called = False  # the function has been called once
        self.version: int | None = None  # mzxid of what the function last saw (None: no node)
        self.issued = 0  # reads sent for this node
        self.delivered = 0  # the number of the newest read given to the function

    def watcher(self, event: WatchedEvent) -> None:
        """The node changed (kazoo's callback thread): read it again, with every other node that
        changed meanwhile (`DataWatches.changed`)."""
        self.owner.changed(self)

    def next_read(self) -> int:
        with self.lock:
            self.issued += 1
            return self.issued

    def deliver(self, n: int, data: bytes | None, stat: Any) -> None:
        with self.lock:
            if self.stopped or n < self.delivered:
                return
            self.delivered = n
            before, self.version = self.version, (None if stat is None else stat.mzxid)
            if self.called and before == self.version:
                return
            self.called = True
            try:
                keep = self.func(data, stat)
            except Exception:
                log.exception("watch of %s", self.path)
                raise
            if keep is False:
                self.stopped = True
                self.owner.forget(self)


class DataWatches:
    def __init__(self, zk: Any, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        if max_in_flight < 1:
            raise ValueError(f"zookeeper.max.in.flight.requests must be at least 1, not {max_in_flight}")
        self.zk = zk
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._watches: dict[str, _Watch] = {}
        # Watches that fired and are not read yet, each with the number of its latest event; a
        # reader is reading them while `_reading`.
        self._changed: dict[str, tuple[_Watch, int]] = {}
        self._events = 0
        self._reading = False
        # A read lost with its connection or its session is made again, one at a time, as
        # DataWatch retries it (a copy per retry: a KazooRetry counts its attempts).
        self._retry = KazooRetry(max_tries=None, max_delay=RETRY_MAX_DELAY_S, sleep_func=zk.handler.sleep_func)
        zk.add_listener(self._state_changed)

    def watch(self, items: Iterable[tuple[str, DataFunc]]) -> None:
        """Watch each (path, function): the function is called with the node's contents before
        this returns (unless another read of it answered first), and on every change after.
        A path already watched keeps its watch; one whose first read was interrupted (a
        connection cut, an exception) is read now."""
        todo = []
        with self._lock:
            for path, func in items:
                w = self._watches.get(path)
                if w is None:
                    w = self._watches[path] = _Watch(self, path, func)
                elif w.called:
                    continue
                todo.append(w)
        self.read(todo)

    def watching(self, path: str) -> bool:
        with self._lock:
            return path in self._watches

    def forget(self, w: _Watch) -> None:
        with self._lock:
            if self._watches.get(w.path) is w:
                del self._watches[w.path]

    def changed(self, w: _Watch) -> None:
        """`w`'s node changed (its watch fired): read it again, with every node that changed
        meanwhile, on a reader thread (started unless one is reading)."""
        self._mark([w])

    def _mark(self, watches: Iterable[_Watch]) -> None:
        with self._lock:
            for w in watches:
                self._events += 1
                self._changed[w.path] = (w, self._events)
            if self._reading or not self._changed:
                return
            self._reading = True
        self.zk.handler.spawn(self._read_changed)

    def _read_changed(self) -> None:
        """Read the changed nodes, all of them at a time (`read`), until none is left. A watch
        that fires again while its node is being read stays marked: read again next round. A
        closed client (the broker stopping) ends the reads quietly, as DataWatch's
        `_ignore_closed`, the nodes still marked: the CONNECTED of a new session reads them."""
        try:
            while True:
                with self._lock:
                    marked = dict(self._changed)
                    if not marked:
                        self._reading = False
                        return
                self.read([w for w, _n in marked.values()])
                with self._lock:
                    for path, mark in marked.items():
                        if self._changed.get(path) == mark:
                            del self._changed[path]
        except ConnectionClosedError as e:
            log.debug("watches fired: read again not made: %r", e)
            with self._lock:
                self._reading = False
        except BaseException:
            # (the simulator's WouldBlock runs this again once it can go on; anything else is
            # logged by kazoo's thread: the nodes stay marked, read with the next change)
            with self._lock:
                self._reading = False
            raise

    def read(self, watches: list[_Watch]) -> None:
        """Read each node (setting its watch) with at most `max_in_flight` reads on their way,
        then give each watch what it read, in order. A node found missing is watched for its
        creation (`exists`, pipelined the same way); one created meanwhile is read again."""
        while watches:
            answers = self._pipelined(watches, self._get)
            missing: list[_Watch] = []
            for w, n, answer in answers:
                if isinstance(answer, NoNodeError):
                    missing.append(w)
                elif answer is not None:
                    w.deliver(n, *answer)
            watches = []
            for w, n, stat in self._pipelined(missing, self._exists):
                if stat is None:
                    w.deliver(n, None, None)
                else:  # created since the read: read it again
                    watches.append(w)

    # ---------------------------------------------------------------- reads
    def _get(self, w: _Watch) -> Any:
        return self.zk.get_async(w.path, watch=w.watcher)

    def _exists(self, w: _Watch) -> Any:
        return self.zk.exists_async(w.path, watch=w.watcher)

    def _pipelined(self, watches: list[_Watch], send: Callable[[_Watch], Any]) -> list[tuple[_Watch, int, Any]]:
        """(watch, read number, answer) for each watch: what `send` answered, or NoNodeError.
        A read lost with its connection or its session is made again, under its number (an
        answer to a later read of the node, given first, wins; any change since that read
        fires the watch it set); ConnectionClosedError (the client closed) is raised."""
        out: list[tuple[_Watch, int, Any]] = []
        window: collections.deque[tuple[_Watch, int, Any]] = collections.deque()

        def receive() -> None:
            w, n, pending = window.popleft()
            try:
                answer = pending.get() if pending is not None else self._again(w, send)
            except NoNodeError as e:
                answer = e
            except ConnectionClosedError:
                raise
            except _LOST:
                answer = self._again(w, send)
            out.append((w, n, answer))

        for w in watches:
            if w.stopped:
                continue
            if len(window) >= self.max_in_flight:
                receive()
            n = w.next_read()
            try:
                pending = send(w)
            except ConnectionClosedError:
                raise
            except _LOST:  # (kazoo's answer carries these; the simulator's client raises them)
                pending = None  # made again when received
            window.append((w, n, pending))
        while window:
            receive()
        return out

    def _again(self, w: _Watch, send: Callable[[_Watch], Any]) -> Any:
        """The read made again until answered (on a new session, once one is connected)."""
        try:
            return self._retry.copy()(lambda: send(w).get())
        except NoNodeError as e:
            return e

    # -------------------------------------------------------------- session
    def _state_changed(self, state: str) -> None:
        """kazoo's listener: a new session has none of the watches (nor has a connection made
        again: kazoo drops them all); every node is marked, read by the reader (on a thread of
        kazoo's, not this listener's), as each DataWatch reads its node when CONNECTED."""
        if state == KazooState.CONNECTED:
            with self._lock:
                watches = list(self._watches.values())
            self._mark(watches)
