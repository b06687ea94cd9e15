"""The client asks brokers of its current metadata only (Java's NetworkClient.leastLoadedNode),
and asks for new metadata before it asks again for a coordinator that was not available (Java's
AbstractCoordinator.ensureCoordinatorReady). Before, a connection still open to a broker the
metadata no longer listed (cut from ZooKeeper, fenced) was picked when it was the least loaded,
and every FindCoordinator retry went back to it: a transactional commit in
tests/cluster/test_coord_fence.py was answered "does not act as coordinator now" by the cut
broker until its timeout."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from odradek.client.cluster import BrokerInfo, Cluster

CONFIG = {
    "bootstrap.servers": ["127.0.0.1:1"],
    "client.id": "t",
    "request.timeout.ms": 1000,
    "retry.backoff.ms": 1,
    "retry.backoff.max.ms": 2,
    "metadata.max.age.ms": 300000,
}


class FakeConnection:
    def __init__(self, node_id: int, in_flight: int, answers: list | None = None) -> None:
        self.node_id, self.in_flight, self.connected = node_id, in_flight, True
        self.answers = answers or []
        self.asked = 0

    async def request(self, api_key: int, fields: dict) -> object:
        self.asked += 1
        return self.answers.pop(0)


def _cluster(conns: dict[int, FakeConnection], brokers: tuple[int, ...]) -> Cluster:
    c = Cluster(CONFIG)
    c.metadata.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers}
    c._conns = conns  # type: ignore[assignment]
    return c


def test_a_broker_the_metadata_no_longer_lists_is_not_asked():
    async def main():
        listed, gone = FakeConnection(1, in_flight=3), FakeConnection(9, in_flight=0)
        c = _cluster({1: listed, 9: gone}, brokers=(1, 2))
        assert await c.any_connection() is listed
        c.metadata.brokers = {}  # before any metadata (bootstrap): any open connection
        assert await c.any_connection() is gone

    asyncio.run(main())


def test_find_coordinator_asks_for_new_metadata_after_coordinator_not_available():
    async def main():
        answers = [
            SimpleNamespace(error_code=15, error_message="does not act as coordinator now"),
            SimpleNamespace(error_code=0, node_id=2, host="127.0.0.1", port=9002),
        ]
        conn = FakeConnection(1, 0, answers)
        c = _cluster({1: conn}, brokers=(1, 2))
        updates = []
        c.request_update = lambda: updates.append(1)  # type: ignore[method-assign]
        assert await c.find_coordinator("g") == 2
        assert conn.asked == 2 and updates == [1]

    asyncio.run(main())
