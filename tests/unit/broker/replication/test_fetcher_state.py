"""The replica fetcher's decisions (fetcher_state.py), sans-IO, over real partitions.

A leader's and a follower's `Partition` over real storage in temporary directories; `exchange`
plays the endpoint and the loop: it sends what `build_fetch` asks to the leader's
`fetch_records` (and ListOffsets to its `offset_for_timestamp`), hands each answer to the
state and applies what it decides, with the time passed in.
"""

from __future__ import annotations

import os

import pytest
from support.batches import batch

from odradek.broker.partition import Isolation, Partition, PartitionError
from odradek.broker.replication.fetcher_state import (
    Append,
    Backoff,
    FetcherConfig,
    FetcherState,
    ListLeaderOffsets,
    Park,
    PartitionData,
    Skip,
    TruncateFullyAndStartAt,
    TruncateTo,
    complete_batches,
)
from odradek.cluster.metadata import PartitionInfo
from odradek.protocol.errors import ErrorCode
from odradek.storage import LogConfig, LogManager

NOW = 1_000_000
CONFIG = FetcherConfig(backoff_ms=500)


@pytest.fixture
def logs(tmp_path):
    made = []

    def make(name: str) -> LogManager:
        m = LogManager([str(tmp_path / name)], LogConfig())
        m.load()
        made.append(m)
        return m

    yield make
    for m in made:
        m.shutdown()


def partition(manager: LogManager, node: int, leader: int, epoch: int, p: int = 0, config=None) -> Partition:
    lg = manager.create_log("t", p, config or LogConfig())
    part = Partition("t", p, lg, node, lambda *a: None)
    part.update(PartitionInfo(p, leader, (1, 2), (1, 2), leader_epoch=epoch), NOW)
    return part


def records_of(regions) -> bytes:
    return b"".join(r if isinstance(r, bytes) else os.pread(r.fd, r.length, r.position) for r in regions or ())


def answer(leader: Partition, req) -> PartitionData:
    """The leader's answer to one partition of a Fetch, as its endpoint reads it."""
    try:
        r = leader.fetch_records(
            req.fetch_offset,
            req.max_bytes,
            min_one=True,
            replica_id=2,
            current_leader_epoch=req.leader_epoch,
            last_fetched_epoch=req.last_fetched_epoch,
            now_ms=NOW,
        )
    except PartitionError as e:
        return PartitionData(e.code)
    return PartitionData(0, r.high_watermark, r.log_start_offset, records_of(r.regions), r.diverging_epoch)


def exchange(state: FetcherState, leaders: dict, followers: dict, now: int = NOW) -> dict:
    """One fetch round: the action taken for each partition fetched."""
    taken = {}
    for req in state.build_fetch(now, followers):
        follower = followers[req.key]
        action = state.on_partition(req, answer(leaders[req.key], req), follower, now)
        if isinstance(action, ListLeaderOffsets):
            leader = leaders[req.key]
            end = leader.offset_for_timestamp(-1, Isolation.LOG_END)[1]
            start = leader.offset_for_timestamp(-2, Isolation.LOG_END)[1]
            action = state.on_leader_offsets(req, end, start, follower, now)
        try:
            if isinstance(action, Append):
                follower.append_as_follower(action.records, action.leader_hw, action.leader_log_start)
                state.done(req, follower, appended=len(action.records) > 0)
            elif isinstance(action, TruncateTo):
                follower.truncate_to(action.offset)
                action = state.truncated(req, follower, now) or action
            elif isinstance(action, TruncateFullyAndStartAt):
                follower.truncate_fully_and_start_at(action.offset)
                action = state.truncated(req, follower, now) or action
        except Exception as e:
            action = state.on_exception(req.key, e, now)
        taken[req.key] = action
    return taken


def leader_writes(leader: Partition, *counts: int, size: int | None = None) -> None:
    for n in counts:
        leader.append_as_leader(batch(n, size=size), NOW, 1)


def follow(state: FetcherState, *parts: Partition) -> dict:
    for p in parts:
        state.add(p.topic, p.partition, p.topic_id, p.leader_epoch)
    return {p.key: p for p in parts}


def test_a_follower_copies_the_leaders_log_and_high_watermark(logs):
    leader = partition(logs("a"), 1, 1, 3)
    follower = partition(logs("b"), 2, 1, 3)
    leader_writes(leader, 2, 3)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert isinstance(action, Append) and follower.log_end_offset == 5
    assert follower.log.read_bytes(0, 1 << 20, max_offset=5) == leader.log.read_bytes(0, 1 << 20, max_offset=5)
    exchange(state, {leader.key: leader}, followers)  # its position moves the leader's high watermark
    assert leader.high_watermark == 5
    exchange(state, {leader.key: leader}, followers)
    assert follower.high_watermark == 5 and follower.latest_epoch == 3


def test_a_partial_batch_at_the_end_of_a_response_is_left_for_the_next_fetch():
    one, two = batch(1), batch(2)
    assert complete_batches(one + two[:30]) == len(one)
    assert complete_batches(memoryview(one + two)) == len(one + two)
    assert complete_batches(b"") == 0


def test_a_diverging_epoch_truncates_to_where_the_logs_meet(logs):
    """Two quick failovers (audit §3), at the follower: it led at epoch 1 and wrote 10-14 of its
    own after offsets 0-9 of epoch 0; the new leader (epoch 2) has 0-11 of epoch 0 and recorded
    its epoch at election. The follower truncates to 10, not to the leader's end 12."""
    leader = partition(logs("a"), 1, 9, 0)
    follower = partition(logs("b"), 2, 9, 0)
    for part in (leader, follower):
        part.append_as_follower(batch(10, partition_leader_epoch=0), 10, 0)
    leader.append_as_follower(batch(2, base_offset=10, partition_leader_epoch=0), 10, 0)
    follower.append_as_follower(batch(5, base_offset=10, partition_leader_epoch=1), 10, 0)
    leader.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=2, partition_epoch=1), NOW)
    follower.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=2, partition_epoch=1), NOW)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert action == TruncateTo(10, "diverging at epoch 0 end 12")
    assert follower.log_end_offset == 10 and follower.latest_epoch == 0
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert isinstance(action, Append) and follower.log_end_offset == 12
    assert follower.log.read_bytes(0, 1 << 20, max_offset=12) == leader.log.read_bytes(0, 1 << 20, max_offset=12)


def test_a_leader_epoch_the_follower_never_had_truncates_to_the_end_of_its_epoch_below(logs):
    follower = partition(logs("b"), 2, 1, 5)
    follower.append_as_follower(batch(4, partition_leader_epoch=1), 4, 0)
    follower.append_as_follower(batch(4, base_offset=4, partition_leader_epoch=4), 4, 0)
    state = FetcherState(CONFIG)
    follow(state, follower)
    (req,) = state.build_fetch(NOW, {follower.key: follower})
    # the leader's epoch 3 ends at 6: we never had epoch 3, ours below it (1) ends at 4
    action = state.on_partition(req, PartitionData(0, diverging_epoch=(3, 6)), follower, NOW)
    assert isinstance(action, TruncateTo) and action.offset == 4


def test_out_of_range_above_the_leaders_end_truncates_to_it(logs):
    leader = partition(logs("a"), 1, 1, 0)
    follower = partition(logs("b"), 2, 1, 0)
    leader_writes(leader, 3)
    follower.append_as_follower(batch(6), 0, 0)  # no epochs: nothing to check divergence by
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert isinstance(action, TruncateTo) and action.offset == 3 and follower.log_end_offset == 3


def test_out_of_range_below_the_leaders_start_starts_over_there(logs):
    leader = partition(logs("a"), 1, 1, 0)
    follower = partition(logs("b"), 2, 1, 0)
    leader_writes(leader, 5, 5)
    leader.record_follower_fetch(2, 10, NOW)
    leader.delete_records(10)  # the leader's log now starts at 10; the follower has nothing
    leader_writes(leader, 2)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert isinstance(action, TruncateFullyAndStartAt) and action.offset == 10
    assert (follower.log_start_offset, follower.log_end_offset) == (10, 10)
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert isinstance(action, Append) and follower.log_end_offset == 12


def test_out_of_range_within_the_leaders_log_backs_off(logs):
    follower = partition(logs("b"), 2, 1, 0)
    state = FetcherState(CONFIG)
    follow(state, follower)
    (req,) = state.build_fetch(NOW, {follower.key: follower})
    assert isinstance(
        state.on_partition(req, PartitionData(ErrorCode.offset_out_of_range), follower, NOW), ListLeaderOffsets
    )
    action = state.on_leader_offsets(req, 5, 0, follower, NOW)
    assert action == Backoff(NOW + 500, action.reason)
    assert state.build_fetch(NOW + 499, {follower.key: follower}) == []
    assert len(state.build_fetch(NOW + 500, {follower.key: follower})) == 1


def test_a_fenced_epoch_parks_the_partition_until_the_metadata_moves_on(logs):
    follower = partition(logs("b"), 2, 1, 4)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (req,) = state.build_fetch(NOW, followers)
    action = state.on_partition(req, PartitionData(ErrorCode.fenced_leader_epoch), follower, NOW)
    assert isinstance(action, Park)
    assert state.build_fetch(NOW + 10**9, followers) == [] and state.next_ready_ms(NOW) is None
    assert not state.add("t", 0, follower.topic_id, 4)  # the same epoch again: still parked
    assert state.build_fetch(NOW + 10**9, followers) == []
    assert state.add("t", 0, follower.topic_id, 5)  # the metadata's newer epoch: fetching again
    (req,) = state.build_fetch(NOW, followers)
    assert req.leader_epoch == 5


@pytest.mark.parametrize(
    "code", [ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error]
)
def test_other_errors_back_off_that_partition(logs, code):
    follower = partition(logs("b"), 2, 1, 4)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (req,) = state.build_fetch(NOW, followers)
    assert isinstance(state.on_partition(req, PartitionData(code), follower, NOW), Backoff)
    assert state.next_ready_ms(NOW) == NOW + 500 and state.build_fetch(NOW + 1, followers) == []


def test_one_partitions_error_parks_only_it(logs):
    """A storage error appending to one partition (its log directory went offline), invalid
    records in another: those two wait (the first parked, the second for the backoff); the
    third goes on fetching in the same round and the next."""
    leader_logs, follower_dirs = logs("a"), [logs("b"), logs("c"), logs("c2")]  # one per log directory
    leaders = {}
    followers_list = []
    for p in range(3):
        leader = partition(leader_logs, 1, 1, 0, p)
        leader.append_as_leader(batch(2), NOW, 1)
        leaders[leader.key] = leader
        followers_list.append(partition(follower_dirs[p], 2, 1, 0, p))
    state = FetcherState(CONFIG)
    followers = follow(state, *followers_list)
    broken, corrupt, healthy = followers_list
    broken.log.dir_state.fail(OSError(5, "Input/output error"))
    corrupt_bytes = bytearray(leaders[corrupt.key].log.read_bytes(0, 1 << 20, max_offset=2))
    corrupt_bytes[-1] ^= 1  # damaged on the way: the CRC no longer matches
    reqs = state.build_fetch(NOW, followers)
    taken = {}
    for req in reqs:
        data = answer(leaders[req.key], req)
        if req.key == corrupt.key:
            data = PartitionData(0, data.high_watermark, data.log_start_offset, bytes(corrupt_bytes))
        action = state.on_partition(req, data, followers[req.key], NOW)
        try:
            followers[req.key].append_as_follower(action.records, action.leader_hw, action.leader_log_start)
            state.done(req, followers[req.key], appended=True)
        except Exception as e:
            action = state.on_exception(req.key, e, NOW)
        taken[req.key] = action
    assert isinstance(taken[broken.key], Park) and "KafkaStorageError" in taken[broken.key].reason
    assert isinstance(taken[corrupt.key], Backoff)
    assert isinstance(taken[healthy.key], Append) and healthy.log_end_offset == 2
    leaders[healthy.key].append_as_leader(batch(3), NOW, 1)
    assert [r.key for r in state.build_fetch(NOW + 1, followers)] == [healthy.key]
    assert [r.key for r in state.build_fetch(NOW + 500, followers)] == [corrupt.key, healthy.key]


def test_a_replicated_batch_over_max_message_bytes_or_hours_off_is_appended(logs):
    """Audit §1: the follower's log has max.message.bytes lowered below the leader's batches and
    timestamp bounds of a minute around a clock two hours ahead; it copies them all."""
    leader = partition(logs("a"), 1, 1, 0)
    strict = LogConfig(
        max_message_bytes=1000, message_timestamp_before_max_ms=60_000, message_timestamp_after_max_ms=60_000
    )
    follower = partition(logs("b"), 2, 1, 0, config=strict)
    follower.log.clock = lambda: (1_700_000_000_000 + 2 * 3600_000) / 1000
    leader.append_as_leader(batch(3, size=3000, ts=1_700_000_000_000), NOW, 1)
    leader.append_as_leader(batch(1, ts=1_700_000_000_000), NOW, 1)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert isinstance(action, Append) and follower.log_end_offset == 4


def test_a_response_to_a_request_no_longer_current_is_skipped(logs):
    follower = partition(logs("b"), 2, 1, 4)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (req,) = state.build_fetch(NOW, followers)
    follower.append_as_follower(batch(1, partition_leader_epoch=4), 1, 0)  # the log moved meanwhile
    assert isinstance(state.on_partition(req, PartitionData(0, 1, 0, batch(1)), follower, NOW), Skip)
    (req,) = state.build_fetch(NOW, followers)
    state.add("t", 0, follower.topic_id, 5)  # a new leader epoch meanwhile
    assert isinstance(state.on_partition(req, PartitionData(ErrorCode.fenced_leader_epoch), follower, NOW), Skip)
    state.remove(follower.key)
    assert isinstance(state.on_partition(req, PartitionData(0), follower, NOW), Skip)


def _led_and_following(logs, n: int):
    """`n` partitions of topic t, each led by broker 1 with one record, and broker 2's copies
    (empty): the leaders by key, the followers in partition order."""
    leader_logs, follower_logs = logs("a"), logs("b")
    leaders, followers = {}, []
    for p in range(n):
        leader = partition(leader_logs, 1, 1, 0, p)
        leader.append_as_leader(batch(1), NOW, 1)
        leaders[leader.key] = leader
        followers.append(partition(follower_logs, 2, 1, 0, p))
    return leaders, followers


def test_a_partition_that_got_records_goes_to_the_end_of_the_request(logs):
    """With more data than a response holds, every partition is first in turn (the first one
    gets a batch larger than the limits)."""
    leaders, fs = _led_and_following(logs, 3)
    state = FetcherState(CONFIG)
    followers = follow(state, *fs)
    (req0, req1, req2) = state.build_fetch(NOW, followers)
    action = state.on_partition(req0, answer(leaders[req0.key], req0), fs[0], NOW)
    fs[0].append_as_follower(action.records, action.leader_hw, action.leader_log_start)
    state.done(req0, fs[0], appended=True)
    assert [r.partition for r in state.build_fetch(NOW, followers)] == [1, 2, 0]


def test_a_partition_whose_position_did_not_move_is_asked_with_the_same_request(logs):
    """A fetch session compares each partition with what it last sent: an idle partition gets
    the same request object again; one that appended, or a new leader epoch, a new one."""
    leaders, fs = _led_and_following(logs, 2)
    state = FetcherState(CONFIG)
    followers = follow(state, *fs)
    first = state.build_fetch(NOW, followers)
    req0 = first[0]
    action = state.on_partition(req0, answer(leaders[req0.key], req0), fs[0], NOW)
    fs[0].append_as_follower(action.records, action.leader_hw, action.leader_log_start)
    state.done(req0, fs[0], appended=True)
    again = {r.key: r for r in state.build_fetch(NOW, followers)}
    assert again[("t", 1)] is first[1]  # idle: the same request
    assert again[("t", 0)] is not req0 and again[("t", 0)].fetch_offset == 1 and req0.fetch_offset == 0
    state.add("t", 1, fs[1].topic_id, 1)  # a new leader epoch: a new request at it
    assert {r.key: r for r in state.build_fetch(NOW, followers)}[("t", 1)].leader_epoch == 1


def test_a_whole_failed_fetch_backs_off_every_partition_in_it(logs):
    fs = [partition(logs("b"), 2, 1, 0, p) for p in range(2)]
    state = FetcherState(CONFIG)
    followers = follow(state, *fs)
    state.on_fetch_failed(state.build_fetch(NOW, followers), NOW, "connection lost")
    assert state.build_fetch(NOW + 499, followers) == []
    assert len(state.build_fetch(NOW + 500, followers)) == 2


def test_an_epoch_a_leader_took_and_never_wrote_in_does_not_hold_its_follower(logs):
    """An empty partition led by broker 1 at epoch 1, by broker 2 at epoch 2, by broker 1 again at
    epoch 3, each recording its epoch at election and writing nothing until the last. Each new
    entry at offset 0 replaces the one before (Kafka's monotonic epoch cache), so the leader
    knows no epoch below 3 to call a divergence on, and broker 2 copies its log at once."""
    leader = partition(logs("a"), 1, 1, 1)
    follower = partition(logs("b"), 2, 2, 2)  # leads at epoch 2 first
    assert follower.log.epoch_cache.entries == [(2, 0)]
    follower.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=3, partition_epoch=1), NOW)
    leader.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=3, partition_epoch=1), NOW)
    assert leader.log.epoch_cache.entries == [(3, 0)]  # epoch 1's entry at the same offset gave way
    leader_writes(leader, 3)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (action,) = exchange(state, {leader.key: leader}, followers).values()
    assert isinstance(action, Append) and follower.log_end_offset == 3
    assert follower.log.epoch_cache.entries == [(3, 0)]


def test_truncating_at_the_log_end_drops_an_epoch_never_written_in(logs):
    """Kafka's truncateTo: even when no record goes, the epoch cache is cut at the log end, so a
    follower's epoch taken at election and never written in stops being its last fetched one."""
    follower = partition(logs("b"), 2, 1, 1)
    follower.append_as_follower(batch(2, partition_leader_epoch=1), 2, 0)
    follower.update(PartitionInfo(0, 2, (1, 2), (2,), leader_epoch=5, partition_epoch=1), NOW)
    assert follower.log.epoch_cache.entries == [(1, 0), (5, 2)]
    follower.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=6, partition_epoch=2), NOW)
    follower.truncate_to(2)
    assert follower.log.epoch_cache.entries == [(1, 0)] and follower.latest_epoch == 1


def test_a_truncation_that_changes_nothing_backs_off_instead_of_spinning(logs):
    follower = partition(logs("b"), 2, 1, 4)
    follower.append_as_follower(batch(2, partition_leader_epoch=4), 2, 0)
    state = FetcherState(CONFIG)
    followers = follow(state, follower)
    (req,) = state.build_fetch(NOW, followers)
    action = state.on_partition(req, PartitionData(0, diverging_epoch=(4, 2)), follower, NOW)
    assert isinstance(action, TruncateTo) and action.offset == 2
    follower.truncate_to(action.offset)
    assert isinstance(state.truncated(req, follower, NOW), Backoff)
    assert state.build_fetch(NOW + 1, followers) == []
