"""A deposed controller can change nothing: every controller write checks /controller_epoch.

Two controllers against a real ZooKeeper, in this process: A is elected, loses /controller
(as when its session expires), B is elected and increments the epoch; A's next write of a
partition state is refused as a whole and leaves ZooKeeper unchanged. A write naming an ISR
member that is not registered is refused too.
"""

from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient

from odradek.cli.zookeeper_server import ZooKeeperServer
from odradek.cluster import zk_layout as L
from odradek.cluster.controller import Controller
from odradek.cluster.controller_writes import Deposed, unregistered
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zk_client import cluster_id

pytestmark = pytest.mark.cluster


@pytest.fixture
def zk_server(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk", tick_ms=250).start()
    yield server
    server.stop()


def client(server: ZooKeeperServer) -> KazooClient:
    zk = KazooClient(hosts=server.connect)
    zk.start()
    return zk


def elect(c: Controller) -> bool:
    """The controller's election (a thread's work in a broker: `elect` runs blocking calls)."""
    won = c.writes.elect()
    if won is not None:
        c.writes.fence(*won)
    return won is not None


def test_a_deposed_controllers_writes_are_refused(zk_server):
    a_zk, b_zk = client(zk_server), client(zk_server)
    try:
        cluster_id(a_zk, "cid")
        for path in L.PERSISTENT_PATHS:
            a_zk.ensure_path(path)
        a_zk.create(L.topic_path("t"), L.encode_topic(L.TopicAssignment(uuid.uuid4(), {0: (1, 2)}, {}, {})))
        a, b = Controller(a_zk, None, 1), Controller(b_zk, None, 2)  # type: ignore[arg-type]
        assert elect(a) and a.epoch == 1
        assert not elect(b)  # /controller is taken
        st = L.PartitionState(1, 0, (1, 2), a.epoch)
        # every ISR member a write names must be registered (a previous run's registration
        # ended by its successor admits nothing: docs/cluster.md "A broker that restarted")
        a_zk.create(L.broker_path(1), L.encode_broker(BrokerInfo(1, "h1", 9092)), ephemeral=True)
        refused = a.writes.write_states([("t", 0, st)], [])
        assert [unregistered(op) for op in refused.values()] == [2]  # refused for broker 2's registration
        assert list(refused) == [("t", 0)] and a_zk.exists(L.partition_state_path("t", 0)) is None
        b_zk.create(L.broker_path(2), L.encode_broker(BrokerInfo(2, "h2", 9092)), ephemeral=True)
        assert a.writes.write_states([("t", 0, st)], []) == {}
        data, stat = a_zk.get(L.partition_state_path("t", 0))
        assert L.decode_partition_state("t", 0, data) == st

        a_zk.delete(L.CONTROLLER)  # A's session is gone, as far as ZooKeeper knows
        assert elect(b) and b.epoch == 2
        with pytest.raises(Deposed):
            a.writes.write_states([], [("t", 0, L.PartitionState(2, 1, (2,), a.epoch), stat.version)])
        assert a_zk.get(L.partition_state_path("t", 0))[0] == data  # nothing changed

        assert b.writes.write_states([], [("t", 0, L.PartitionState(2, 1, (2,), b.epoch), stat.version)]) == {}
        new = L.decode_partition_state("t", 0, a_zk.get(L.partition_state_path("t", 0))[0])
        assert (new.leader, new.leader_epoch, new.controller_epoch) == (2, 1, 2)
    finally:
        a_zk.stop()
        b_zk.stop()
