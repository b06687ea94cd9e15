"""Where the replication code's connections to other brokers come from.

A `ConnectionProvider` is a coroutine function `(node, purpose) -> Connection`: a connected
client connection to that broker, for one purpose (``"replica-fetcher-0"``,
``"alter-partition"``). Requests on one connection are answered in order, so a purpose
keeps a replica fetch's long poll (up to replica.fetch.wait.max.ms) from holding up anything
else. The broker's shared inter-broker channels (broker/interbroker/) plug in here;
`direct_connections` (a new connection each time one is asked for) is the default until
then. `HeldConnection` is how a user keeps the one it got: asked again only once it is
closed or the node moved.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from odradek.client.conn import Connection
from odradek.cluster.metadata import BrokerInfo

ConnectionProvider = Callable[[BrokerInfo, str], Awaitable[Connection]]


def direct_connections(node_id: int) -> ConnectionProvider:
    """Open a new connection each time: this broker (`node_id`) names itself and the purpose
    in its client id."""

    async def connect(node: BrokerInfo, purpose: str) -> Connection:
        conn = Connection(node.host, node.port, node_id=node.node_id, client_id=f"broker-{node_id}-{purpose}")
        return await conn.connect()

    return connect


class HeldConnection:
    """One purpose's connection to one node at a time."""

    def __init__(self, provider: ConnectionProvider, purpose: str) -> None:
        self.provider = provider
        self.purpose = purpose
        self._conn: Connection | None = None
        self._node: BrokerInfo | None = None

    async def get(self, node: BrokerInfo) -> Connection:
        conn = self._conn
        if conn is None or not conn.connected or self._node != node:
            self.drop()
            conn = self._conn = await self.provider(node, self.purpose)
            self._node = node
        return conn

    def drop(self) -> None:
        """Forget (and close) the connection: after an error, a move, or at the end."""
        conn, self._conn, self._node = self._conn, None, None
        if conn is not None:
            conn.close()
