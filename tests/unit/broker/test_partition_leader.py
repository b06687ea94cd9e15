"""Partition as a leader across failovers, over real storage in a temporary directory: its epoch
recorded at election (KIP-279), ListOffsets while its high watermark lags (KIP-207), the read
path for followers (fetch_records), their fetch state (reset when they leave the ISR or
restart; KIP-903 broker epochs), the partition-epoch guard and pending ISR proposals."""

from __future__ import annotations

import pytest
from support.batches import batch

from odradek.broker.partition import Isolation, IsrProposal, Partition, PartitionError
from odradek.cluster.metadata import PartitionInfo
from odradek.protocol.errors import ErrorCode
from odradek.storage import LogConfig, LogManager

NOW = 1_700_000_000_000


@pytest.fixture
def logs(tmp_path):
    m = LogManager([str(tmp_path / "logs")], LogConfig())
    m.load()
    yield m
    m.shutdown()


class Controller:
    """The AlterPartition channel's side: proposals submitted, answered by the test."""

    def __init__(self) -> None:
        self.sent: list[IsrProposal] = []

    def submit(self, partition: Partition, proposal: IsrProposal) -> None:
        self.sent.append(proposal)


EPOCHS = {1: 501, 2: 502, 3: 503}  # broker epochs in the metadata


def make(
    logs, info: PartitionInfo, node_id: int = 1, *, topic: str = "t", epochs: dict[int, int] = EPOCHS
) -> tuple[Partition, Controller]:
    """A partition whose metadata shows the brokers `epochs` names registered, with those epochs
    (read at each use: a test may change them)."""
    controller = Controller()
    lg = logs.create_log(topic, info.partition, LogConfig())
    part = Partition(
        topic,
        info.partition,
        lg,
        node_id,
        lambda p, n: None,
        alter_isr=controller,
        broker_epoch=lambda b: epochs.get(b, -1),
    )
    part.update(info, NOW)
    return part, controller


def follower_copy(part: Partition, data: bytes, leader_hw: int) -> None:
    part.append_as_follower(data, leader_hw, 0)


def written(epoch: int, count: int, base_offset: int = 0) -> bytes:
    """A batch of `count` records from `base_offset` as a leader at `epoch` wrote it."""
    return batch(count, ts=1000 + base_offset, base_offset=base_offset, partition_leader_epoch=epoch)


# ------------------------------------------------------------ epoch at election
def test_a_new_leader_records_its_epoch_at_election(logs):
    """KIP-279/KAFKA-7415, two quick failovers: this replica has offsets 0-11 of epoch 0 when it
    becomes leader at epoch 2. A follower that led at epoch 1 meanwhile (offsets 10-14 of its
    own) must be told its log diverges at 12 of epoch 0, not OFFSET_OUT_OF_RANGE."""
    part, _ = make(logs, PartitionInfo(0, 9, (1, 2, 9), (1, 2, 9), leader_epoch=0))
    follower_copy(part, written(0, 12), leader_hw=10)
    assert part.latest_epoch == 0
    part.update(PartitionInfo(0, 1, (1, 2, 9), (1,), leader_epoch=2, partition_epoch=3), NOW)
    assert part.latest_epoch == 2 and part.last_offset_for_leader_epoch(2) == (2, 12)
    r = part.fetch_records(15, 1 << 20, min_one=True, replica_id=2, last_fetched_epoch=1, now_ms=NOW)
    assert r.diverging_epoch == (0, 12) and r.regions == []
    assert part.followers[2].log_end_offset == -1  # a diverging fetch is no position


def test_an_isr_change_at_the_same_epoch_records_nothing_new(logs):
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=3))
    part.append_as_leader(batch(2), NOW, 1)
    part.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=3, partition_epoch=1), NOW)
    assert part.log.epoch_cache.entries == [(3, 0)]


# ------------------------------------------------------------------- KIP-207
def lagging_leader(logs) -> Partition:
    """Followed up to offset 10 with the old leader's high watermark at 5, now leader at epoch 1
    with a follower in the ISR that has not fetched yet: high watermark 5 < epoch start 10."""
    part, _ = make(logs, PartitionInfo(0, 2, (1, 2), (1, 2), leader_epoch=0))
    for i in range(10):
        follower_copy(part, written(0, 1, base_offset=i), leader_hw=5)
    part.update(PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=1, partition_epoch=1), NOW)
    assert (part.high_watermark, part.log_end_offset) == (5, 10)
    return part


def test_list_offsets_latest_is_not_available_while_the_high_watermark_lags_the_epoch_start(logs):
    part = lagging_leader(logs)
    for isolation in (Isolation.HIGH_WATERMARK, Isolation.TXN_COMMITTED):
        with pytest.raises(PartitionError) as e:
            part.offset_for_timestamp(-1, isolation)
        assert e.value.code == ErrorCode.offset_not_available
    # what is below the high watermark, the earliest offsets, and a replica asking: as ever
    assert part.offset_for_timestamp(-2, Isolation.HIGH_WATERMARK) == (-1, 0)
    assert part.offset_for_timestamp(1002, Isolation.HIGH_WATERMARK) == (1002, 2)
    assert part.offset_for_timestamp(-1, Isolation.LOG_END) == (-1, 10)
    # a timestamp found only at or above the high watermark, or not at all, or the max timestamp
    for ts in (1007, 5000, -3):
        with pytest.raises(PartitionError) as e:
            part.offset_for_timestamp(ts, Isolation.HIGH_WATERMARK)
        assert e.value.code == ErrorCode.offset_not_available
    # the follower catches up: the high watermark passes the epoch start, answers resume
    part.record_follower_fetch(2, 10, NOW)
    assert part.offset_for_timestamp(-1, Isolation.HIGH_WATERMARK) == (-1, 10)
    assert part.offset_for_timestamp(-3, Isolation.HIGH_WATERMARK) == (1009, 9)


def test_the_max_timestamp_above_what_a_reader_may_see_is_not_answered(logs):
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=0))
    part.append_as_leader(batch(2, ts=1000), NOW, 1)
    part.record_follower_fetch(2, 2, NOW)
    part.append_as_leader(batch(1, ts=9000), NOW, 1)  # not yet on the follower
    assert part.offset_for_timestamp(-3, Isolation.HIGH_WATERMARK) == (-1, -1)
    assert part.offset_for_timestamp(-3, Isolation.LOG_END) == (9000, 2)


# -------------------------------------------------------------- fetch_records
def test_a_follower_position_counts_only_once_the_read_succeeded(logs):
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=0))
    part.append_as_leader(batch(4), NOW, 1)
    with pytest.raises(PartitionError) as e:
        part.fetch_records(9, 1 << 20, min_one=True, replica_id=2, now_ms=NOW)  # past the log end
    assert e.value.code == ErrorCode.offset_out_of_range
    assert part.followers[2].log_end_offset == -1 and part.pending is None
    r = part.fetch_records(2, 1 << 20, min_one=True, replica_id=2, now_ms=NOW)
    assert r.next_offset == 4 and part.followers[2].log_end_offset == 2


def test_a_read_without_update_fetch_state_leaves_the_followers_position_alone(logs):
    """Kafka's DelayedFetch reads again with updateFetchState false: the follower's position
    was recorded when its Fetch arrived; the read after the wake-up returns the new data and
    the high watermark without recording the same offset a second time."""
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=0))
    part.append_as_leader(batch(4), NOW, 1)
    part.fetch_records(4, 1 << 20, min_one=True, replica_id=2, now_ms=NOW)
    st = part.followers[2]
    before = (st.log_end_offset, st.last_fetch_ms, st.last_caught_up_ms, st.last_fetch_leader_leo)
    assert before == (4, NOW, NOW, 4)
    part.append_as_leader(batch(2, base_offset=4), NOW + 7, 1)  # the append that wakes it
    r = part.fetch_records(4, 1 << 20, min_one=True, replica_id=2, now_ms=NOW + 7, update_fetch_state=False)
    assert (r.first_offset, r.next_offset, r.high_watermark) == (4, 6, 4)
    assert (st.log_end_offset, st.last_fetch_ms, st.last_caught_up_ms, st.last_fetch_leader_leo) == before
    r = part.fetch_records(6, 1 << 20, min_one=True, replica_id=2, now_ms=NOW + 9)
    assert r.high_watermark == 6 and (st.log_end_offset, st.last_fetch_ms) == (6, NOW + 9)


def test_a_fetch_from_a_broker_that_is_not_a_replica_is_refused(logs):
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=4))
    with pytest.raises(PartitionError) as e:
        part.fetch_records(0, 100, min_one=True, replica_id=3, current_leader_epoch=4, now_ms=NOW)
    assert e.value.code == ErrorCode.unknown_leader_epoch  # a reassignment not seen here yet: retry
    with pytest.raises(PartitionError) as e:
        part.fetch_records(0, 100, min_one=True, replica_id=3, now_ms=NOW)
    assert e.value.code == ErrorCode.not_leader_or_follower


# ------------------------------------------------------------- follower state
def test_a_follower_leaving_the_isr_is_not_brought_back_by_what_it_fetched_before(logs):
    """Audit §6: ISR {1,2,3} on an idle partition; the controller removes 3 (it died; no epoch
    bump). Follower 2's fetches must not re-add 3 from its pre-crash position: 3 comes back
    only by fetching again itself."""
    epochs = dict(EPOCHS)
    part, controller = make(logs, PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3), leader_epoch=0), epochs=epochs)
    part.append_as_leader(batch(5), NOW, 1)
    for r in (2, 3):
        part.fetch_records(5, 1 << 20, min_one=True, replica_id=r, replica_epoch=EPOCHS[r], now_ms=NOW)
    assert part.high_watermark == 5
    part.update(PartitionInfo(0, 1, (1, 2, 3), (1, 2), leader_epoch=0, partition_epoch=1), NOW)
    assert part.followers[3].log_end_offset == -1 and part.followers[3].broker_epoch == -1
    part.fetch_records(5, 1 << 20, min_one=True, replica_id=2, replica_epoch=EPOCHS[2], now_ms=NOW + 1)
    assert controller.sent == []
    # broker 3 restarted (a new registration, a new epoch, which the metadata shows) with a
    # shorter log, and fetches
    epochs[3] = 700
    part.fetch_records(3, 1 << 20, min_one=True, replica_id=3, replica_epoch=700, now_ms=NOW + 2)
    assert controller.sent == []  # 3 is behind the high watermark
    part.fetch_records(5, 1 << 20, min_one=True, replica_id=3, replica_epoch=700, now_ms=NOW + 3)
    (proposal,) = controller.sent
    assert proposal.isr == (1, 2, 3)
    assert proposal.isr_epochs == ((1, 501), (2, 502), (3, 700))  # KIP-903: from its own fetch
    assert (proposal.leader_epoch, proposal.partition_epoch) == (0, 1)


def test_a_fetch_with_a_new_broker_epoch_starts_that_followers_state_again(logs):
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=0))
    part.append_as_leader(batch(8), NOW, 1)
    part.fetch_records(8, 1 << 20, min_one=True, replica_id=2, replica_epoch=600, now_ms=NOW)
    st = part.followers[2]
    assert (st.log_end_offset, st.broker_epoch, st.last_fetch_leader_leo) == (8, 600, 8)
    part.fetch_records(3, 1 << 20, min_one=True, replica_id=2, replica_epoch=610, now_ms=NOW + 5)
    assert (st.log_end_offset, st.broker_epoch, st.last_fetch_ms) == (3, 610, NOW + 5)
    # a fetch from the old session, late: refused, and it changes nothing
    with pytest.raises(PartitionError) as e:
        part.fetch_records(8, 1 << 20, min_one=True, replica_id=2, replica_epoch=600, now_ms=NOW + 6)
    assert e.value.code == ErrorCode.not_leader_or_follower
    assert (st.log_end_offset, st.broker_epoch) == (3, 610)


def test_a_fetch_older_than_the_brokers_registration_in_the_metadata_is_refused(logs):
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=0))
    with pytest.raises(PartitionError) as e:
        part.fetch_records(0, 100, min_one=True, replica_id=2, replica_epoch=EPOCHS[2] - 1, now_ms=NOW)
    assert e.value.code == ErrorCode.not_leader_or_follower
    part.fetch_records(0, 100, min_one=True, replica_id=2, replica_epoch=-1, now_ms=NOW)  # -1: not checked


def test_a_leader_proposes_only_followers_its_metadata_shows_registered_under_their_fetch_epoch(logs):
    """Kafka's Partition.isReplicaIsrEligible (KIP-903): follower 3 caught up, but this leader's
    metadata shows it unregistered (its session expired; the controller would refuse it,
    INELIGIBLE_REPLICA), then registered under an older epoch than the one it fetches with:
    not proposed, at no fetch. Once the metadata shows the registration it fetches under, the
    next fetch proposes it. Before, every fetch proposed it and every answer refused it."""
    epochs = {1: 501, 2: 502}  # 3: not registered
    part, controller = make(logs, PartitionInfo(0, 1, (1, 2, 3), (1, 2), leader_epoch=0), epochs=epochs)
    part.append_as_leader(batch(5), NOW, 1)
    part.fetch_records(5, 1 << 20, min_one=True, replica_id=2, replica_epoch=502, now_ms=NOW)
    for i in range(3):
        part.fetch_records(5, 1 << 20, min_one=True, replica_id=3, replica_epoch=700, now_ms=NOW + 1 + i)
    assert controller.sent == [] and not part.maybe_expand_isr(3)
    epochs[3] = 600  # a registration the metadata shows, not the one 3 fetches under
    part.fetch_records(5, 1 << 20, min_one=True, replica_id=3, replica_epoch=700, now_ms=NOW + 5)
    assert controller.sent == []
    epochs[3] = 700
    part.fetch_records(5, 1 << 20, min_one=True, replica_id=3, replica_epoch=700, now_ms=NOW + 6)
    (proposal,) = controller.sent
    assert proposal.isr == (1, 2, 3) and proposal.isr_epochs == ((1, 501), (2, 502), (3, 700))


def test_a_follower_whose_fetches_name_no_broker_epoch_is_eligible_once_registered(logs):
    """A Fetch before v15 names no broker epoch (-1): Kafka checks only the registration."""
    epochs = {1: 501}
    part, controller = make(logs, PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=0), epochs=epochs)
    part.fetch_records(0, 100, min_one=True, replica_id=2, now_ms=NOW)
    assert controller.sent == []
    epochs[2] = 502
    part.fetch_records(0, 100, min_one=True, replica_id=2, now_ms=NOW + 1)
    assert [p.isr for p in controller.sent] == [(1, 2)]


# ----------------------------------------------------------- partition epochs
def test_a_state_older_than_the_partitions_is_ignored(logs):
    """Audit §7: the leader's own ISR change was answered at partition epoch 2; a late watch then
    delivers epoch 1. The partition keeps the newer ISR (and its high watermark rule)."""
    part, controller = make(logs, PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=0, partition_epoch=1))
    part.fetch_records(0, 100, min_one=True, replica_id=2, now_ms=NOW)
    (proposal,) = controller.sent
    assert not part.on_alter_partition_response(proposal, 0, (1, 2), 0, 2)
    assert (part.isr, part.partition_epoch) == ((1, 2), 2)
    assert not part.update(PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=0, partition_epoch=1), NOW)
    assert (part.isr, part.partition_epoch) == ((1, 2), 2)
    part.append_as_leader(batch(1), NOW, 1)
    assert part.high_watermark == 0  # follower 2 still counts


def test_a_pending_expansion_survives_answers_that_do_not_say_it_failed(logs):
    """Audit §7: the expansion may have been applied by an attempt whose answer was lost; a retry
    then gets INVALID_UPDATE_VERSION. It stays pending (the high watermark counts the follower)
    until the metadata says what holds; only a 'not applied' answer ends it."""
    part, controller = make(logs, PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=0, partition_epoch=4))
    part.fetch_records(0, 100, min_one=True, replica_id=2, now_ms=NOW)
    (proposal,) = controller.sent
    assert part.on_alter_partition_response(proposal, ErrorCode.request_timed_out, (), -1, -1)  # send again
    assert not part.on_alter_partition_response(proposal, ErrorCode.invalid_update_version, (1, 2), 0, 5)
    assert part.pending is proposal and part.maximal_isr == (1, 2)
    part.append_as_leader(batch(2), NOW, 1)
    assert part.high_watermark == 0  # waits for follower 2, as the applied ISR would
    # the metadata brings the state the controller wrote: the proposal is over
    part.update(PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=0, partition_epoch=5), NOW)
    assert part.pending is None and part.isr == (1, 2)


def test_a_proposal_the_controller_says_it_did_not_apply_ends(logs):
    part, controller = make(logs, PartitionInfo(0, 1, (1, 2), (1,), leader_epoch=0, partition_epoch=4))
    part.fetch_records(0, 100, min_one=True, replica_id=2, now_ms=NOW)
    (proposal,) = controller.sent
    assert not part.on_alter_partition_response(proposal, ErrorCode.ineligible_replica, (1,), 0, 4)
    assert part.pending is None and part.isr == (1,)
    part.append_as_leader(batch(2), NOW, 1)
    assert part.high_watermark == 2


# ------------------------------------------------- a state given to a previous registration
def test_a_restarted_broker_does_not_lead_a_state_given_to_its_previous_registration(logs):
    """Issue 25: broker 1 (now at broker epoch 501) finds itself leader at epoch 4 in a state
    whose ISR admitted it at broker epoch 400, before it restarted: its log may have lost its
    unflushed tail, and leading would make the followers truncate to it. It leads nothing
    (no fetcher either: no leader to follow) until the controller writes a state for its
    current registration; then it leads."""
    stale = PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3), leader_epoch=4, partition_epoch=7, isr_epochs=(400, 502, 503))
    part, _ = make(logs, stale)
    assert not part.is_leader and part.leader_id == -1
    with pytest.raises(PartitionError) as e:
        part.check_leader()
    assert e.value.code == ErrorCode.not_leader_or_follower
    again = PartitionInfo(0, 1, (1, 2, 3), (1,), leader_epoch=5, partition_epoch=8, isr_epochs=(501,))
    assert part.update(again, NOW)
    assert part.is_leader and part.leader_epoch == 5


def test_a_state_without_recorded_epochs_or_for_this_registration_is_led(logs):
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=1, isr_epochs=(501, 502)))
    assert part.is_leader
    part, _ = make(logs, PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=1), topic="u")  # written by Kafka
    assert part.is_leader
