"""The ZooKeeper store's admin writes when ZooKeeper's session or connection fails under them
(simulator seed 5964, issue 25): `MetadataUnavailable`, which the config handlers answer with an
error code (tests/unit/broker/test_config_admin_metadata_errors.py), where kazoo's own exception
used to escape the handler and close the client's connection. A client whose every call fails
stands in for ZooKeeper (unit tier: no sockets).
"""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from support.failing_zk import store_over

from odradek.cluster.store import MetadataUnavailable, UnknownTopicError


@pytest.mark.parametrize("error", [SessionExpiredError, ConnectionLoss])
def test_every_admin_write_raises_metadata_unavailable(error):
    store = store_over(error)
    writes = {
        "create_topic": lambda: store.create_topic("u", [[1]], {}),
        "delete_topic": lambda: store.delete_topic("t", 1.0),
        "create_partitions": lambda: store.create_partitions("t", [[1]]),
        "set_topic_configs": lambda: store.set_topic_configs("t", {"retention.ms": "1000"}),
        "set_broker_configs": lambda: store.set_broker_configs("2", {"min.insync.replicas": "2"}),
        "set_user_configs": lambda: store.set_user_configs("alice", {"SCRAM-SHA-256": "salt=..."}),
        "next_producer_id_block": lambda: store.next_producer_id_block(1000),
    }
    for name, write in writes.items():
        with pytest.raises(MetadataUnavailable, match=error.__name__):
            asyncio.run(write())
        assert store.zk.calls, name  # type: ignore[attr-defined]
        store.zk.calls.clear()  # type: ignore[attr-defined]


def test_an_unknown_topic_is_still_unknown():
    store = store_over(SessionExpiredError)
    with pytest.raises(UnknownTopicError):
        asyncio.run(store.set_topic_configs("nope", {}))
    assert store.zk.calls == []  # type: ignore[attr-defined]
