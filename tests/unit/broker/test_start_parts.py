"""The parts `Broker.start` builds from the settings: the log manager's config and the internal
topics' specs (no broker, no sockets)."""

from __future__ import annotations

import dataclasses

from odradek.broker.config import BrokerConfig
from odradek.broker.internal_topics import offsets_topic, transaction_state_topic
from odradek.storage import LogManager
from odradek.storage.config import LogConfig, LogManagerConfig

OVERRIDES = {
    "log.retention.check.interval.ms": "1111",
    "log.flush.offset.checkpoint.interval.ms": "2222",
    "log.cleaner.enable": "false",
    "log.cleaner.backoff.ms": "3333",
    "log.cleaner.dedupe.buffer.size": "4444",
    "log.cleaner.io.buffer.load.factor": "0.5",
    "producer.id.expiration.ms": "5555",
}


def test_log_manager_takes_every_setting_of_its_config(tmp_path):
    cfg = LogManagerConfig.from_broker(BrokerConfig(OVERRIDES))
    assert cfg == LogManagerConfig(1111, 2222, False, 3333, 4444, 0.5, 5555)
    lm = LogManager([str(tmp_path)], LogConfig(), config=cfg)
    assert {f.name: getattr(lm, f.name) for f in dataclasses.fields(cfg)} == dataclasses.asdict(cfg)
    lm.reconfigure(dataclasses.replace(cfg, cleaner_backoff_ms=7))  # a dynamic change
    assert lm.cleaner_backoff_ms == 7 and lm.producer_id_expiration_ms == 5555


def test_defaults_match_the_broker_settings_defaults():
    assert LogManagerConfig.from_broker(BrokerConfig()) == LogManagerConfig()


def test_internal_topics_take_kafkas_settings():
    config = BrokerConfig({"offsets.topic.num.partitions": "7", "offsets.topic.segment.bytes": "12345"})
    offsets = offsets_topic(config)
    assert (offsets.name, offsets.partitions, offsets.replication_factor) == ("__consumer_offsets", 7, 3)
    assert offsets.configs == {"cleanup.policy": "compact", "segment.bytes": "12345", "compression.type": "producer"}
    one = transaction_state_topic(BrokerConfig(), live_brokers=1)
    assert (one.name, one.partitions, one.replication_factor) == ("__transaction_state", 50, 1)
    assert one.configs["min.insync.replicas"] == "1"  # min.isr 2, capped at the replication factor
    three = transaction_state_topic(BrokerConfig(), live_brokers=5)
    assert three.replication_factor == 3 and three.configs["min.insync.replicas"] == "2"
    assert three.configs["unclean.leader.election.enable"] == "false"
