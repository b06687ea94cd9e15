"""Fixtures of the interop tier (a real broker process, real clients; tests/README.md).

Tests of odradek's own client run the same test against real peers:

``peer`` is parametrized over:
  * ``mock``    librdkafka's mock cluster (confluent-kafka), session scope;
  * ``tansu``   Tansu 0.6.0 with memory storage, session scope (skipped if not installed);
  * ``odradek`` odradek's own broker, one process for the session.
Each `Peer` says what it supports, so a test can skip with the reason.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from support.broker import BrokerProcess, BrokerStartError

# What each peer lacks (feature -> reason), observed with the versions we pin.
GAPS = {
    "mock": {
        "admin": "librdkafka's mock cluster does not implement CreateTopics/DeleteTopics/DescribeConfigs/"
        "CreatePartitions/ListGroups/DescribeGroups/DeleteRecords (absent from its ApiVersions)",
        "offsets_for_times": "librdkafka's mock answers ListOffsets by timestamp with -1",
    },
    "tansu": {
        "end_offsets": "Tansu 0.6.0 answers ListOffsets latest with the last batch's base offset, not the end offset",
        "offsets_for_times": "Tansu 0.6.0 answers ListOffsets by timestamp with offset 0 / timestamp -1",
        "create_partitions": "Tansu 0.6.0 does not implement CreatePartitions",
        "offset_out_of_range": "Tansu 0.6.0 answers a Fetch past the log end with no error and no records",
        "delete_records": "Tansu 0.6.0 closes the connection on DeleteRecords",
        "configs": "Tansu 0.6.0 returns no topic configs",
        "group_assignment": "Tansu 0.6.0's DescribeGroups returns empty member assignments",
    },
    "odradek": {},
}


@dataclass
class Peer:
    name: str
    bootstrap: str
    gaps: dict = field(default_factory=dict)

    def require(self, feature: str) -> None:
        reason = self.gaps.get(feature)
        if reason:
            pytest.skip(f"{self.name}: {reason}")

    def supports(self, feature: str) -> bool:
        return feature not in self.gaps

    def new_topic(self, partitions: int = 4, prefix: str = "t") -> str:
        """A fresh topic with `partitions` partitions (the mock auto-creates 4)."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        if self.name == "mock":
            if partitions != 4:
                pytest.skip("mock: topics are auto-created with 4 partitions")
            return name
        from odradek.client import Admin

        with Admin(bootstrap_servers=self.bootstrap) as a:
            a.create_topic(name, partitions, 1)
        return name


@pytest.fixture(scope="session")
def odradek_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("odradek-client"), {"num.partitions": 4})
    try:
        b.start(timeout=30)
    except BrokerStartError as e:
        pytest.skip(f"odradek broker does not start: {e}")
    yield b
    b.stop()


def _peer(request, name: str) -> Peer:
    fixture = {"mock": "mock_cluster", "tansu": "tansu", "odradek": "odradek_broker"}[name]
    return Peer(name, request.getfixturevalue(fixture).bootstrap, GAPS[name])


@pytest.fixture(params=["mock", "tansu", "odradek"])
def peer(request) -> Peer:
    return _peer(request, request.param)


@pytest.fixture
def peer_named(request):
    """peer_named("tansu") -> Peer, for tests that choose their peers themselves."""
    return lambda name: _peer(request, name)


# settings that keep group tests quick on every peer (Tansu holds JoinGroup for the
# whole rebalance timeout; the mock answers fetches only after max wait)
FAST_GROUP = {
    "session.timeout.ms": 6000,
    "max.poll.interval.ms": 6000,
    "heartbeat.interval.ms": 500,
    "fetch.max.wait.ms": 100,
}


@pytest.fixture
def fast_group() -> dict:
    return dict(FAST_GROUP)
