"""ACL storage (cluster/acls.py, cluster/zk_acls.py) without ZooKeeper: Kafka's znode JSON, the
change notifications' two formats, the ZooKeeper paths, the single node's file across a
restart, and a ZooKeeper failure under a write (an error code for CreateAcls, not an exception)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from support.failing_zk import FailingClient

from odradek.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.broker.security.acl_store import AclManager
from odradek.broker.security.authorizer import Authorizer
from odradek.cluster.acls import FILE_NAME, LocalAclStore, decode_entries, encode_entries
from odradek.cluster.zk_acls import (
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    ZooKeeperAclStore,
    decode_change,
    encode_change,
    resource_path,
)
from odradek.protocol.errors import ErrorCode

ENTRY = ("User:alice", "Allow", "Read", "*")


def write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def test_znode_json_is_kafkas():
    data = encode_entries(frozenset({ENTRY}))
    assert json.loads(data) == {
        "version": 1,
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}],
    }
    assert decode_entries(data) == {ENTRY}
    # as Kafka's AclAuthorizer writes it (spaces, key order)
    kafka = (
        b'{"version": 1, "acls": [ { "host":"*", "permissionType": "Deny",'
        b'"operation": "Write","principal": "User:bob"}]}'
    )
    assert decode_entries(kafka) == {("User:bob", "Deny", "Write", "*")}


def test_paths_and_change_notifications():
    assert resource_path(("LITERAL", "Topic", "orders")) == "/kafka-acl/Topic/orders"
    assert resource_path(("PREFIXED", "TransactionalId", "app-")) == "/kafka-acl-extended/prefixed/TransactionalId/app-"
    root, data = encode_change(("LITERAL", "TransactionalId", "tx:1"))
    assert (root, data) == (LITERAL_CHANGES, b"TRANSACTIONAL_ID:tx:1")
    assert decode_change(root, data) == ("LITERAL", "TransactionalId", "tx:1")
    root, data = encode_change(("PREFIXED", "Group", "g-"))
    assert root == EXTENDED_CHANGES
    assert json.loads(data) == {"version": 1, "resourceType": "GROUP", "name": "g-", "patternType": "PREFIXED"}
    assert decode_change(root, data) == ("PREFIXED", "Group", "g-")
    assert decode_change(LITERAL_CHANGES, b"Topic:orders") == ("LITERAL", "Topic", "orders")  # case-insensitive
    assert decode_change(EXTENDED_CHANGES, b"not json") is None


def test_the_local_store_keeps_acls_across_a_restart(tmp_path):
    async def main():
        store = LocalAclStore(str(tmp_path), write_atomic)
        seen = []
        store.on_change(lambda: seen.append(dict(store.view())))
        await store.start()
        topic = ("LITERAL", "Topic", "orders")
        await store.update(topic, frozenset({ENTRY}), frozenset())
        await store.update(topic, frozenset({ENTRY}), frozenset())  # no change: no callback
        await store.update(("PREFIXED", "Group", "g-"), frozenset({ENTRY}), frozenset())
        assert len(seen) == 3  # start, and two changes
        again = LocalAclStore(str(tmp_path), write_atomic)
        assert again.view() == {topic: {ENTRY}, ("PREFIXED", "Group", "g-"): {ENTRY}}
        await again.update(topic, frozenset(), frozenset({ENTRY}))
        assert LocalAclStore(str(tmp_path), write_atomic).view() == {("PREFIXED", "Group", "g-"): {ENTRY}}
        assert os.path.exists(tmp_path / FILE_NAME)

    asyncio.run(main())


@pytest.mark.parametrize("error", [SessionExpiredError, ConnectionLoss])
def test_a_zookeeper_failure_under_an_acl_write_is_an_error_answer_not_an_exception(error):
    async def main():
        manager = AclManager(Authorizer(), ZooKeeperAclStore(FailingClient(error)))  # type: ignore[arg-type]
        binding = AclBinding(
            ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL),
            AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW),
        )
        code, message = await manager.create([binding]) or (0, "")
        assert code == ErrorCode.unknown_server_error and error.__name__ in message

    asyncio.run(main())
