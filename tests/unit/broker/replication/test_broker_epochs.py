"""A broker's epoch in the metadata (KIP-903 in ZooKeeper mode: the czxid of its registration)."""

from __future__ import annotations

from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zk_cache import CacheView
from odradek.cluster.zookeeper import build_snapshot


def test_the_snapshot_carries_each_brokers_registration_session_as_its_epoch():
    view = CacheView(
        cluster_id="c",
        brokers={1: BrokerInfo(1, "h1", 9092), 2: BrokerInfo(2, "h2", 9092, endpoints=(("EXTERNAL", "x2", 19092),))},
        broker_sessions={1: 0x100000007, 2: 0x100000009},
    )
    snap = build_snapshot(view)
    assert [(b.node_id, b.epoch) for b in snap.brokers] == [(1, 0x100000007), (2, 0x100000009)]
    # a broker seen through another listener is the same registration, same epoch
    external = snap.broker(2).at("EXTERNAL")
    assert external is not None and (external.host, external.epoch) == ("x2", 0x100000009)


def test_a_registration_again_changes_the_snapshot():
    """A broker that lost its session and registered again (same endpoints, a new czxid) is a
    change: brokers see their new epoch (a follower sends it with every fetch)."""
    view = CacheView(cluster_id="c", brokers={3: BrokerInfo(3, "h", 1)})
    assert build_snapshot(view).broker(3).epoch == -1  # no session known
    before = build_snapshot(CacheView(cluster_id="c", brokers={3: BrokerInfo(3, "h", 1)}, broker_sessions={3: 7}))
    after = build_snapshot(CacheView(cluster_id="c", brokers={3: BrokerInfo(3, "h", 1)}, broker_sessions={3: 9}))
    assert before != after and after.broker(3).epoch == 9
