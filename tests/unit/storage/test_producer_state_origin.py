"""Sequence checks by append origin, as Kafka's ProducerAppendInfo: a client's batches are checked
for epoch, sequence and duplicates; a coordinator's (the group coordinator's transactional offset
commits, written with base sequence 0 every time) for the producer epoch only, and never found to
be duplicates; a client batch with a producer id but no sequence (-1) is an invalid record."""

import pytest
from support.batches import batch

from odradek.protocol.records import CONTROL_COMMIT, InvalidRecordError, build_control_batch
from odradek.storage import AppendOrigin, LogConfig, StorageInvalidProducerEpochError

COORD = AppendOrigin.COORDINATOR


def coordinator_batch(pid=7, epoch=0, n=1):
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)


def commit(clock, epoch=0):
    return build_control_batch(CONTROL_COMMIT, producer_id=7, producer_epoch=epoch, timestamp=clock.ms)


def test_coordinator_batches_are_appended_every_time(make_mgr, clock):
    lg = make_mgr().create_log("__consumer_offsets", 0, LogConfig())
    first = lg.append(coordinator_batch(n=2), origin=COORD)
    second = lg.append(coordinator_batch(n=2), origin=COORD)  # same producer, epoch and sequence
    assert not first.duplicate and not second.duplicate
    assert (first.first_offset, second.first_offset) == (0, 2)
    assert lg.log_end_offset == 4
    lg.high_watermark = lg.log_end_offset
    assert lg.producer_state.first_unstable_offset() == 0  # the transaction is open
    lg.append(commit(clock), origin=COORD)
    lg.high_watermark = lg.log_end_offset
    assert lg.producer_state.first_unstable_offset() is None
    third = lg.append(coordinator_batch(), origin=COORD)  # the next transaction of the same producer and epoch
    assert not third.duplicate and third.first_offset == 5
    assert lg.producer_state.first_unstable_offset() == 5


def test_coordinator_batches_are_still_fenced_by_epoch(make_mgr, clock):
    lg = make_mgr().create_log("__consumer_offsets", 0, LogConfig())
    lg.append(coordinator_batch(epoch=3), origin=COORD)
    lg.append(commit(clock, epoch=4), origin=COORD)
    with pytest.raises(StorageInvalidProducerEpochError):
        lg.append(coordinator_batch(epoch=3), origin=COORD)
    lg.append(coordinator_batch(epoch=4), origin=COORD)


def test_the_same_batch_from_a_client_is_a_duplicate(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    first = lg.append(coordinator_batch(n=2))
    again = lg.append(coordinator_batch(n=2))
    assert again.duplicate and (again.first_offset, lg.log_end_offset) == (first.first_offset, 2)


@pytest.mark.parametrize("transactional", [False, True])
def test_a_client_batch_with_a_producer_id_and_no_sequence_is_invalid(make_mgr, transactional):
    lg = make_mgr().create_log("t", 0, LogConfig())
    with pytest.raises(InvalidRecordError, match="Invalid sequence number -1"):
        lg.append(batch(1, producer_id=9, producer_epoch=0, base_sequence=-1, is_transactional=transactional))
    assert lg.log_end_offset == 0
