"""A watched copy of the cluster's znodes: brokers, controller, topics, partition states, configs.

Every broker keeps one `ZkCache` (its metadata store and, when it is the controller, the
controller read from it). kazoo's watch recipes, made through the client
(`zk.DataWatch(path, func)`, as KazooClient offers them, so the simulator's client can stand
in), call back on kazoo's own thread; the callbacks only record the znode's new contents
under a lock and tell the event loop (`on_change`, through `call_soon_threadsafe`), which
builds snapshots from `view()`. Nothing here blocks the event loop.

The watches of topics, their configs and their partitions' states, thousands of them, are
made through `zk_cache_reads.DataWatches`: their first reads go out many at a time
(`zookeeper.max.in.flight.requests`), as Kafka's ZooKeeperClient sends them, not one round
trip after another.

Watched: the children of /brokers/ids and each registration (with the session that made
it: a broker that restarted has a new `czxid`), /controller, /controller_epoch, the
children of /brokers/topics and each topic's assignment, the state of each partition the
assignment names, /config/topics/<topic>, /config/brokers/<default> and this broker's
/config/brokers/<id>, the children of /admin/delete_topics and each of them (which brokers
have dropped the topic), /admin/reassign_partitions.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient

from odradek.cluster import zk_layout as L
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zk_cache_reads import DEFAULT_MAX_IN_FLIGHT, DataWatches

NO_USER = False  # a client id's quotas of no user (/config/clients), beside None: the default user's
log = logging.getLogger("odradek.cluster.zk")


@dataclass(frozen=True, slots=True)
class CachedState:
    state: L.PartitionState
    version: int  # the znode's version: the partition epoch


@dataclass(frozen=True, slots=True)
class DeletionRequest:
    """/admin/delete_topics/<topic>: `czxid` tells one request from a later one for a topic of
    the same name; `dropped_by`: the brokers whose metadata has dropped the topic."""

    czxid: int
    dropped_by: frozenset[int]


@dataclass(slots=True)
class CacheView:
    """A consistent copy of what the cache holds (taken under its lock)."""

    cluster_id: str = ""
    controller: int = -1
    controller_epoch: int = 0
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    broker_sessions: dict[int, int] = field(default_factory=dict)  # broker id -> czxid of its registration
    topics: dict[str, L.TopicAssignment] = field(default_factory=dict)
    states: dict[tuple[str, int], CachedState] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # "<default>" or the id
    deleting: frozenset[str] = frozenset()
    reassigning: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    topic_versions: dict[str, int] = field(default_factory=dict)  # znode version of each assignment
    deletions: dict[str, DeletionRequest] = field(default_factory=dict)  # each of `deleting`, once read
    # user (desanitized; None the default user) -> config
    user_configs: dict[str | None, dict[str, str]] = field(default_factory=dict)
    # client id (None the default) -> config (quotas)
    client_configs: dict[str | None, dict[str, str]] = field(default_factory=dict)
    user_client_configs: dict[tuple[str | None, str | None], dict[str, str]] = field(default_factory=dict)
    # topic -> a number that changes whenever its assignment or one of its partitions' states
    # does (never reused): what changed since an earlier view, without comparing every partition
    topic_gens: dict[str, int] = field(default_factory=dict)


class ZkCache:
    def __init__(
        self,
        zk: KazooClient,
        node_id: int,
        listener: str,
        on_change: Callable[[], None],
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self.zk = zk
        self.max_in_flight = max_in_flight
        self._reads: DataWatches | None = None  # made at start
        self.node_id = node_id
        self.listener = listener
        self._on_change = on_change
        self._lock = threading.Lock()
        self._v = CacheView()
        self._watched_brokers: set[int] = set()
        self._watched_topics: set[str] = set()
        self._watched_deletions: set[str] = set()
        self._watched_users: set[str] = set()
        self._watched_clients: set[str] = set()  # znode paths under /config/clients and users/*/clients
        self._gens = itertools.count(1)
        self._stopped = False

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Set every watch (blocking: call from a worker thread). When it returns the cache
        holds what ZooKeeper held at that moment. A connection lost on the way (a loaded machine)
        is waited out and the call made again, as Kafka's ZooKeeperClient retries requests until
        connected; kazoo's watch recipes below retry the same way (`zk.retry`)."""
        for path in L.PERSISTENT_PATHS:
            self.zk.retry(self.zk.ensure_path, path)
        data, _ = self.zk.retry(self.zk.get, L.CLUSTER_ID)
        self._v.cluster_id = L.decode_cluster_id(data)
        if self._reads is None:
            self._reads = DataWatches(self.zk, self.max_in_flight)
        self.zk.DataWatch(L.CONTROLLER, self._controller_changed)
        self.zk.DataWatch(L.CONTROLLER_EPOCH, self._controller_epoch_changed)
        self.zk.ChildrenWatch(L.BROKER_IDS, self._brokers_changed)
        self.zk.ChildrenWatch(L.TOPICS, self._topics_changed)
        self.zk.ChildrenWatch(L.DELETE_TOPICS, self._deletions_changed)
        self.zk.DataWatch(L.REASSIGN_PARTITIONS, self._reassignments_changed)
        for entity in (L.DEFAULT_BROKER, str(self.node_id)):
            self.zk.DataWatch(L.broker_config_path(entity), self._broker_config_watcher(entity))
        self.zk.ChildrenWatch(L.CONFIG_USERS, self._users_changed)
        self.zk.ChildrenWatch(L.CONFIG_CLIENTS, self._clients_watcher(L.CONFIG_CLIENTS, NO_USER))

    def stop(self) -> None:
        self._stopped = True

    def view(self) -> CacheView:
        with self._lock:
            v = self._v
            return CacheView(
                v.cluster_id,
                v.controller,
                v.controller_epoch,
                dict(v.brokers),
                dict(v.broker_sessions),
                dict(v.topics),
                dict(v.states),
                dict(v.topic_configs),
                dict(v.broker_configs),
                v.deleting,
                dict(v.reassigning),
                dict(v.topic_versions),
                dict(v.deletions),
                dict(v.user_configs),
                dict(v.client_configs),
                dict(v.user_client_configs),
                dict(v.topic_gens),
            )

    def _changed(self) -> None:
        if not self._stopped:
            self._on_change()

    def _keep(self) -> bool | None:
        """What a kazoo watch callback returns: None keeps watching, False ends the watch."""
        return False if self._stopped else None

    # -------------------------------------------------------------- callbacks
    # Each runs on kazoo's callback thread; returning False ends that watch.
    def _controller_changed(self, data: bytes | None, stat: Any) -> bool | None:
        try:
            controller = L.decode_controller(data) if data else -1
        except L.LayoutError as e:
            log.warning("%s", e)
            controller = -1
        with self._lock:
            self._v.controller = controller
        self._changed()
        return self._keep()

    def _controller_epoch_changed(self, data: bytes | None, stat: Any) -> bool | None:
        try:
            epoch = L.decode_controller_epoch(data) if data else 0
        except L.LayoutError as e:
            log.warning("%s", e)
            epoch = 0
        with self._lock:
            self._v.controller_epoch = epoch
        self._changed()
        return self._keep()

    def _brokers_changed(self, children: list[str]) -> bool | None:
        ids = {int(c) for c in children if c.isdigit()}
        for bid in ids - self._watched_brokers:
            self._watched_brokers.add(bid)
            self.zk.DataWatch(L.broker_path(bid), self._broker_watcher(bid))
        return self._keep()

    def _broker_watcher(self, bid: int) -> Callable[[bytes | None, Any], bool | None]:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            with self._lock:
                if data is None:
                    self._v.brokers.pop(bid, None)
                    self._v.broker_sessions.pop(bid, None)
                else:
                    try:
                        self._v.brokers[bid] = L.decode_broker(bid, data, self.listener)
                        self._v.broker_sessions[bid] = stat.czxid
                    except L.LayoutError as e:
                        log.warning("ignoring broker registration: %s", e)
            self._changed()
            return self._keep()  # keep watching: the broker may register again

        return changed

    def _topics_changed(self, children: list[str]) -> bool | None:
        assert self._reads is not None
        self._watched_topics.update(children)
        # Every child, not only the new ones: a watch already made is kept (`DataWatches.watch`),
        # one whose first read was cut short is read now.
        watches: list[tuple[str, Callable[[bytes | None, Any], bool | None]]] = []
        for topic in sorted(children):
            watches.append((L.topic_path(topic), self._topic_watcher(topic)))
            watches.append((L.topic_config_path(topic), self._topic_config_watcher(topic)))
        self._reads.watch(watches)
        return self._keep()

    def _topic_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            if data is None:
                with self._lock:
                    self._v.topics.pop(topic, None)
                    self._v.topic_versions.pop(topic, None)
                    self._v.topic_gens.pop(topic, None)
                    for key in [k for k in self._v.states if k[0] == topic]:
                        del self._v.states[key]
                self._watched_topics.discard(topic)
                self._changed()
                return False
            try:
                assignment = L.decode_topic(topic, data)
            except L.LayoutError as e:
                log.warning("ignoring topic: %s", e)
                return self._keep()
            with self._lock:
                self._v.topics[topic] = assignment
                self._v.topic_versions[topic] = stat.version
                self._v.topic_gens[topic] = next(self._gens)
            # Each partition's state: a watch already made is kept (a topic re-created under the
            # same name reuses it), the new ones read many at a time.
            assert self._reads is not None
            self._reads.watch(
                [(L.partition_state_path(topic, p), self._state_watcher(topic, p)) for p in assignment.partitions]
            )
            self._changed()
            return self._keep()

        return changed

    def _state_watcher(self, topic: str, partition: int) -> Callable[[bytes | None, Any], bool | None]:
        key = (topic, partition)

        # Kept while the broker runs: a topic re-created under the same name reuses it.
        def changed(data: bytes | None, stat: Any) -> bool | None:
            with self._lock:
                if data is None:
                    self._v.states.pop(key, None)
                else:
                    try:
                        self._v.states[key] = CachedState(
                            L.decode_partition_state(topic, partition, data), stat.version
                        )
                    except L.LayoutError as e:
                        log.warning("ignoring partition state: %s", e)
                self._v.topic_gens[topic] = next(self._gens)
            self._changed()
            return self._keep()

        return changed

    def _topic_config_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        path = L.topic_config_path(topic)

        def changed(data: bytes | None, stat: Any) -> bool | None:
            try:
                config = L.decode_config(path, data)
            except L.LayoutError as e:
                log.warning("ignoring topic config: %s", e)
                config = {}
            with self._lock:
                if data is None and topic not in self._watched_topics:
                    self._v.topic_configs.pop(topic, None)
                    stop = True
                else:
                    self._v.topic_configs[topic] = config
                    stop = False
            self._changed()
            return False if stop else self._keep()

        return changed

    def _broker_config_watcher(self, entity: str) -> Callable[[bytes | None, Any], bool | None]:
        path = L.broker_config_path(entity)

        def changed(data: bytes | None, stat: Any) -> bool | None:
            try:
                config = L.decode_config(path, data)
            except L.LayoutError as e:
                log.warning("ignoring broker config: %s", e)
                config = {}
            with self._lock:
                self._v.broker_configs[entity] = config
            self._changed()
            return self._keep()

        return changed

    def _users_changed(self, children: list[str]) -> bool | None:
        for znode in set(children) - self._watched_users:
            self._watched_users.add(znode)
            self.zk.DataWatch(f"{L.CONFIG_USERS}/{znode}", self._user_config_watcher(znode))
            self.zk.ChildrenWatch(f"{L.CONFIG_USERS}/{znode}", self._user_children_watcher(znode))
        return self._keep()

    # client quotas: /config/clients/<c>, and /config/users/<u>/clients/<c> once <u> has a clients child
    def _user_children_watcher(self, user_znode: str) -> Callable[[list[str]], bool | None]:
        def changed(children: list[str]) -> bool | None:
            path = f"{L.CONFIG_USERS}/{user_znode}/clients"
            if "clients" in children and path not in self._watched_clients:
                self._watched_clients.add(path)
                self.zk.ChildrenWatch(path, self._clients_watcher(path, L.entity_of_znode(user_znode)))
            elif "clients" not in children:  # gone (kazoo ended its watch): watched again if it comes back
                self._watched_clients.discard(path)
            return self._keep()

        return changed

    def _clients_watcher(self, parent: str, user: str | None | bool) -> Callable[[list[str]], bool | None]:
        """`user`: the clients of a user (None: the default user's), or NO_USER (/config/clients)."""

        def changed(children: list[str]) -> bool | None:
            for znode in children:
                path = f"{parent}/{znode}"
                if path not in self._watched_clients:
                    self._watched_clients.add(path)
                    self.zk.DataWatch(path, self._client_config_watcher(path, user, L.entity_of_znode(znode)))
            return self._keep()

        return changed

    def _client_config_watcher(
        self, path: str, user: str | None | bool, client: str | None
    ) -> Callable[[bytes | None, Any], bool | None]:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            try:
                config = L.decode_config(path, data) if data is not None else {}
            except L.LayoutError as e:
                log.warning("ignoring client config: %s", e)
                config = {}
            with self._lock:
                if user is NO_USER:
                    target: dict[Any, dict[str, str]] = self._v.client_configs
                    key: Any = client
                else:
                    target, key = self._v.user_client_configs, (user, client)
                if config:
                    target[key] = config
                else:
                    target.pop(key, None)
            self._changed()
            if data is None:
                self._watched_clients.discard(path)
                return False
            return self._keep()

        return changed

    def _user_config_watcher(self, znode: str) -> Callable[[bytes | None, Any], bool | None]:
        path, user = f"{L.CONFIG_USERS}/{znode}", L.entity_of_znode(znode)

        def changed(data: bytes | None, stat: Any) -> bool | None:
            try:
                config = L.decode_config(path, data) if data is not None else {}
            except L.LayoutError as e:
                log.warning("ignoring user config: %s", e)
                config = {}
            with self._lock:
                if config:
                    self._v.user_configs[user] = config
                else:
                    self._v.user_configs.pop(user, None)
            self._changed()
            if data is None:  # deleted, its clients child first: both watched again if they come back
                self._watched_users.discard(znode)
                self._watched_clients.discard(f"{path}/clients")
                return False
            return self._keep()

        return changed

    def _deletions_changed(self, children: list[str]) -> bool | None:
        with self._lock:
            self._v.deleting = frozenset(children)
        for topic in set(children) - self._watched_deletions:
            self._watched_deletions.add(topic)
            self.zk.DataWatch(L.delete_topic_path(topic), self._deletion_watcher(topic))
        self._changed()
        return self._keep()

    def _deletion_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            if stat is None:  # done: the controller removed the request
                with self._lock:
                    self._v.deletions.pop(topic, None)
                self._watched_deletions.discard(topic)
                self._changed()
                return False
            try:
                dropped_by = L.decode_deletion(topic, data)
            except L.LayoutError as e:
                log.warning("%s", e)
                dropped_by = frozenset()
            with self._lock:
                self._v.deletions[topic] = DeletionRequest(stat.czxid, dropped_by)
            self._changed()
            return self._keep()

        return changed

    def _reassignments_changed(self, data: bytes | None, stat: Any) -> bool | None:
        try:
            moves = L.decode_reassignment(data)
        except L.LayoutError as e:
            log.warning("%s", e)
            moves = {}
        with self._lock:
            self._v.reassigning = moves
        self._changed()
        return self._keep()


def read_view(zk: KazooClient, listener: str = "PLAINTEXT") -> CacheView:
    """One reading of the cluster's znodes, without watches (`odradek cluster status`)."""
    from kazoo.exceptions import NoNodeError

    def get(path: str) -> tuple[bytes | None, Any]:
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            return None, None
        return data, stat

    def children(path: str) -> list[str]:
        try:
            return list(zk.get_children(path))
        except NoNodeError:
            return []

    v = CacheView()
    data, _ = get(L.CLUSTER_ID)
    v.cluster_id = L.decode_cluster_id(data) if data else ""
    data, _ = get(L.CONTROLLER)
    v.controller = L.decode_controller(data) if data else -1
    data, _ = get(L.CONTROLLER_EPOCH)
    v.controller_epoch = L.decode_controller_epoch(data) if data else 0
    for c in children(L.BROKER_IDS):
        data, stat = get(L.broker_path(int(c)))
        if data is not None:
            v.brokers[int(c)] = L.decode_broker(int(c), data, listener)
            v.broker_sessions[int(c)] = stat.czxid
    for topic in children(L.TOPICS):
        data, stat = get(L.topic_path(topic))
        if data is None:
            continue
        a = v.topics[topic] = L.decode_topic(topic, data)
        v.topic_versions[topic] = stat.version
        for p in a.partitions:
            data, stat = get(L.partition_state_path(topic, p))
            if data is not None:
                v.states[(topic, p)] = CachedState(L.decode_partition_state(topic, p, data), stat.version)
        data, _ = get(L.topic_config_path(topic))
        v.topic_configs[topic] = L.decode_config(L.topic_config_path(topic), data)
    v.deleting = frozenset(children(L.DELETE_TOPICS))
    for topic in v.deleting:
        data, stat = get(L.delete_topic_path(topic))
        if stat is not None:
            v.deletions[topic] = DeletionRequest(stat.czxid, L.decode_deletion(topic, data))
    return v
