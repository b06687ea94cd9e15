"""A user's client-id quotas are watched again when the user's znode is deleted and made again.

Before: the cache remembered `/config/users/<u>/clients` as watched after kazoo had ended that
watch with the node, so `kafka-configs --entity-type users --entity-name u --entity-type clients`
on a re-created user was never seen by the broker. The client (support.fake_zk) records the watches
the cache sets and fires them as ZooKeeper would (unit tier: no ZooKeeper).
"""

from __future__ import annotations

from support.fake_zk import FakeZk

from odradek.cluster import zk_layout as L
from odradek.cluster.zk_cache import ZkCache


def test_a_recreated_users_client_quotas_are_watched_again():
    zk = FakeZk()
    cache = ZkCache(zk, 1, "PLAINTEXT", lambda: None)
    cache.start()
    user, clients = f"{L.CONFIG_USERS}/alice", f"{L.CONFIG_USERS}/alice/clients"
    quota = b'{"version":1,"config":{"producer_byte_rate":"1024"}}'

    zk.children(L.CONFIG_USERS, ["alice"])
    zk.children(user, ["clients"])
    assert len(zk.watches[f"children {clients}"]) == 1
    zk.children(clients, ["app"])
    zk.data(f"{clients}/app", quota)
    assert cache.view().user_client_configs == {("alice", "app"): {"producer_byte_rate": "1024"}}

    # deleted, children first (kazoo ends the watches of deleted nodes), then made again
    zk.data(f"{clients}/app", None)
    zk.data(user, None)
    zk.children(L.CONFIG_USERS, [])
    assert cache.view().user_client_configs == {}
    zk.children(L.CONFIG_USERS, ["alice"])
    zk.children(user, ["clients"])
    assert len(zk.watches[f"children {clients}"]) == 2, "the re-created clients node is not watched"
    zk.children(clients, ["app"])
    zk.data(f"{clients}/app", quota)
    assert cache.view().user_client_configs == {("alice", "app"): {"producer_byte_rate": "1024"}}
