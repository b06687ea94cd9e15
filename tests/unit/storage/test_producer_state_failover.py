"""A producer's retry after a failover, as Kafka answers it (issue 25).

An idempotent producer whose request was written by the old leader but never answered (the
leader died) retries it on the new leader. The new leader must know it from the batches it
copied as a follower and answer with the original offsets, as Kafka's ProducerStateManager
does: a follower's append records every batch's producer state (Kafka's appendAsFollower,
AppendOrigin.REPLICATION), the last 5 batches of each producer are kept, and becoming leader
changes nothing in that state (broker/partition.py does not touch it). A retry answered with
an error instead (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID) makes librdkafka bump its
producer epoch and re-send, which writes the batch twice.

Real storage in a temporary directory, two or three logs standing for the replicas of one
partition: a leader's appends are client appends (`Log.append`, as `Partition.append_as_leader`
calls it); a follower copies the leader's bytes from its own log end offset with
``assign_offsets=False, origin=REPLICATION``, the call `Partition.append_as_follower` makes.
"""

from __future__ import annotations

import pytest
from support.batches import batch

from odradek.storage import (
    AppendOrigin,
    LogConfig,
    LogManager,
    StorageInvalidProducerEpochError,
    StorageOutOfOrderSequenceError,
)
from odradek.storage.log import Log

PID = 7
#: records per batch of producer PID, in the order it sends them (7 batches, sequences 0-12)
SIZES = (2, 1, 3, 2, 1, 2, 2)


def pbatch(seq: int, n: int = 1, *, epoch: int = 0, pid: int = PID) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def sent() -> list[tuple[int, bytes]]:
    """(first sequence, batch) of each batch PID sends, in order."""
    out, seq = [], 0
    for n in SIZES:
        out.append((seq, pbatch(seq, n)))
        seq += n
    return out


def replicate(leader: Log, follower: Log, up_to: int | None = None) -> None:
    """The follower fetches from its log end offset up to `up_to` (default: the leader's end)."""
    end = leader.log_end_offset if up_to is None else up_to
    if follower.log_end_offset < end:
        data = leader.read_bytes(follower.log_end_offset, 1 << 30, max_offset=end)
        follower.append(data, assign_offsets=False, origin=AppendOrigin.REPLICATION)


@pytest.fixture
def replicas(make_mgr):
    """`replicas(n, config)`: n empty logs of partition t-0, one per broker (each its own log dir)."""

    def make(n: int = 2, config: LogConfig | None = None) -> list[Log]:
        return [make_mgr(dirs=(f"broker{i}",)).create_log("t", 0, config or LogConfig()) for i in range(n)]

    return make


def written_by_leader(leader: Log) -> list[tuple[int, int]]:
    """Appends every batch of `sent()` to `leader` with another producer's batches between them;
    returns the (first offset, last offset) of each of PID's batches."""
    leader.append(batch(1))  # offsets and sequences differ
    offsets = []
    for i, (_seq, b) in enumerate(sent()):
        info = leader.append(b)
        assert not info.duplicate
        offsets.append((info.first_offset, info.last_offset))
        leader.append(pbatch(i, pid=PID + 1))
    return offsets


def test_a_new_leader_answers_a_retry_of_any_of_the_last_5_batches_with_its_original_offsets(replicas):
    old, new = replicas()
    offsets = written_by_leader(old)
    replicate(old, new, up_to=6)  # two fetches: a follower copies in pieces
    replicate(old, new)
    leo = new.log_end_offset
    # `new` is leader now: the client retries what it had no answer for
    for (seq, b), (first, last) in list(zip(sent(), offsets))[-5:]:
        info = new.append(b)
        assert info.duplicate, seq
        assert (info.first_offset, info.last_offset) == (first, last), seq
    assert new.log_end_offset == leo
    # older than the last 5: not a duplicate it can place, not the next sequence either; Kafka
    # answers OUT_OF_ORDER_SEQUENCE_NUMBER (ProducerAppendInfo.checkSequence)
    for _seq, b in sent()[:2]:
        with pytest.raises(StorageOutOfOrderSequenceError):
            new.append(b)
    # the same first sequence with another last one: no batch of those 5 (Kafka matches both)
    with pytest.raises(StorageOutOfOrderSequenceError):
        new.append(pbatch(sent()[-1][0], 1))
    nxt = sum(SIZES)
    assert new.append(pbatch(nxt, 2)).first_offset == leo


def test_a_retry_the_new_leader_never_copied_is_appended_in_sequence(replicas):
    old, new = replicas()
    offsets = written_by_leader(old)
    replicate(old, new, up_to=offsets[4][1] + 1)  # batches 5 and 6 of PID (and the other's) not copied
    leo = new.log_end_offset
    for seq, b in sent()[5:]:
        info = new.append(b)
        assert not info.duplicate and info.first_offset >= leo, seq
    assert new.append(sent()[5][1]).duplicate  # and they are known from now on


@pytest.mark.parametrize("segment_bytes", [1 << 20, 300], ids=["one-segment", "snapshots-at-rolls"])
def test_after_truncation_the_batches_kept_are_duplicates_and_those_cut_are_not(replicas, segment_bytes):
    """Two quick failovers (replication audit §3): A leads and writes PID's batches; C copies all,
    B only the first four. A dies, B leads and appends the client's retries of batches 5-7 in its
    own epoch, which nobody copies; B dies, C leads; B comes back, truncates to where it
    diverges from C and copies C's log. Leading again, B answers every retry of the last 5
    batches with A's offsets."""
    a, b, c = replicas(3, LogConfig(segment_bytes=segment_bytes))
    offsets = written_by_leader(a)
    replicate(a, c)
    replicate(a, b, up_to=offsets[3][1] + 1)
    diverges_at = b.log_end_offset
    for _seq, retry in sent()[4:]:
        assert not b.append(retry, leader_epoch=1).duplicate  # B's own copies, offsets of its own
        b.append(batch(1), leader_epoch=1)
    if segment_bytes < 1 << 20:
        assert any(off > diverges_at for off in b.producer_state.snapshot_offsets())
    b.truncate_to(diverges_at)
    assert all(off <= diverges_at for off in b.producer_state.snapshot_offsets())
    replicate(c, b)
    assert b.log_end_offset == c.log_end_offset
    for (seq, retry), (first, last) in list(zip(sent(), offsets))[-5:]:
        info = b.append(retry)
        assert info.duplicate and (info.first_offset, info.last_offset) == (first, last), seq


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_a_restarted_follower_leads_with_the_last_5_batches_known(make_mgr, clock, shutdown):
    """The producer state a follower rebuilds at start (its newest snapshot, then the batches
    after it) knows each producer's last 5 batches, so retries to it after it is elected are
    duplicates with the original offsets. (Kafka's snapshot keeps only a producer's last batch:
    it knows at most as much.)"""
    config = LogConfig(segment_bytes=300)
    leader = make_mgr(dirs=("leader",)).create_log("t", 0, config)
    offsets = written_by_leader(leader)
    m = make_mgr(dirs=("follower",))
    follower = m.create_log("t", 0, config)
    for _first, last in offsets:  # one fetch per batch: a roll (and snapshot) at most of them
        replicate(leader, follower, up_to=last + 1)
    replicate(leader, follower)
    assert follower.segment_count > 3
    if shutdown == "clean":
        m.shutdown()
    else:
        follower.flush()
        m.write_checkpoints()
        for seg in follower.segments:
            seg.close()
    m2 = LogManager(m.log_dirs, config, fs=m.fs, clock=clock)
    m2.load()
    try:
        restarted = m2.get_log("t", 0)
        for (seq, retry), (first, last) in list(zip(sent(), offsets))[-5:]:
            info = restarted.append(retry)
            assert info.duplicate and (info.first_offset, info.last_offset) == (first, last), (seq, shutdown)
    finally:
        m2.shutdown()


def test_a_resend_under_a_bumped_epoch_is_a_new_batch(replicas):
    """What issue 25's log shows (epoch 0 sequences 1768-1769, then the same records as epoch 1
    sequences 0-1): once librdkafka has bumped its epoch and renumbered what it had no answer
    for, the broker cannot tell the re-send from new records. Kafka's rule, kept here: a new
    epoch starts at sequence 0 and is appended; the old epoch is fenced after it; a follower's
    copy records the new epoch, so a retry of the re-send on the next leader is a duplicate."""
    old, new = replicas()
    offsets = written_by_leader(old)
    replicate(old, new)
    last_seq, last_batch = sent()[-1]
    resent = pbatch(0, SIZES[-1], epoch=1)
    info = new.append(resent)
    assert not info.duplicate and info.first_offset == new.log_end_offset - SIZES[-1] > offsets[-1][1]
    with pytest.raises(StorageInvalidProducerEpochError):
        new.append(last_batch)  # the old epoch's retry, too late
    with pytest.raises(StorageOutOfOrderSequenceError):
        new.append(pbatch(5, epoch=2))  # a newer epoch must start at 0
    replicate(new, old)  # the old leader, back as a follower (its log is a prefix of the new one's)
    again = old.append(resent)
    assert again.duplicate and again.first_offset == info.first_offset
