"""Partition: role, leader epoch fencing, the ISR, the high watermark, follower state."""

from __future__ import annotations

import pytest
from support.batches import batch

from odradek.broker.partition import Isolation, Partition, PartitionError, Role
from odradek.cluster.metadata import PartitionInfo
from odradek.protocol.errors import ErrorCode
from odradek.storage import LogConfig

NOW = 1_700_000_000_000


class Advances:
    """The replica manager's side of `on_advance`: every (high watermark, visible bytes) reported."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def __call__(self, part: Partition, visible_bytes: int) -> None:
        self.seen.append((part.high_watermark, visible_bytes))


def make(log_manager, info: PartitionInfo, node_id: int = 1) -> tuple[Partition, Advances]:
    advances = Advances()
    lg = log_manager.create_log("t", info.partition, LogConfig())
    part = Partition("t", info.partition, lg, node_id, advances)
    part.update(info, NOW)
    return part, advances


def test_a_sole_in_sync_leader_commits_what_it_appends(log_manager):
    part, advances = make(log_manager, PartitionInfo(0, 1, (1,), (1,), leader_epoch=3))
    assert part.role is Role.LEADER and part.high_watermark == 0
    one, two = batch(2), batch(3)
    info = part.append_as_leader(one, NOW, required_acks=-1)
    assert (info.first_offset, info.last_offset) == (0, 1)
    part.append_as_leader(two, NOW, required_acks=1)
    assert part.high_watermark == part.log_end_offset == 5
    assert advances.seen == [(2, len(one)), (5, len(two))]
    assert part.log.read(0, 1 << 20).size == len(one) + len(two)
    # the leader epoch is stamped into what is written
    assert part.log.end_offset_for_epoch(3) == (3, 5)


def test_with_a_follower_in_the_isr_the_high_watermark_waits_for_its_fetches(log_manager):
    part, advances = make(log_manager, PartitionInfo(0, 1, (1, 2), (1, 2)))
    a, b = batch(2), batch(2)
    part.append_as_leader(a, NOW, -1)
    part.append_as_leader(b, NOW, -1)
    assert (part.log_end_offset, part.high_watermark) == (4, 0) and advances.seen == []
    assert part.acks_satisfied(2) is None
    assert part.record_follower_fetch(2, 2, NOW)  # the follower has offsets 0-1
    assert part.high_watermark == 2 and advances.seen == [(2, len(a))]
    assert part.acks_satisfied(2) == ErrorCode.none and part.acks_satisfied(4) is None
    assert part.record_follower_fetch(2, 4, NOW + 5)
    assert part.high_watermark == 4 and advances.seen[-1] == (4, len(b))
    st = part.followers[2]
    assert (st.log_end_offset, st.last_fetch_ms, st.last_caught_up_ms) == (4, NOW + 5, NOW + 5)
    assert not part.record_follower_fetch(3, 4, NOW)  # not one of its replicas


def test_a_replica_outside_the_isr_does_not_hold_the_high_watermark_back(log_manager):
    part, _ = make(log_manager, PartitionInfo(0, 1, (1, 2), (1,)))
    part.append_as_leader(batch(1), NOW, -1)
    assert part.high_watermark == 1
    part.record_follower_fetch(2, 0, NOW)  # a lagging fetch changes nothing
    assert part.high_watermark == 1


def test_min_insync_replicas_refuses_acks_all_before_writing(log_manager):
    part, _ = make(log_manager, PartitionInfo(0, 1, (1, 2), (1,)))
    part.min_insync_replicas = 2
    with pytest.raises(PartitionError) as e:
        part.append_as_leader(batch(1), NOW, -1)
    assert e.value.code == ErrorCode.not_enough_replicas
    assert part.log_end_offset == 0
    part.append_as_leader(batch(1), NOW, 1)  # acks=1 does not need the ISR
    assert part.log_end_offset == 1
    # the ISR shrank after an acks=all append was written: it can never be satisfied
    assert part.acks_satisfied(1) == ErrorCode.not_enough_replicas_after_append


@pytest.mark.parametrize(
    "current,code",
    [(-1, None), (5, None), (4, ErrorCode.fenced_leader_epoch), (6, ErrorCode.unknown_leader_epoch)],
)
def test_leader_epoch_fencing(log_manager, current, code):
    part, _ = make(log_manager, PartitionInfo(0, 1, (1,), (1,), leader_epoch=5))
    if code is None:
        part.check_leader_epoch(current)
    else:
        with pytest.raises(PartitionError) as e:
            part.check_leader_epoch(current)
        assert e.value.code == code


def test_becoming_follower_refuses_appends_and_fails_waiting_acks(log_manager):
    part, _ = make(log_manager, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=1))
    part.append_as_leader(batch(1), NOW, -1)
    assert part.update(PartitionInfo(0, 2, (1, 2), (1, 2), leader_epoch=2), NOW)
    assert part.role is Role.FOLLOWER and part.leader_id == 2 and not part.followers
    assert part.acks_satisfied(1) == ErrorCode.not_leader_or_follower
    with pytest.raises(PartitionError) as e:
        part.append_as_leader(batch(1), NOW, 1)
    assert e.value.code == ErrorCode.not_leader_or_follower
    # the same state again is no change; leading again at a new epoch forgets the followers' positions
    assert not part.update(PartitionInfo(0, 2, (1, 2), (1, 2), leader_epoch=2), NOW)
    assert part.update(PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=3), NOW)
    assert part.followers[2].log_end_offset == -1


def test_an_isr_change_at_the_same_epoch_keeps_follower_positions(log_manager):
    part, _ = make(log_manager, PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3), leader_epoch=1))
    part.append_as_leader(batch(3), NOW, -1)
    part.record_follower_fetch(2, 3, NOW)
    assert part.high_watermark == 0  # replica 3 has not fetched
    assert not part.update(PartitionInfo(0, 1, (1, 2, 3), (1, 2), leader_epoch=1, partition_epoch=1), NOW)
    assert part.high_watermark == 3 and part.followers[2].log_end_offset == 3


def test_read_limits_and_offsets_for_timestamps(log_manager):
    part, _ = make(log_manager, PartitionInfo(0, 1, (1, 2), (1, 2)))
    part.append_as_leader(batch(2, ts=1000), NOW, -1)
    part.record_follower_fetch(2, 2, NOW)
    part.append_as_leader(batch(2, ts=2000), NOW, -1)
    assert part.read_limit(Isolation.LOG_END) == 4
    assert part.read_limit(Isolation.HIGH_WATERMARK) == part.read_limit(Isolation.TXN_COMMITTED) == 2
    assert part.offset_for_timestamp(-1, Isolation.HIGH_WATERMARK) == (-1, 2)
    assert part.offset_for_timestamp(-2, Isolation.HIGH_WATERMARK) == (-1, 0)
    assert part.offset_for_timestamp(1001, Isolation.HIGH_WATERMARK) == (1001, 1)
    # a record not yet committed is not found by timestamp
    assert part.offset_for_timestamp(2000, Isolation.HIGH_WATERMARK) == (-1, -1)
    with pytest.raises(PartitionError):
        part.offset_for_timestamp(-7, Isolation.HIGH_WATERMARK)


def test_delete_records_stops_at_the_high_watermark(log_manager):
    part, _ = make(log_manager, PartitionInfo(0, 1, (1, 2), (1, 2)))
    part.append_as_leader(batch(4), NOW, -1)
    part.record_follower_fetch(2, 2, NOW)
    with pytest.raises(PartitionError) as e:
        part.delete_records(3)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert part.delete_records(-1) == 2 == part.log_start_offset


def test_an_isr_proposal_answered_after_newer_metadata_does_not_block_the_next(log_manager):
    """The controller accepts the leader's proposal (partition epoch 1) and at once writes a newer
    state (epoch 2) that the metadata brings before the answer: the metadata supersedes the
    proposal, the stale answer changes nothing, and the follower can be proposed again."""
    sent = []
    lg = log_manager.create_log("t", 0, LogConfig())
    registered = {1: 10, 2: 20}  # broker epochs in the metadata
    part = Partition("t", 0, lg, 1, lambda p, n: None, alter_isr=Sent(sent), broker_epoch=registered.__getitem__)
    part.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=1, partition_epoch=0), NOW)
    part.record_follower_fetch(2, 0, NOW)
    assert [p.isr for p in sent] == [(1, 2)] and part.pending_isr == (1, 2)
    part.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=1, partition_epoch=2), NOW)
    assert part.pending is None
    assert not part.on_alter_partition_response(sent[0], 0, (1, 2), 1, 1)  # the answer, older than the metadata
    assert (part.isr, part.partition_epoch, part.pending) == ((1,), 2, None)
    assert part.maybe_expand_isr(2) and part.pending_isr == (1, 2)


class Sent:
    """The AlterPartition channel's side: the proposals submitted."""

    def __init__(self, into: list) -> None:
        self.into = into

    def submit(self, partition: Partition, proposal) -> None:
        self.into.append(proposal)
