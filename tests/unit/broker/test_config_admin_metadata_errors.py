"""AlterConfigs and IncrementalAlterConfigs (`ConfigAdmin.apply`) answer a metadata write that
failed with the resource's error code, as Kafka's ZkAdminManager answers each resource apart
(a ZooKeeper error: UNKNOWN_SERVER_ERROR); the exception used to escape the handler and the
broker closed the client's connection (simulator seed 5964, issue 25). The ZooKeeper store is the
real one, over a client whose every call fails (unit tier: no sockets)."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import SessionExpiredError
from support.failing_zk import store_over

from odradek.broker.config import BrokerConfig
from odradek.broker.config_admin import RESOURCE_BROKER, RESOURCE_TOPIC, ConfigAdmin
from odradek.broker.topic_admin import TopicAdmin
from odradek.broker.topic_configs import TopicConfigs
from odradek.protocol.errors import ErrorCode

CHANGES = {RESOURCE_TOPIC: {"retention.ms": "1000"}, RESOURCE_BROKER: {"min.insync.replicas": "2"}}


def config_admin() -> ConfigAdmin:
    store = store_over(SessionExpiredError)
    config = BrokerConfig({"node.id": "1"})
    topic_configs = TopicConfigs(config)
    return ConfigAdmin(1, config, topic_configs, store, TopicAdmin(store, topic_configs, config))


@pytest.mark.parametrize("resource_type, name", [(RESOURCE_TOPIC, "t"), (RESOURCE_BROKER, "1")])
def test_a_write_whose_zookeeper_session_expired_is_unknown_server_error(resource_type, name):
    admin = config_admin()
    code, message = asyncio.run(admin.apply(resource_type, name, CHANGES[resource_type], False))
    assert code == ErrorCode.unknown_server_error
    assert message is not None and "SessionExpiredError" in message
    # validate_only writes nothing, so nothing fails
    assert asyncio.run(admin.apply(resource_type, name, CHANGES[resource_type], True)) == (0, None)


def test_a_topic_deleted_before_the_write_is_unknown_topic_or_partition():
    admin = config_admin()
    code, _message = asyncio.run(admin.apply(RESOURCE_TOPIC, "gone", CHANGES[RESOURCE_TOPIC], False))
    assert code == ErrorCode.unknown_topic_or_partition
