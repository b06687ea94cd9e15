"""The group coordinator's settings, read once from the broker's (Kafka's names)."""

from __future__ import annotations

from dataclasses import dataclass

from odradek.coordinator.runtime import Settings


@dataclass(frozen=True)
class GroupConfig:
    num_partitions: int = 50
    retention_check_interval_ms: int = 600000
    commit_timeout_ms: int = 5000
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2147483647
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000

    @classmethod
    def from_broker(cls, config: Settings) -> GroupConfig:
        return cls(
            num_partitions=config["offsets.topic.num.partitions"],
            retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            commit_timeout_ms=config["offsets.commit.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60000,
        )
