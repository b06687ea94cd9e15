"""Bootstrap, the metadata cache and one connection per broker.

`Cluster` owns every connection of one client. It bootstraps from the configured
servers, keeps a metadata snapshot for the topics the client cares about, refreshes
it when told it is stale (leader errors, unknown partitions, lost connections) or when
it is older than ``metadata.max.age.ms``, and sends requests to nodes with retries.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import errors as E
from . import sasl
from .config import parse_hostport
from .conn import Connection
from .tls import ssl_context

log = logging.getLogger(__name__)

METADATA = 3
FIND_COORDINATOR = 10

# Errors meaning "your metadata is stale": refresh, back off, retry.
STALE_METADATA_CODES = frozenset(
    {
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        5,  # LEADER_NOT_AVAILABLE
        6,  # NOT_LEADER_OR_FOLLOWER
        9,  # REPLICA_NOT_AVAILABLE
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
        100,  # UNKNOWN_TOPIC_ID
    }
)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()
    error: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: Any = None
    is_internal: bool = False
    error: int = 0
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterMetadata:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None


def parse_metadata(resp) -> ClusterMetadata:
    md = ClusterMetadata()
    for b in resp.brokers:
        md.brokers[int(b.node_id)] = BrokerInfo(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
    md.controller_id = int(getattr(resp, "controller_id", -1))
    md.cluster_id = getattr(resp, "cluster_id", None)
    for t in resp.topics:
        if t.name is None:
            continue
        ti = TopicInfo(t.name, getattr(t, "topic_id", None), bool(getattr(t, "is_internal", False)), int(t.error_code))
        for p in t.partitions:
            ti.partitions[int(p.partition_index)] = PartitionInfo(
                t.name,
                int(p.partition_index),
                int(p.leader_id),
                int(getattr(p, "leader_epoch", -1)),
                tuple(int(x) for x in p.replica_nodes),
                tuple(int(x) for x in p.isr_nodes),
                tuple(int(x) for x in getattr(p, "offline_replicas", ())),
                int(p.error_code),
            )
        md.topics[t.name] = ti
    return md


def _keep_newer_leaders(old: ClusterMetadata, new: ClusterMetadata) -> None:
    """A partition whose leader epoch in `new` is older than the one known keeps what is known
    (Java's Metadata.updateLatestMetadata, KIP-320): a broker with a stale view, such as a
    leader deposed while cut from ZooKeeper, would otherwise send the client back to itself,
    and its shorter log answers the consumer's position OFFSET_OUT_OF_RANGE."""
    for name, ti in new.topics.items():
        known = old.topics.get(name)
        if known is None or (ti.topic_id is not None and known.topic_id is not None and ti.topic_id != known.topic_id):
            continue  # a topic deleted and created again starts over
        for index, p in ti.partitions.items():
            was = known.partitions.get(index)
            if was is not None and p.leader_epoch >= 0 and was.leader_epoch > p.leader_epoch:
                ti.partitions[index] = was


class Cluster:
    """The connections and metadata of one client (asyncio; use from its loop only)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self._authenticate = sasl.authenticator(config)
        self.bootstrap = [parse_hostport(s) for s in config["bootstrap.servers"]]
        if not self.bootstrap:
            raise ValueError("bootstrap.servers is empty")
        self.client_id = config["client.id"]
        self.request_timeout_ms = int(config["request.timeout.ms"])
        self.retry_backoff = int(config["retry.backoff.ms"]) / 1000
        self.retry_backoff_max = int(config.get("retry.backoff.max.ms", 1000)) / 1000
        self.metadata_max_age = int(config["metadata.max.age.ms"]) / 1000
        self.allow_auto_create = bool(config.get("allow.auto.create.topics", True))
        protocol = config.get("security.protocol", "PLAINTEXT")
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(
                f"security.protocol={protocol}: one of PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL is supported"
            )
        self.ssl_context = ssl_context(config, server=False) if protocol in ("SSL", "SASL_SSL") else None
        self.metadata = ClusterMetadata()
        self.topics: set[str] = set()
        self.all_topics = False  # track every topic (pattern subscriptions)
        self._conns: dict[Any, Connection] = {}
        self._connecting: dict[Any, asyncio.Future] = {}
        self._refresh_task: asyncio.Task | None = None
        self._last_refresh = 0.0
        self._listeners: list[Callable[[ClusterMetadata], None]] = []
        self._updated: asyncio.Event | None = None
        self._closed = False
        self._bootstrap_conn: Connection | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._updated = asyncio.Event()
        await self.refresh()

    async def close(self) -> None:
        self._closed = True
        if self._refresh_task is not None and not self._refresh_task.done():
            self._refresh_task.cancel()
        for c in list(self._conns.values()):
            c.close(E.KafkaConnectionError("client closed"))
        if self._bootstrap_conn is not None:
            self._bootstrap_conn.close()
        self._conns.clear()

    def add_listener(self, cb: Callable[[ClusterMetadata], None]) -> None:
        self._listeners.append(cb)

    # ------------------------------------------------------------------ connections
    def _make_conn(self, host: str, port: int, node_id: int) -> Connection:
        return Connection(
            host,
            port,
            node_id=node_id,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=int(self.config.get("socket.connection.setup.timeout.ms", 10000)),
            ssl_context=self.ssl_context,
            authenticate=self._authenticate,
        )

    def open_connection(self, node_id: int) -> Connection | None:
        """The open connection to `node_id`, or None (none yet, being opened, or closed)."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and conn.connected else None

    async def connection(self, node_id: int) -> Connection:
        """The connection to `node_id`, opened on first use."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            self.request_update()
            raise E.KafkaConnectionError(f"unknown broker {node_id}")
        fut = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = fut
        try:
            conn = self._make_conn(broker.host, broker.port, node_id)
            await conn.connect()
            conn.on_close(self._on_conn_close)
            self._conns[node_id] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved
            raise
        finally:
            del self._connecting[node_id]

    def _on_conn_close(self, conn: Connection) -> None:
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]
        if not self._closed:
            self.request_update()

    async def any_connection(self) -> Connection:
        """A connection to some broker of the current metadata (Java's leastLoadedNode): the least
        loaded open one, else a new one. A broker the metadata no longer lists (fenced, or cut
        from ZooKeeper) is not asked: its answers come from a stale view of the cluster."""
        brokers = self.metadata.brokers
        open_conns = [c for node, c in self._conns.items() if c.connected and (not brokers or node in brokers)]
        if open_conns:
            return min(open_conns, key=lambda c: c.in_flight)
        nodes = list(self.metadata.brokers)
        random.shuffle(nodes)
        for node_id in nodes:
            try:
                return await self.connection(node_id)
            except E.KafkaError:
                continue
        return await self._bootstrap_connection()

    async def _bootstrap_connection(self) -> Connection:
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        last: Exception | None = None
        servers = list(self.bootstrap)
        random.shuffle(servers)
        for host, port in servers:
            conn = self._make_conn(host, port, -1)
            try:
                await conn.connect()
                self._bootstrap_conn = conn
                return conn
            except E.KafkaError as e:
                if getattr(e, "code", None) in sasl.FATAL_CODES:  # as the Java client: not retried
                    raise
                last = e
        raise E.NoBrokersAvailable(f"no bootstrap server reachable ({self.config['bootstrap.servers']}): {last}")

    # ------------------------------------------------------------------ metadata
    def request_update(self) -> None:
        """Mark the metadata stale: a refresh starts in the background (one at a time)."""
        if self._closed:
            return
        if self._refresh_task is None or self._refresh_task.done():
            self._refresh_task = asyncio.get_running_loop().create_task(self._background_refresh())

    async def _background_refresh(self) -> None:
        # at most one refresh per retry.backoff.ms (Kafka's metadata refresh backoff): a
        # partition that stays leaderless must not turn its retries into a request storm
        wait = self._last_refresh + self.retry_backoff - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        delay = self.retry_backoff
        while not self._closed:
            try:
                await self.refresh()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("metadata refresh failed: %r", e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_backoff_max)

    def maybe_refresh(self) -> None:
        if time.monotonic() - self._last_refresh > self.metadata_max_age:
            self.request_update()

    async def refresh(self, topics: list[str] | None = None) -> ClusterMetadata:
        """Fetch metadata for the tracked topics (or all topics when tracking all) and cache it."""
        if topics is None:
            topics = None if self.all_topics else sorted(self.topics)
        resp = await self.metadata_request(topics, self.allow_auto_create)
        md = parse_metadata(resp)
        _keep_newer_leaders(self.metadata, md)
        if topics is not None and not self.all_topics:
            # keep what we knew about topics not in this request
            for name, ti in self.metadata.topics.items():
                if name not in md.topics and name in self.topics:
                    md.topics[name] = ti
        self.metadata = md
        self._last_refresh = time.monotonic()
        for cb in self._listeners:
            cb(md)
        return md

    async def metadata_request(self, topics: list[str] | None, allow_auto_create: bool = False):
        conn = await self.any_connection()
        version = conn.version(METADATA)
        if topics is None:
            tlist = None if version >= 1 else ()
        else:
            tlist = [{"name": t} for t in topics]
        return await conn.request(METADATA, {"topics": tlist, "allow_auto_topic_creation": allow_auto_create})

    def add_topics(self, topics) -> bool:
        """Track more topics; True when any was new (the caller may want a refresh)."""
        new = set(topics) - self.topics
        self.topics |= new
        return bool(new)

    def partitions_for(self, topic: str) -> dict[int, PartitionInfo] | None:
        ti = self.metadata.topics.get(topic)
        if ti is None or ti.error or not ti.partitions:
            return None
        return ti.partitions

    def leader_for(self, topic: str, partition: int) -> int:
        ti = self.metadata.topics.get(topic)
        if ti is None:
            return -1
        p = ti.partitions.get(partition)
        return -1 if p is None else p.leader

    async def wait_for_topic(
        self, topic: str, timeout: float, partition: int | None = None
    ) -> dict[int, PartitionInfo]:
        """Partitions of `topic`, refreshing metadata until it is known (and has `partition`,
        when one is given: a record for a partition added since the last refresh waits for
        the metadata that shows it, as the Java producer does) or `timeout` passes."""
        deadline = time.monotonic() + timeout
        if self.add_topics([topic]):
            self.request_update()
        delay = self.retry_backoff

        def known():
            parts = self.partitions_for(topic)
            return parts if parts is not None and (partition is None or partition in parts) else None

        while True:
            parts = known()
            if parts is not None:
                return parts
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                ti = self.metadata.topics.get(topic)
                if ti is not None and ti.error and ti.error not in STALE_METADATA_CODES:
                    raise E.error_class(ti.error)(f"topic {topic!r}")
                if partition is not None and ti is not None and ti.partitions:
                    raise E.KafkaTimeoutError(
                        f"partition {partition} of topic {topic!r} with partition count {len(ti.partitions)} "
                        f"is not present in metadata after {timeout:.1f}s"
                    )
                raise E.KafkaTimeoutError(f"topic {topic!r} not present in metadata after {timeout:.1f}s")
            try:
                await asyncio.wait_for(self.refresh(), remaining)
            except (TimeoutError, E.KafkaError) as e:
                log.debug("metadata for %s: %r", topic, e)
            if known() is None:
                ti = self.metadata.topics.get(topic)
                if ti is not None and ti.error and ti.error not in STALE_METADATA_CODES and ti.error != 0:
                    raise E.error_class(ti.error)(f"topic {topic!r}")
                await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, self.retry_backoff_max)

    # ------------------------------------------------------------------ requests
    async def send(
        self, node_id: int, api_key: int, data: Any, *, version: int | None = None, timeout: float | None = None
    ) -> Any:
        conn = await self.connection(node_id)
        return await conn.request(api_key, data, version=version, timeout=timeout)

    async def retrying(self, fn: Callable[[], Any], *, timeout: float | None = None, what: str = "request") -> Any:
        """Call `fn` (a coroutine function) until it succeeds, a non-retriable error, or the deadline."""
        timeout = timeout if timeout is not None else int(self.config.get("default.api.timeout.ms", 60000)) / 1000
        deadline = time.monotonic() + timeout
        delay = self.retry_backoff
        while True:
            try:
                return await fn()
            except E.KafkaError as e:
                if not e.retriable or time.monotonic() + delay > deadline:
                    raise
                log.debug("%s failed, retrying: %r", what, e)
                if isinstance(e, E.KafkaConnectionError) or e.code in STALE_METADATA_CODES:
                    self.request_update()
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_backoff_max)

    async def find_coordinator(self, key: str, key_type: int = 0) -> int:
        """Node id of the group (0) or transaction (1) coordinator for `key`."""

        async def attempt():
            conn = await self.any_connection()
            resp = await conn.request(FIND_COORDINATOR, {"key": key, "key_type": key_type})
            code = int(resp.error_code)
            if code:
                error = E.error_class(code)(getattr(resp, "error_message", None) or f"FindCoordinator {key!r}")
                if error.retriable:  # asked again after new metadata, as Java's ensureCoordinatorReady
                    self.request_update()
                raise error
            node = int(resp.node_id)
            if node not in self.metadata.brokers:
                self.metadata.brokers[node] = BrokerInfo(node, resp.host, int(resp.port))
            return node

        return await self.retrying(attempt, what="FindCoordinator")
