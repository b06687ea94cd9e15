"""Effective per-topic settings: a topic's overrides over the broker's topic-level defaults.

Storage owns the settings of a log (`LogConfig`: segments, retention, cleanup, message
limits); replication owns the rest (`min.insync.replicas`). Both are resolved here, from
one place, so a topic's overrides are validated once and a change of a dynamic broker
default reaches every topic that does not override it (`refresh`). DescribeConfigs and the
config APIs show and change them through config_admin.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from odradek.broker.config import BrokerConfig
from odradek.storage import LogConfig

MIN_INSYNC_REPLICAS = "min.insync.replicas"


class TopicConfigs:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.default_log_config = LogConfig()
        self._defaults: dict[str, str] = {}
        self.refresh()

    def refresh(self) -> None:
        """Take the broker's topic-level defaults again (after a dynamic broker setting changed)."""
        self._defaults = self.config.topic_defaults()
        self.default_log_config = LogConfig.from_props(self._defaults, LogConfig())

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """The LogConfig of a topic with these overrides; ValueError naming a bad value."""
        if not overrides:
            return self.default_log_config
        return LogConfig.from_props(dict(overrides), self.default_log_config)

    def min_insync_replicas(self, overrides: Mapping[str, str]) -> int:
        return int(overrides.get(MIN_INSYNC_REPLICAS) or self._defaults[MIN_INSYNC_REPLICAS])
