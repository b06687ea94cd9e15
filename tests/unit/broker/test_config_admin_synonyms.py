"""DescribeConfigs' synonyms of broker settings (`ConfigAdmin.broker_entries` / `default_entries`)
as Kafka's ConfigHelper lists them (compared with Kafka 3.9 and 4.x in
tests/reference/test_diff_describe_broker_configs.py): the time settings' synonyms
(log.retention.ms, .minutes, .hours) by layer, and the cluster-wide defaults (broker "") with
their cluster-wide layer only."""

from __future__ import annotations

from support.failing_zk import store_over

from odradek.broker.config import BrokerConfig
from odradek.broker.config_admin import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    ConfigAdmin,
)
from odradek.broker.topic_admin import TopicAdmin
from odradek.broker.topic_configs import TopicConfigs


def config_admin(static: dict[str, str], default: dict[str, str], own: dict[str, str]) -> ConfigAdmin:
    store = store_over(RuntimeError)  # never called: describing reads the config only
    config = BrokerConfig({"node.id": "1", **static})
    config.apply_dynamic(default, own)
    topic_configs = TopicConfigs(config)
    return ConfigAdmin(1, config, topic_configs, store, TopicAdmin(store, topic_configs, config))


def entry(entries, name):
    return next((e.value, e.source, e.synonyms) for e in entries if e.name == name)


def test_a_dynamic_default_log_retention_ms_lists_the_default_hours_under_it():
    admin = config_admin({}, {"log.retention.ms": "3600000", "message.max.bytes": "2000000"}, {})
    broker = admin.broker_entries()
    assert entry(broker, "log.retention.ms") == (
        "3600000",
        SOURCE_DYNAMIC_DEFAULT_BROKER,
        (
            ("log.retention.ms", "3600000", SOURCE_DYNAMIC_DEFAULT_BROKER),
            ("log.retention.hours", "168", SOURCE_DEFAULT),
        ),
    )
    # log.retention.hours lists nothing of log.retention.ms (what precedes its own layer is dropped)
    assert entry(broker, "log.retention.hours") == (
        "168",
        SOURCE_DEFAULT,
        (("log.retention.hours", "168", SOURCE_DEFAULT),),
    )
    assert entry(broker, "message.max.bytes")[2] == (
        ("message.max.bytes", "2000000", SOURCE_DYNAMIC_DEFAULT_BROKER),
        ("message.max.bytes", "1048588", SOURCE_DEFAULT),
    )


def test_synonyms_are_ordered_by_layer_then_by_name():
    admin = config_admin(
        {"log.retention.hours": "24", "log.retention.minutes": "90"}, {}, {"log.retention.ms": "60000"}
    )
    assert entry(admin.broker_entries(), "log.retention.ms")[2] == (
        ("log.retention.ms", "60000", SOURCE_DYNAMIC_BROKER),
        ("log.retention.minutes", "90", SOURCE_STATIC_BROKER),
        ("log.retention.hours", "24", SOURCE_STATIC_BROKER),
        ("log.retention.hours", "168", SOURCE_DEFAULT),
    )


def test_the_cluster_wide_defaults_list_only_their_cluster_wide_layer():
    admin = config_admin(
        {"message.max.bytes": "3000000"},
        {"log.retention.ms": "3600000", "message.max.bytes": "2000000"},
        {"message.max.bytes": "4000000"},
    )
    defaults = admin.default_entries()
    assert [e.name for e in defaults] == ["log.retention.ms", "message.max.bytes"]
    assert entry(defaults, "message.max.bytes") == (
        "2000000",
        SOURCE_DYNAMIC_DEFAULT_BROKER,
        (("message.max.bytes", "2000000", SOURCE_DYNAMIC_DEFAULT_BROKER),),
    )
    assert entry(defaults, "log.retention.ms")[2] == (("log.retention.ms", "3600000", SOURCE_DYNAMIC_DEFAULT_BROKER),)
