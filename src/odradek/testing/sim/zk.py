"""An in-memory ZooKeeper and a client with the part of `KazooClient`'s API odradek uses.

`SimZooKeeper` holds znodes (data, version, cversion, czxid/mzxid/pzxid, the session that owns
an ephemeral node, sequential children), sessions and one-shot watches, and applies
multi-op transactions atomically (on failure kazoo's results: `RolledBackError` for the ops
before the failing one, its error, `RuntimeInconsistency` after it, as ZooKeeper answers).

`SimZkClient` is one broker's client (grep `zk.` in src/odradek/cluster for what it must
answer): get, set, create (ephemeral, sequence, makepath), delete, exists, get_children,
get_async and exists_async (many reads in flight: see below),
ensure_path, transaction, retry, add_listener/remove_listener, client_id, handler.spawn, and
kazoo's own `DataWatch`/`ChildrenWatch` recipes over its one-shot watches (as `KazooClient`
builds them: `zk.DataWatch(path, func)`).

Time and failures, as kazoo sees them:
- every call happens at the server at once; a caller inside `asyncio.to_thread` sees its
  result a round trip later (`SimLoop.charge`), and a write's after its commit too
  (`write_latency`, drawn from the seed: 0.5-4 ms; `extra_write_latency` while a `zk-slow`
  fault lasts): applying it at the call is one of the orders a linearizable ZooKeeper may
  show, and the watch events it fires leave the server only once it has committed; a
  thread's calls take their round trips one after the other, each at the link's latency
  (and the log's commit time) when it begins: a slow link healed while a thread's forty
  reads are on their way makes the rest fast, as it would for kazoo's;
- `get_async`/`exists_async` happen at the server at once too; reads sent before an answer is
  waited for share one round trip (they are on the wire together): `.get()` on the first of
  them charges the round trip, the others' answers are then in;
- a call while the client cannot reach ZooKeeper (its node cut from `zk` either way) would
  block in a thread: it raises `WouldBlock` and runs again when the client is connected;
- the client pings every third of its session timeout; the server expires a session it has
  not heard from for the session timeout (its node paused, dead, or cut from ZooKeeper):
  its ephemeral nodes go and the watches they trigger fire;
- the client goes SUSPENDED when it has not heard from the server for two thirds of the
  timeout, CONNECTED when it hears again; when it hears its session expired it goes LOST,
  opens a new session and goes CONNECTED (kazoo's states, to the listeners in order);
- watch events reach the client in order, after the link's latency; those that would arrive
  while it is cut wait for it to reconnect, as long as the client has not given the connection
  up (TCP delivers them late); once it has (SUSPENDED, or LOST) they are gone with the
  connection, as kazoo 2.x has it: the server drops the connection's watches, the client calls
  every watcher it had registered with a `NONE` event whose path is None (`_reset_watchers`),
  and it sets none of them again when it reconnects (kazoo sends no SetWatches): whatever
  watched must read again (kazoo's `DataWatch` on that event and on CONNECTED);
- an outage (`set_outage(True)`: the whole ensemble unreachable) is a cut of every client at
  once, during which no session expires; when it ends every session's timeout starts again
  (as a recovering ZooKeeper renews them), so clients that reconnect keep their sessions.
"""

from __future__ import annotations

import collections
import functools
import random
import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from odradek.testing.sim.loop import Node, SimLoop, WouldBlock
from odradek.testing.sim.net import Network
from odradek.testing.sim.trace import Trace

ZK = "zk"
SESSION_BASE = 0x100_0000_0000_0000
Watcher = Callable[[WatchedEvent], Any]


class Znode:
    __slots__ = ("data", "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion", "owner", "children")

    def __init__(self, data: bytes, zxid: int, now_ms: int, owner: int) -> None:
        self.data = data
        self.czxid = self.mzxid = self.pzxid = zxid
        self.ctime = self.mtime = now_ms
        self.version = 0
        self.cversion = 0
        self.owner = owner  # the session of an ephemeral node, else 0
        self.children: set[str] = set()

    def stat(self) -> ZnodeStat:
        return ZnodeStat(
            self.czxid,
            self.mzxid,
            self.ctime,
            self.mtime,
            self.version,
            self.cversion,
            0,
            self.owner,
            len(self.data),
            len(self.children),
            self.pzxid,
        )


class Session:
    __slots__ = ("id", "client", "timeout", "last_heard", "expired", "ephemerals", "timer")

    def __init__(self, sid: int, client: SimZkClient, timeout: float, now: float) -> None:
        self.id = sid
        self.client = client
        self.timeout = timeout
        self.last_heard = now
        self.expired = False
        self.ephemerals: set[str] = set()
        self.timer: Any = None


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[1]


class SimZooKeeper:
    """The server: one for the whole simulated cluster, node `zk`."""

    def __init__(self, loop: SimLoop, net: Network, trace: Trace) -> None:
        self.loop = loop
        self.net = net
        self.trace = trace
        self.node = Node(ZK)
        self.zxid = 0
        self.nodes: dict[str, Znode] = {"/": Znode(b"", 0, 0, 0)}
        self.sessions: dict[int, Session] = {}
        self._next_session = 0
        self._data_watches: dict[str, list[tuple[Session, Watcher]]] = {}
        self._child_watches: dict[str, list[tuple[Session, Watcher]]] = {}
        self.expired_sessions = 0
        self.up = True  # False during an outage: nothing reaches the ensemble
        self.write_latency = random.Random(f"zk-{net.seed}").uniform(0.0005, 0.004)
        self._extra_write_latency = 0.0  # a zk-slow fault
        self.hooks: list[Callable[[str, str, bytes | None], None]] = []  # more observers (scripted tests)
        # told of every change (op, path, data or None): the run's history follows the cluster
        self.observer: Callable[[str, str, bytes | None], None] | None = None

    def client(self, node: Node, session_timeout_ms: int) -> SimZkClient:
        return SimZkClient(self, node, session_timeout_ms / 1000)

    # --------------------------------------------------------------- sessions
    def open_session(self, client: SimZkClient) -> Session:
        self._next_session += 1
        s = Session(SESSION_BASE + self._next_session, client, client.timeout, self.loop.time())
        self.sessions[s.id] = s
        self._arm_expiry(s)
        self.trace.add(f"{self.loop.elapsed:.6f} zk session 0x{s.id:x} opened by {client.node}")
        return s

    def _arm_expiry(self, s: Session) -> None:
        s.timer = self.loop.call_later_as(self.node, s.timeout, self._check_expiry, s)

    def _check_expiry(self, s: Session) -> None:
        if s.expired:
            return
        if not self.up:  # nobody is there to expire it
            s.timer = self.loop.call_later_as(self.node, s.timeout, self._check_expiry, s)
            return
        left = s.last_heard + s.timeout - self.loop.time()
        if left > 0:
            s.timer = self.loop.call_later_as(self.node, left, self._check_expiry, s)
            return
        self.expired_sessions += 1
        self.close_session(s, "expired")

    def touch(self, s: Session) -> None:
        if not s.expired and self.up:
            s.last_heard = self.loop.time()

    def set_outage(self, down: bool) -> None:
        """The whole ensemble goes away (every client cut), or comes back: then every session's
        timeout starts again, as ZooKeeper's leader renews them when it takes over."""
        if self.up != down:
            return
        self.up = not down
        self.trace.add(f"{self.loop.elapsed:.6f} zk {'outage' if down else 'back'}")
        if not down:
            now = self.loop.time()
            for s in self.sessions.values():
                s.last_heard = now

    @property
    def extra_write_latency(self) -> float:
        return self._extra_write_latency

    @extra_write_latency.setter
    def extra_write_latency(self, seconds: float) -> None:
        """A slow transaction log (a zk-slow fault), or back to normal: writes not yet sent
        commit at the new rate (`SimLoop.costs_changed`)."""
        self._extra_write_latency = seconds
        self.loop.costs_changed()

    @property
    def commit_latency(self) -> float:
        return self.write_latency + self.extra_write_latency

    def close_session(self, s: Session, why: str) -> None:
        if s.expired:
            return
        s.expired = True
        if s.timer is not None:
            s.timer.cancel()
        self.sessions.pop(s.id, None)
        self.trace.add(f"{self.loop.elapsed:.6f} zk session 0x{s.id:x} of {s.client.node} {why}")
        self.drop_watches(s)
        for path in sorted(s.ephemerals, reverse=True):
            if path in self.nodes:
                self._delete(path, -1, None)
        s.ephemerals.clear()

    # ----------------------------------------------------------------- watches
    def _watch(self, table: dict[str, list[tuple[Session, Watcher]]], path: str, s: Session, w: Watcher) -> None:
        entries = table.setdefault(path, [])
        if not any(ws is s and ww == w for ws, ww in entries):
            entries.append((s, w))
        s.client.registered.setdefault(path, set()).add(w)

    def drop_watches(self, s: Session) -> None:
        """The connection of session `s` is gone: its watches go with it (ZooKeeper keeps a
        connection's watches, and a reconnected kazoo client sets none again)."""
        for watches in (self._data_watches, self._child_watches):
            for path in list(watches):
                kept = [(ws, w) for ws, w in watches[path] if ws is not s]
                if kept:
                    watches[path] = kept
                else:
                    del watches[path]

    def _trigger(self, table: dict[str, list[tuple[Session, Watcher]]], path: str, kind: str) -> None:
        entries = table.pop(path, None)
        if not entries:
            return
        event = WatchedEvent(kind, KeeperState.CONNECTED, path)
        for s, w in entries:
            s.client._event(s, w, event)

    # ------------------------------------------------------------- operations
    def _tick(self) -> tuple[int, int]:
        self.zxid += 1
        return self.zxid, int(self.loop.wall() * 1000)

    def _log(self, op: str, path: str, s: Session | None) -> None:
        who = s.client.node if s is not None else "-"
        self.trace.add(f"{self.loop.elapsed:.6f} zk {op} {path} zxid {self.zxid} by {who}")
        if self.observer is not None or self.hooks:
            n = self.nodes.get(path)
            data = n.data if n is not None else None
            if self.observer is not None:
                self.observer(op, path, data)
            for hook in list(self.hooks):
                hook(op, path, data)

    def get(self, path: str, s: Session, watch: Watcher | None) -> tuple[bytes, ZnodeStat]:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError(path)
        if watch is not None:
            self._watch(self._data_watches, path, s, watch)
        return n.data, n.stat()

    def exists(self, path: str, s: Session, watch: Watcher | None) -> ZnodeStat | None:
        if watch is not None:
            self._watch(self._data_watches, path, s, watch)
        n = self.nodes.get(path)
        return n.stat() if n is not None else None

    def get_children(self, path: str, s: Session, watch: Watcher | None) -> list[str]:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError(path)
        if watch is not None:
            self._watch(self._child_watches, path, s, watch)
        return sorted(n.children)

    def create(self, path: str, data: bytes, s: Session | None, *, ephemeral: bool, sequence: bool) -> str:
        parent = self.nodes.get(_parent(path))
        if parent is None:
            raise NoNodeError(_parent(path))
        if parent.owner:
            raise NoChildrenForEphemeralsError(_parent(path))
        if sequence:
            path = f"{path}{parent.cversion:010d}"
        if path in self.nodes:
            raise NodeExistsError(path)
        zxid, now = self._tick()
        owner = s.id if ephemeral and s is not None else 0
        self.nodes[path] = Znode(bytes(data), zxid, now, owner)
        parent.children.add(_name(path))
        parent.cversion += 1
        parent.pzxid = zxid
        if owner and s is not None:
            s.ephemerals.add(path)
        self._log("create", path, s)
        self._trigger(self._data_watches, path, EventType.CREATED)
        self._trigger(self._child_watches, _parent(path), EventType.CHILD)
        return path

    def set(self, path: str, data: bytes, version: int, s: Session | None) -> ZnodeStat:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError(path)
        if version != -1 and version != n.version:
            raise BadVersionError(path)
        zxid, now = self._tick()
        n.data = bytes(data)
        n.mzxid, n.mtime = zxid, now
        n.version += 1
        self._log("set", path, s)
        self._trigger(self._data_watches, path, EventType.CHANGED)
        return n.stat()

    def check(self, path: str, version: int) -> bool:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError(path)
        if version != -1 and version != n.version:
            raise BadVersionError(path)
        return True

    def _delete(self, path: str, version: int, s: Session | None) -> bool:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError(path)
        if version != -1 and version != n.version:
            raise BadVersionError(path)
        if n.children:
            raise NotEmptyError(path)
        zxid, _now = self._tick()
        del self.nodes[path]
        parent = self.nodes[_parent(path)]
        parent.children.discard(_name(path))
        parent.cversion += 1
        parent.pzxid = zxid
        if n.owner:
            owner = self.sessions.get(n.owner)
            if owner is not None:
                owner.ephemerals.discard(path)
        self._log("delete", path, s)
        self._trigger(self._data_watches, path, EventType.DELETED)
        self._trigger(self._child_watches, path, EventType.DELETED)
        self._trigger(self._child_watches, _parent(path), EventType.CHILD)
        return True

    def delete(self, path: str, version: int, s: Session | None) -> bool:
        return self._delete(path, version, s)

    def multi(self, ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]], s: Session) -> list[Any]:
        """All or nothing. The ops are checked against a copy of what they touch, then applied."""
        # Dry run on a snapshot of the znodes involved: ZooKeeper validates every op before any applies.
        shadow: dict[str, tuple[bool, int, int]] = {}  # path -> (exists, version, children count)

        def state(path: str) -> tuple[bool, int, int]:
            if path not in shadow:
                n = self.nodes.get(path)
                shadow[path] = (True, n.version, len(n.children)) if n is not None else (False, 0, 0)
            return shadow[path]

        failure: tuple[int, Exception] | None = None
        for i, (op, args, kwargs) in enumerate(ops):
            path = args[0]
            exists, version, nchildren = state(path)
            want = kwargs.get("version", -1)
            err: Exception | None = None
            if op == "check":
                if not exists:
                    err = NoNodeError(path)
                elif want != -1 and want != version:
                    err = BadVersionError(path)
            elif op == "create":
                pexists, pv, pn = state(_parent(path))
                if not pexists:
                    err = NoNodeError(_parent(path))
                elif exists:
                    err = NodeExistsError(path)
                else:
                    shadow[path] = (True, 0, 0)
                    shadow[_parent(path)] = (True, pv, pn + 1)
            elif op == "set_data":
                if not exists:
                    err = NoNodeError(path)
                elif want != -1 and want != version:
                    err = BadVersionError(path)
                else:
                    shadow[path] = (True, version + 1, nchildren)
            elif op == "delete":
                if not exists:
                    err = NoNodeError(path)
                elif want != -1 and want != version:
                    err = BadVersionError(path)
                elif nchildren:
                    err = NotEmptyError(path)
                else:
                    shadow[path] = (False, 0, 0)
                    pe, pv, pn = state(_parent(path))
                    shadow[_parent(path)] = (pe, pv, pn - 1)
            else:
                raise ValueError(f"unknown transaction op {op}")
            if err is not None:
                failure = (i, err)
                break
        if failure is not None:
            at, err = failure
            self.trace.add(f"{self.loop.elapsed:.6f} zk multi failed at op {at}: {type(err).__name__}")
            return [RolledBackError() for _ in range(at)] + [err] + [RuntimeInconsistency() for _ in ops[at + 1 :]]
        results: list[Any] = []
        for op, args, kwargs in ops:
            if op == "check":
                results.append(True)
            elif op == "create":
                results.append(
                    self.create(args[0], args[1] if len(args) > 1 else b"", s, ephemeral=False, sequence=False)
                )
            elif op == "set_data":
                results.append(self.set(args[0], args[1], kwargs.get("version", -1), s))
            else:
                results.append(self._delete(args[0], kwargs.get("version", -1), s))
        return results


class _Handler:
    """kazoo's handler, as far as the recipes and odradek use it: spawn on the client's node."""

    def __init__(self, client: SimZkClient) -> None:
        self._client = client

    def spawn(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        c = self._client
        c.loop.call_soon_as(c.node, c._run, functools.partial(func, *args, **kwargs))

    def lock_object(self) -> threading.Lock:
        return threading.Lock()

    def rlock_object(self) -> threading.RLock:
        return threading.RLock()

    def sleep_func(self, seconds: float) -> None:
        raise RuntimeError("a ZooKeeper retry slept in the simulation")


class SimAsyncResult:
    """kazoo's IAsyncResult for a read sent with `get_async`/`exists_async`: `get()` waits for
    its answer (the round trip it shares with the reads sent beside it) and returns or raises it."""

    def __init__(self, client: SimZkClient, value: Any = None, exception: BaseException | None = None) -> None:
        self._client = client
        self.value = value
        self.exception = exception
        self.received = False

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self._client._receive(self)
        if self.exception is not None:
            raise self.exception
        return self.value


class SimTransaction:
    def __init__(self, client: SimZkClient) -> None:
        self.client = client
        self.ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.committed = False

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False, sequence: bool = False):
        if ephemeral or sequence:
            raise NotImplementedError("ephemeral or sequential creates in a simulated transaction")
        self.ops.append(("create", (path, value), {}))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", (path,), {"version": version}))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set_data", (path, value), {"version": version}))

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", (path,), {"version": version}))

    def commit(self) -> list[Any]:
        s = self.client._op("transaction", write=True)
        self.committed = True
        return self.client.server.multi(self.ops, s)


class SimZkClient:
    """One node's ZooKeeper client (the subset of KazooClient odradek uses)."""

    def __init__(self, server: SimZooKeeper, node: Node, timeout: float) -> None:
        self.server = server
        self.loop = server.loop
        self.net = server.net
        self.node = node
        self.timeout = timeout
        self.handler = _Handler(self)
        self._listeners: list[Callable[[str], Any]] = []
        self._closed = False
        self._state = KazooState.CONNECTED
        self._blocked: list[Callable[[], None]] = []
        self._held: collections.deque[tuple[Session, Watcher, WatchedEvent]] = collections.deque()
        self._inbox: collections.deque[tuple[float, Session, Watcher, WatchedEvent]] = collections.deque()
        self._inbox_timer: Any = None
        self._inbox_last = 0.0
        # watchers set through this client, by path, until their event arrives (kazoo's
        # `_data_watchers` and `_child_watchers` together)
        self.registered: dict[str, set[Watcher]] = {}
        self._on_the_wire: list[SimAsyncResult] = []  # async reads sent, their round trip not yet charged
        self.reads_in_flight = 0  # async reads sent and not yet received (`max_reads_in_flight`: the most)
        self.max_reads_in_flight = 0
        self._session = server.open_session(self)
        self._last_contact = self.loop.time()
        self._ping = self.loop.call_later_as(node, timeout / 3, self._tick)
        self.DataWatch = functools.partial(DataWatch, self)
        self.ChildrenWatch = functools.partial(ChildrenWatch, self)

    # ------------------------------------------------------------- state
    @property
    def client_id(self) -> tuple[int, bytes]:
        return (self._session.id, b"\x00" * 16)

    @property
    def state(self) -> str:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state == KazooState.CONNECTED

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        if listener not in self._listeners:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def reachable(self) -> bool:
        net = self.net
        return self.server.up and not net.blocked(self.node.name, ZK) and not net.blocked(ZK, self.node.name)

    def _set_state(self, state: str) -> None:
        if state == self._state:
            return
        self._state = state
        self.server.trace.add(f"{self.loop.elapsed:.6f} zk client {self.node} {state}")
        for listener in list(self._listeners):
            self.loop.call_soon_as(self.node, self._run, functools.partial(listener, state))

    def _tick(self) -> None:
        """A ping, every third of the session timeout, while this node runs."""
        if self._closed:
            return
        now = self.loop.time()
        s = self._session
        if not self.net.blocked(self.node.name, ZK):
            self.server.touch(s)  # the server hears it (when up), whether or not its answer gets back
        if self.reachable():
            self._last_contact = now
            if s.expired:
                self._session_lost()
            elif self._state != KazooState.CONNECTED:
                self._set_state(KazooState.CONNECTED)
            self._reconnected()
        elif self._state == KazooState.CONNECTED and now - self._last_contact >= self.timeout * 2 / 3:
            self._set_state(KazooState.SUSPENDED)
            self.server.drop_watches(s)
            self._reset_watchers(KeeperState.CONNECTING)
        self._ping = self.loop.call_later_as(self.node, self.timeout / 3, self._tick)

    def _session_lost(self) -> None:
        """The server says the session expired: LOST, then a new session, CONNECTED."""
        self._set_state(KazooState.LOST)
        self._reset_watchers(KeeperState.EXPIRED_SESSION)
        self._session = self.server.open_session(self)
        self._set_state(KazooState.CONNECTED)

    def _reset_watchers(self, keeper_state: str) -> None:
        """The connection is given up: events on their way are lost with it, and every watcher
        registered is called once with a `NONE` event (kazoo's `_reset_watchers`), after the
        state listeners."""
        self._held.clear()
        self._inbox.clear()
        if self._inbox_timer is not None:
            self._inbox_timer.cancel()
            self._inbox_timer = None
        watchers = [w for ws in self.registered.values() for w in ws]
        self.registered = {}
        event = WatchedEvent(EventType.NONE, keeper_state, None)
        for w in watchers:
            self.loop.call_soon_as(self.node, self._run, functools.partial(w, event))

    def _reconnected(self) -> None:
        held, self._held = self._held, collections.deque()
        for s, w, event in held:
            self._deliver(s, w, event)
        blocked, self._blocked = self._blocked, []
        for resume in blocked:
            resume()

    def _op(self, what: str, *, write: bool = False, charge: bool = True) -> Session:
        """Before each call: ZooKeeper must be reachable, the session alive. `charge`: the
        caller waits for the round trip now (an async read's is charged when received)."""
        if self._closed:
            raise ConnectionClosedError("Connection has been closed")
        if not self.reachable():
            raise WouldBlock(self._blocked.append, f"{self.node}: {what} while cut from ZooKeeper")
        s = self._session
        self._last_contact = self.loop.time()
        if s.expired:
            self._session_lost()
            raise SessionExpiredError()
        self.server.touch(s)
        self.server.trace.add(f"{self.loop.elapsed:.6f} zk {what} by {self.node}")
        if charge:
            self._charge(write)
        return s

    def _charge(self, write: bool) -> None:
        net, server, me = self.net, self.server, self.node.name
        rtt = net.latency(me, ZK) + net.latency(ZK, me)
        jitter = rtt - net.base_latency(me, ZK) - net.base_latency(ZK, me)

        def again() -> float:  # the same round trip, sent as the link and ZooKeeper's log are then
            commit = server.commit_latency if write else 0.0
            return net.base_latency(me, ZK) + net.base_latency(ZK, me) + jitter + commit

        self.loop.charge(rtt + server.commit_latency if write else rtt, again)

    def _run(self, fn: Callable[[], Any]) -> None:
        """Run a callback kazoo would run in its own thread; one that would block waits."""
        if self._closed:
            return
        try:
            fn()
        except WouldBlock:

            def resume() -> None:
                self.loop.call_soon_as(self.node, self._run, fn)

            self._blocked.append(resume)
        except ConnectionClosedError:
            pass

    # ------------------------------------------------------------- watches
    def _event(self, s: Session, w: Watcher, event: WatchedEvent) -> None:
        """The server fired a watch of this client's: it arrives in order, after the latency."""
        self.server.trace.add(f"{self.loop.elapsed:.6f} zk event {event.type} {event.path} to {self.node}")
        when = max(
            self.loop.time() + self.server.commit_latency + self.net.latency(ZK, self.node.name), self._inbox_last
        )
        self._inbox_last = when
        self._inbox.append((when, s, w, event))
        if self._inbox_timer is None:
            self._inbox_timer = self.loop.call_at(when, self._drain_inbox, context=_zk_context(self.node))

    def _drain_inbox(self) -> None:
        self._inbox_timer = None
        now = self.loop.time()
        inbox = self._inbox
        while inbox and inbox[0][0] <= now:
            _when, s, w, event = inbox.popleft()
            if not self.server.up or self.net.blocked(ZK, self.node.name) or self._held:
                self._held.append((s, w, event))
            else:
                self._deliver(s, w, event)
        if inbox:
            self._inbox_timer = self.loop.call_at(inbox[0][0], self._drain_inbox, context=_zk_context(self.node))

    def _deliver(self, s: Session, w: Watcher, event: WatchedEvent) -> None:
        if s is not self._session or s.expired or self._closed:
            return
        ws = self.registered.get(event.path)
        if ws is not None:
            ws.discard(w)
            if not ws:
                del self.registered[event.path]
        self._run(functools.partial(w, event))

    # ----------------------------------------------------------- operations
    def retry(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, ZnodeStat]:
        s = self._op("get")
        return self.server.get(path, s, watch)

    def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None:
        s = self._op("exists")
        return self.server.exists(path, s, watch)

    def get_async(self, path: str, watch: Watcher | None = None) -> SimAsyncResult:
        s = self._op("get_async", charge=False)
        try:
            return self._sent(SimAsyncResult(self, self.server.get(path, s, watch)))
        except NoNodeError as e:
            return self._sent(SimAsyncResult(self, exception=e))

    def exists_async(self, path: str, watch: Watcher | None = None) -> SimAsyncResult:
        s = self._op("exists_async", charge=False)
        return self._sent(SimAsyncResult(self, self.server.exists(path, s, watch)))

    def _sent(self, r: SimAsyncResult) -> SimAsyncResult:
        self._on_the_wire.append(r)
        self.reads_in_flight += 1
        self.max_reads_in_flight = max(self.max_reads_in_flight, self.reads_in_flight)
        return r

    def _receive(self, r: SimAsyncResult) -> None:
        if r.received:
            return
        if r in self._on_the_wire:  # the first of those sent together: their round trip
            self._on_the_wire.clear()
            self._charge(False)
        r.received = True
        self.reads_in_flight -= 1

    def get_children(self, path: str, watch: Watcher | None = None, include_data: bool = False) -> list[str]:
        if include_data:
            raise NotImplementedError("get_children(include_data=True)")
        s = self._op("get_children")
        return self.server.get_children(path, s, watch)

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
    ) -> str:
        s = self._op("create", write=True)
        if makepath:
            self._ensure(_parent(path), s)
        return self.server.create(path, value, s, ephemeral=ephemeral, sequence=sequence)

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        s = self._op("set", write=True)
        return self.server.set(path, value, version, s)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        s = self._op("delete", write=True)
        if recursive:
            for child in self.server.get_children(path, s, None):
                self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
        return self.server.delete(path, version, s)

    def ensure_path(self, path: str, acl: Any = None) -> bool:
        s = self._op("ensure_path", write=True)
        self._ensure(path, s)
        return True

    def _ensure(self, path: str, s: Session) -> None:
        if path in ("", "/") or path in self.server.nodes:
            return
        self._ensure(_parent(path), s)
        try:
            self.server.create(path, b"", s, ephemeral=False, sequence=False)
        except NodeExistsError:
            pass

    def transaction(self) -> SimTransaction:
        return SimTransaction(self)

    # ----------------------------------------------------------- lifecycle
    def start(self, timeout: float | None = None) -> None:
        pass

    def stop(self) -> None:
        """A clean close: the session ends now (its ephemeral nodes go at once)."""
        if self._closed:
            return
        self._closed = True
        if self._ping is not None:
            self._ping.cancel()
        if self.reachable():
            self.server.close_session(self._session, "closed")

    def close(self) -> None:
        pass


def _zk_context(node: Node) -> Any:
    import contextvars

    from odradek.testing.sim.loop import NODE

    ctx = contextvars.Context()
    ctx.run(NODE.set, node)
    return ctx
