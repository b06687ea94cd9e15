"""A user or client id literally named `<default>` is not the default entity (issue 27).

Kafka names the default user's and client id's znodes `<default>` and sanitizes every real name,
so a user called `<default>` lives at /config/users/%3Cdefault%3E and its quotas are its own.
odradek keyed both by the string `<default>` in its snapshot maps, so that user's quotas became
everyone's default (or the default's became that user's). Now the default entity is None in the
maps, in ZooKeeper's layout, in the ZooKeeper cache (support.fake_zk: no ZooKeeper) and in the
single node's metadata file, which still reads the files written before.
"""

from __future__ import annotations

import asyncio
import json

from support.fake_zk import FakeZk

from odradek.broker.quotas import entities as E
from odradek.broker.quotas.entities import QuotaEntity as QE
from odradek.broker.quotas.manager import ClientQuotas
from odradek.cluster import zk_layout as L
from odradek.cluster.local import FILE_NAME, LocalMetadataStore
from odradek.cluster.zk_cache import ZkCache
from odradek.storage import OSFileSystem

NAMED = "<default>"


def _quota(rate: int) -> bytes:
    return json.dumps({"version": 1, "config": {"producer_byte_rate": str(rate)}}).encode()


def test_zookeeper_paths_keep_the_default_and_a_user_of_that_name_apart():
    assert L.user_config_path(None) == "/config/users/<default>"
    assert L.user_config_path(NAMED) == "/config/users/%3Cdefault%3E"
    assert L.client_config_path(None) == "/config/clients/<default>"
    assert L.user_client_config_path(NAMED, None) == "/config/users/%3Cdefault%3E/clients/<default>"
    assert L.entity_of_znode("<default>") is None
    assert L.entity_of_znode("%3Cdefault%3E") == NAMED


def test_the_cache_reads_them_as_two_entities():
    zk = FakeZk()
    cache = ZkCache(zk, 1, "PLAINTEXT", lambda: None)
    cache.start()
    zk.children(L.CONFIG_USERS, ["<default>", "%3Cdefault%3E"])
    zk.data(f"{L.CONFIG_USERS}/<default>", _quota(1000))
    zk.data(f"{L.CONFIG_USERS}/%3Cdefault%3E", _quota(7))
    zk.children(L.CONFIG_CLIENTS, ["<default>", "%3Cdefault%3E"])
    zk.data(f"{L.CONFIG_CLIENTS}/<default>", _quota(2000))
    zk.data(f"{L.CONFIG_CLIENTS}/%3Cdefault%3E", _quota(8))
    zk.children(f"{L.CONFIG_USERS}/<default>", ["clients"])
    zk.children(f"{L.CONFIG_USERS}/<default>/clients", ["%3Cdefault%3E"])
    zk.data(f"{L.CONFIG_USERS}/<default>/clients/%3Cdefault%3E", _quota(9))
    view = cache.view()
    assert view.user_configs == {None: {"producer_byte_rate": "1000"}, NAMED: {"producer_byte_rate": "7"}}
    assert view.client_configs == {None: {"producer_byte_rate": "2000"}, NAMED: {"producer_byte_rate": "8"}}
    assert view.user_client_configs == {(None, NAMED): {"producer_byte_rate": "9"}}

    quotas = E.all_quotas(view.user_configs, view.client_configs, view.user_client_configs)
    assert quotas[QE(user=None)] == {"producer_byte_rate": 1000.0}
    assert quotas[QE(user=NAMED)] == {"producer_byte_rate": 7.0}
    assert quotas[QE(None, NAMED)] == {"producer_byte_rate": 9.0}
    q = ClientQuotas(11, 1, 11, 1)
    q.update(view.user_configs, view.client_configs, view.user_client_configs)
    table = q.produce.table
    assert table.limit(table.metric_tags("bob", "app")) == 1000.0  # the default user's
    assert table.limit(table.metric_tags(NAMED, "app")) == 7.0  # the user named <default>'s own


def test_the_single_node_file_keeps_them_apart_and_reads_the_old_format(tmp_path):
    def store():
        return LocalMetadataStore(str(tmp_path), 1, "cid", OSFileSystem().write_file_atomic)

    async def main():
        s = store()
        await s.set_user_configs(None, {"producer_byte_rate": "1000"})
        await s.set_user_configs(NAMED, {"producer_byte_rate": "7"})
        await s.set_client_configs(NAMED, {"producer_byte_rate": "8"})
        await s.set_user_client_configs(NAMED, None, {"producer_byte_rate": "9"})

    asyncio.run(main())
    again = store().snapshot
    assert again.user_configs == {None: {"producer_byte_rate": "1000"}, NAMED: {"producer_byte_rate": "7"}}
    assert again.client_configs == {NAMED: {"producer_byte_rate": "8"}}
    assert again.user_client_configs == {(NAMED, None): {"producer_byte_rate": "9"}}

    path = tmp_path / FILE_NAME
    doc = json.loads(path.read_text())
    doc.update(
        version=1,
        user_configs={"<default>": {"producer_byte_rate": "1000"}, "alice": {"producer_byte_rate": "5"}},
        client_configs={"<default>": {"producer_byte_rate": "2000"}},
        user_client_configs=[["alice", "<default>", {"producer_byte_rate": "3"}]],
    )
    path.write_text(json.dumps(doc))
    old = store().snapshot
    assert old.user_configs == {None: {"producer_byte_rate": "1000"}, "alice": {"producer_byte_rate": "5"}}
    assert old.client_configs == {None: {"producer_byte_rate": "2000"}}
    assert old.user_client_configs == {("alice", None): {"producer_byte_rate": "3"}}
