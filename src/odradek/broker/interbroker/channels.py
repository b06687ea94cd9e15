"""Connections from this broker to the other brokers: one policy, keyed by peer and purpose.

Every broker-to-broker request goes over a connection this module opens, caches and closes:
the replica fetchers' Fetch and ListOffsets, AlterPartition and forwarded requests to the
controller, ControlledShutdown, WriteTxnMarkers and KIP-890's AddPartitionsToTxn. Callers
ask for `await channels.connection(node, purpose)` (a `client.conn.Connection`, connected
and version-negotiated) or send through `await channels.request(node, purpose, ...)`; the
replication code takes `channels.connect` as its connection provider.

**Keying: one connection per (peer node, purpose).** Kafka answers the requests of one
connection strictly in the order they were sent (`client/conn.py` pipelines on that
promise), so a request the peer holds back holds up every request behind it on the same
connection:
- a leader holds a follower's Fetch up to `replica.fetch.wait.max.ms` when it has nothing
  new; an AlterPartition or a marker queued behind it would wait as long, on every fetch;
- WriteTxnMarkers is answered once the in-sync replicas have the marker (acks=all, up to
  `request.timeout.ms` when a follower is slow); a KIP-890 verification behind it (on the
  producer's path) would wait too;
- a forwarded ElectLeaders or a ControlledShutdown waits for the controller's writes.
Kafka keeps a separate `NetworkClient` per purpose for the same reason, and these are its
purposes (`Purpose`):

| purpose | requests | Kafka's client |
|---|---|---|
| `replica-fetcher-<i>` | Fetch, ListOffsets of a leader's fetcher i | ReplicaFetcherThread's BrokerBlockingSender |
| `alter-partition` | AlterPartition to the controller | AlterPartitionManager |
| `forwarding` | requests passed on to the controller, ControlledShutdown | ForwardingManager |
| `txn-markers` | WriteTxnMarkers to partition leaders | TransactionMarkerChannelManager |
| `txn-verification` | AddPartitionsToTxn v4 `verify_only` to a transaction coordinator | AddPartitionsToTxnManager |

A connection is opened on first use (a single node never opens one), so a broker holds at
most `num.replica.fetchers` + 4 connections to a peer, and only for what it uses.

**The policy, the same for every purpose** (`ChannelPolicy`, from the broker's settings):
- *Endpoints from the metadata.* Each `connection()` looks the node up in the newest
  snapshot: a node the metadata does not hold is `NodeUnavailable` at once; a cached
  connection to another host:port than the node's current one (it restarted on another
  endpoint) is closed and a new one opened, with no backoff.
- *Connect timeout* `socket.connection.setup.timeout.ms` (TCP connect and the ApiVersions
  exchange).
- *Request timeout* `request.timeout.ms`, plus `replica.fetch.wait.max.ms` for the replica
  fetchers (their leader may hold a Fetch that long by design). It is the connection's
  default, so a caller holding the connection gets it too. A timeout closes the connection
  and fails whatever else is in flight on it (`client/conn.py`: a late answer would arrive
  out of step with the next ones), as Kafka's NetworkClient does.
- *Reconnect backoff.* A failed connect or a lost connection (peer gone, timeout) makes the
  next attempt for that (node, purpose) wait `reconnect.backoff.ms`, doubling with each further
  failure up to `reconnect.backoff.max.ms`, ±20 % jitter (Kafka's ClusterConnectionStates);
  a successful connect resets it. `connection()` waits out the backoff, then tries once and
  raises `NodeUnavailable` if that fails: what to do about a peer that is gone stays with the
  caller (retry with newer metadata, answer an error), and no caller can dial faster than
  this. Kafka's brokers pass a fixed 50 ms to these clients (there is no broker setting);
  odradek starts at 50 ms and caps the doubling at 1 s, so a dead peer is dialled at most
  once a second per purpose rather than twenty times.
- *Authenticated* when the inter-broker listener is SASL: each connection logs in before its
  first request and re-authenticates within its session's lifetime (sasl_login.py); a failed
  login is a failed connect (backoff).
- *Closed on shutdown* (`close()`): every connection, and a `connection()` after it raises.

Concurrent callers of one (node, purpose) share one connect attempt. Everything runs on the
broker's event loop; time is the loop's clock.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.broker.interbroker.sasl_login import InterBrokerLogin, login_authenticator
from odradek.client.conn import Connection
from odradek.cluster.metadata import BrokerInfo
from odradek.protocol.errors import KafkaError

log = logging.getLogger("odradek.broker.interbroker")

RECONNECT_BACKOFF_MS = 50  # Kafka's brokers' inter-broker clients: 50 ms
RECONNECT_BACKOFF_MAX_MS = 1000
BACKOFF_JITTER = 0.2  # Kafka's ClusterConnectionStates.RECONNECT_BACKOFF_JITTER


class Purpose:
    """What a connection carries (see the module doc for why they are separate)."""

    ALTER_PARTITION = "alter-partition"
    FORWARDING = "forwarding"
    TXN_MARKERS = "txn-markers"
    TXN_VERIFICATION = "txn-verification"

    @staticmethod
    def replica_fetcher(index: int) -> str:
        return f"replica-fetcher-{index}"

    @staticmethod
    def is_replica_fetcher(purpose: str) -> bool:
        return purpose.startswith("replica-fetcher-")


class Settings(Protocol):
    """The broker's settings by Kafka name (broker/config.py's BrokerConfig)."""

    def __getitem__(self, name: str) -> Any: ...


class NodeUnavailable(ConnectionError):
    """No connection to that node now: not in the metadata, in backoff after it failed, or the
    connect failed (a retriable condition: the caller retries, usually with newer metadata)."""


@dataclass(frozen=True)
class ChannelPolicy:
    request_timeout_ms: int = 30000  # request.timeout.ms
    connection_setup_timeout_ms: int = 10000  # socket.connection.setup.timeout.ms
    reconnect_backoff_ms: int = RECONNECT_BACKOFF_MS
    reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS
    replica_fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms: the replica fetchers' extra wait
    # TLS to the inter-broker listener when its security protocol is SSL or SASL_SSL (server.py builds it)
    ssl_context: ssl.SSLContext | None = None
    # the broker's SASL login when it is SASL_PLAINTEXT or SASL_SSL (sasl_login.py: authenticated
    # before the first request, re-authenticated within the session's lifetime)
    sasl: InterBrokerLogin | None = None

    @classmethod
    def from_broker(cls, config: Settings) -> ChannelPolicy:
        return cls(
            request_timeout_ms=config["request.timeout.ms"],
            connection_setup_timeout_ms=config["socket.connection.setup.timeout.ms"],
            replica_fetch_wait_max_ms=config["replica.fetch.wait.max.ms"],
        )

    def request_timeout_ms_for(self, purpose: str) -> int:
        """How long a request of this purpose may go unanswered before its connection is closed."""
        if Purpose.is_replica_fetcher(purpose):
            return self.request_timeout_ms + self.replica_fetch_wait_max_ms
        return self.request_timeout_ms

    def backoff_ms(self, failures: int, rand: float) -> float:
        """The wait after the `failures`-th consecutive failure (1, 2, ...): the initial backoff
        doubled per earlier failure, times a jitter factor from `rand` in [0, 1), capped."""
        doublings = min(max(failures - 1, 0), 32)
        jitter = 1 - BACKOFF_JITTER + 2 * BACKOFF_JITTER * rand
        return min(self.reconnect_backoff_ms * (1 << doublings) * jitter, self.reconnect_backoff_max_ms)


@dataclass(eq=False)
class _Slot:
    """One (node, purpose): its connection, the endpoint it goes to, and its backoff state."""

    conn: Connection | None = None
    endpoint: tuple[str, int] | None = None
    failures: int = 0  # consecutive failed connects or lost connections
    not_before: float = 0.0  # loop time before which no connect is tried
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class NodeChannels:
    def __init__(
        self,
        node_id: int,
        endpoint_of: Callable[[int], BrokerInfo | None],
        policy: ChannelPolicy,
        *,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """`endpoint_of(node)`: the node as the newest metadata has it (None: not registered)."""
        self.node_id = node_id
        self.endpoint_of = endpoint_of
        self.policy = policy
        self._rand = rand
        self._slots: dict[tuple[int, str], _Slot] = {}
        self._closed = False

    def __repr__(self) -> str:
        live = sum(1 for s in self._slots.values() if s.conn is not None and s.conn.connected)
        return f"NodeChannels(broker {self.node_id}, {live} connections)"

    # ------------------------------------------------------------------ connections
    async def connection(self, node: int, purpose: str) -> Connection:
        """The connection to `node` for `purpose`, opened (after any backoff) if there is none;
        NodeUnavailable when that cannot be done now."""
        slot = self._slots.get((node, purpose))
        if slot is None:
            slot = self._slots[(node, purpose)] = _Slot()
        conn = slot.conn
        if conn is not None and conn.connected and slot.endpoint == self._endpoint(node):
            return conn  # the common case: no lock, no wait
        async with slot.lock:
            return await self._connect(node, purpose, slot)

    async def connect(self, node: BrokerInfo, purpose: str) -> Connection:
        """`connection` for a node as the caller's metadata has it: the replication code's
        `ConnectionProvider` (the replica fetchers' leaders, the AlterPartition sender's
        controller). The endpoint is still the newest metadata's."""
        return await self.connection(node.node_id, purpose)

    async def request(self, node: int, purpose: str, api_key: int, data: Any, *, version: int | None = None) -> Any:
        """One request to `node` on the `purpose` connection, answered within the policy's
        timeout. NodeUnavailable when no connection can be had; the connection's errors
        (KafkaConnectionError, RequestTimedOutError) when it failed meanwhile (it is closed and
        the next request reconnects)."""
        conn = await self.connection(node, purpose)
        return await conn.request(api_key, data, version=version)

    def close(self) -> None:
        """Close every connection; later `connection()` calls raise NodeUnavailable."""
        self._closed = True
        slots = list(self._slots.values())
        self._slots.clear()
        for slot in slots:
            conn, slot.conn = slot.conn, None
            if conn is not None:
                conn.close()

    # ------------------------------------------------------------------ policy
    def _endpoint(self, node: int) -> tuple[str, int] | None:
        info = self.endpoint_of(node)
        return None if info is None else (info.host, info.port)

    async def _connect(self, node: int, purpose: str, slot: _Slot) -> Connection:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise NodeUnavailable(f"connections to other brokers are closed (broker {self.node_id} stopping)")
            endpoint = self._endpoint(node)
            if endpoint is None:
                raise NodeUnavailable(f"broker {node} is not in the metadata")
            conn = slot.conn
            if conn is not None:
                if conn.connected and slot.endpoint == endpoint:
                    return conn  # another caller connected while this one waited for the lock
                slot.conn = None
                conn.close()
            if slot.endpoint != endpoint:
                if slot.endpoint is not None:
                    log.info("broker %d moved from %s:%d to %s:%d", node, *slot.endpoint, *endpoint)
                slot.endpoint, slot.failures, slot.not_before = endpoint, 0, 0.0
            wait = slot.not_before - loop.time()
            if wait <= 0:
                break
            await asyncio.sleep(wait)  # then look again: the endpoint may have changed meanwhile
        host, port = endpoint
        options: dict[str, Any] = dict(
            node_id=node,
            client_id=f"broker-{self.node_id}-{purpose}",
            request_timeout_ms=self.policy.request_timeout_ms_for(purpose),
            connect_timeout_ms=self.policy.connection_setup_timeout_ms,
            ssl_context=self.policy.ssl_context,
        )
        login = self.policy.sasl
        authenticate = None if login is None else login_authenticator(login)
        conn = Connection(host, port, authenticate=authenticate, **options)
        try:
            await conn.connect()
        except (KafkaError, OSError) as e:
            conn.close()
            self._failed(slot, loop.time())
            raise NodeUnavailable(f"cannot connect to broker {node} at {host}:{port} ({purpose}): {e}") from e
        if self._closed:  # close() ran while this connect was in flight
            conn.close()
            raise NodeUnavailable(f"connections to other brokers are closed (broker {self.node_id} stopping)")
        slot.conn, slot.failures, slot.not_before = conn, 0, 0.0
        conn.on_close(lambda c: self._lost(slot, c))
        return conn

    def _failed(self, slot: _Slot, now: float) -> None:
        slot.failures += 1
        slot.not_before = now + self.policy.backoff_ms(slot.failures, self._rand()) / 1000

    def _lost(self, slot: _Slot, conn: Connection) -> None:
        """A connection closed: by the peer, a timeout or a caller (not by this class, which
        forgets a connection before closing it): the next connect backs off."""
        if slot.conn is conn:
            slot.conn = None
            try:
                now = asyncio.get_running_loop().time()
            except RuntimeError:  # closed from outside the loop: nothing waits on the backoff
                return
            self._failed(slot, now)
