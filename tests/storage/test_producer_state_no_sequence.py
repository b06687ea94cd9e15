"""Transactional batches without sequence numbers (base sequence -1, NO_SEQUENCE): what the group
coordinator appends for TxnOffsetCommit. Kafka checks sequences only of client appends (the
coordinator's origin is not checked) and keeps no batch of these for deduplication; the producer
epoch is still checked, and the batches open the producer's transaction until its marker."""

import pytest
from support.batches import batch

from odradek.protocol.records import CONTROL_COMMIT, build_control_batch
from odradek.storage import InvalidProducerEpochError, LogConfig, OutOfOrderSequenceError


def coordinator_batch(pid=7, epoch=0, n=1):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=-1, is_transactional=True)


def test_no_sequence_transactional_batches_are_appended_every_time(make_mgr, clock):
    lg = make_mgr().create_log("__consumer_offsets", 0, LogConfig())
    first = lg.append(coordinator_batch(n=2))
    second = lg.append(coordinator_batch(n=2))  # same producer, same epoch, same (absent) sequence
    assert not first.duplicate and not second.duplicate
    assert (first.first_offset, second.first_offset) == (0, 2)
    assert lg.log_end_offset == 4
    lg.high_watermark = lg.log_end_offset
    assert lg.producer_state.first_unstable_offset() == 0  # the transaction is open
    assert lg.producer_state.producers[7].batches == []  # nothing kept for deduplication
    lg.append(build_control_batch(CONTROL_COMMIT, producer_id=7, producer_epoch=0, timestamp=clock.ms))
    assert lg.producer_state.first_unstable_offset() is None
    third = lg.append(coordinator_batch())  # the next transaction of the same producer and epoch
    assert not third.duplicate and third.first_offset == 5
    assert lg.producer_state.first_unstable_offset() == 5


def test_no_sequence_batches_are_still_fenced_by_epoch(make_mgr, clock):
    lg = make_mgr().create_log("__consumer_offsets", 0, LogConfig())
    lg.append(coordinator_batch(epoch=3))
    lg.append(build_control_batch(CONTROL_COMMIT, producer_id=7, producer_epoch=4, timestamp=clock.ms))
    with pytest.raises(InvalidProducerEpochError):
        lg.append(coordinator_batch(epoch=3))
    lg.append(coordinator_batch(epoch=4))


def test_non_transactional_batches_keep_their_sequence_checks(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.append(batch(1, producer_id=9, producer_epoch=0, base_sequence=0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(batch(1, producer_id=9, producer_epoch=0, base_sequence=-1))
