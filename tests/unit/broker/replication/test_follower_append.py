"""A follower appends what its leader accepted: framing and CRC only (Kafka's appendAsFollower).

Real storage in a temporary directory: a leader's `Partition` accepts batches under its
settings and clock, and a follower's `Partition` whose log has other settings (a lowered
max.message.bytes, timestamp bounds, a compacted topic) or whose clock is hours off copies
them as they are.
"""

from __future__ import annotations

import pytest
from support.batches import batch

from odradek.broker.partition import Isolation, Partition
from odradek.cluster.metadata import PartitionInfo
from odradek.protocol.records import CorruptRecordError
from odradek.storage import LogConfig, LogManager

NOW = 1_700_000_000_000
HOUR = 3_600_000


@pytest.fixture
def logs(tmp_path):
    managers = []

    def make(name: str) -> LogManager:
        m = LogManager([str(tmp_path / name)], LogConfig())
        m.load()
        managers.append(m)
        return m

    yield make
    for m in managers:
        m.shutdown()


def follower(logs, config: LogConfig) -> Partition:
    lg = logs("follower").create_log("t", 0, config)
    part = Partition("t", 0, lg, 2, lambda p, n: None)
    part.update(PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=4), NOW)
    return part


def leader_copy(logs, *batches: bytes) -> bytes:
    """What a leader (default settings) wrote for `batches`: offsets and its epoch assigned."""
    lg = logs("leader").create_log("t", 0, LogConfig())
    part = Partition("t", 0, lg, 1, lambda p, n: None)
    part.update(PartitionInfo(0, 1, (1,), (1,), leader_epoch=4), NOW)
    for b in batches:
        part.append_as_leader(b, NOW, 1)
    return part.log.read_bytes(0, 1 << 30, max_offset=part.log_end_offset)


def test_a_batch_over_the_followers_max_message_bytes_is_appended(logs):
    data = leader_copy(logs, batch(3, size=1500), batch(1))
    part = follower(logs, LogConfig(max_message_bytes=1000))
    part.append_as_follower(data, leader_hw=4, leader_log_start=0)
    assert part.log_end_offset == 4 and part.high_watermark == 4
    assert part.log.read_bytes(0, 1 << 30, max_offset=4) == data  # the leader's bytes, as they were


@pytest.mark.parametrize("skew_ms", [2 * HOUR, -2 * HOUR])
def test_timestamps_hours_off_the_followers_clock_are_appended(logs, skew_ms):
    """The leader accepted records stamped at its `NOW`; the follower's clock is two hours away and
    its log bounds timestamps to within a minute of it (either way)."""
    data = leader_copy(logs, batch(2, ts=NOW))
    config = LogConfig(message_timestamp_before_max_ms=60_000, message_timestamp_after_max_ms=60_000)
    part = follower(logs, config)
    part.log.clock = lambda: (NOW + skew_ms) / 1000
    part.append_as_follower(data, leader_hw=2, leader_log_start=0)
    assert part.log_end_offset == 2


def test_keyless_records_on_a_topic_now_compacted_are_appended(logs):
    data = leader_copy(logs, batch(2))  # no keys: written while the topic was cleanup.policy=delete
    part = follower(logs, LogConfig(cleanup_policy="compact"))
    part.append_as_follower(data, leader_hw=2, leader_log_start=0)
    assert part.log_end_offset == 2


def test_a_corrupt_replicated_batch_is_still_refused(logs):
    data = bytearray(leader_copy(logs, batch(2)))
    data[-1] ^= 0xFF  # a flipped bit in the last record: the CRC no longer matches
    part = follower(logs, LogConfig())
    with pytest.raises(CorruptRecordError):
        part.append_as_follower(bytes(data), leader_hw=2, leader_log_start=0)
    assert part.log_end_offset == 0 and part.read_limit(Isolation.LOG_END) == 0
