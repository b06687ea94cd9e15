"""The transaction state machine (coordinator/txn/state.py): Kafka's TransactionMetadata
transitions, pending transitions, epoch bumps and fencing."""

from __future__ import annotations

import pytest

from odradek.coordinator.txn.records import decode_value, encode_value
from odradek.coordinator.txn.state import MAX_EPOCH, TransitionError, TxnMetadata, TxnState
from odradek.protocol.errors import ErrorCode as E

S = TxnState


def new() -> TxnMetadata:
    return TxnMetadata.new("tx", 100, 60000, now_ms=1)


def step(md: TxnMetadata, t) -> TxnMetadata:
    md.complete(t)
    return md


def test_first_init_gives_epoch_0_then_bumps():
    md = new()
    assert (md.state, md.producer_epoch) == (S.EMPTY, -1)
    step(md, md.prepare_increment_epoch(60000, None, 2))
    assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.EMPTY, 0, -1)
    step(md, md.prepare_increment_epoch(30000, None, 3))
    assert (md.producer_epoch, md.timeout_ms, md.last_update_ms) == (1, 30000, 3)


def test_kip360_retry_of_a_bump_gets_the_same_epoch_and_a_stale_one_is_fenced():
    md = new()
    step(md, md.prepare_increment_epoch(60000, None, 2))
    step(md, md.prepare_increment_epoch(60000, 0, 3))  # the producer (epoch 0) recovers: bump, remember 0
    assert (md.producer_epoch, md.last_producer_epoch) == (1, 0)
    t = md.prepare_increment_epoch(60000, 0, 4)  # its retry: same answer
    assert (t.producer_epoch, t.last_producer_epoch) == (1, 0)
    md.abort_pending()
    assert md.prepare_increment_epoch(60000, 5, 4) == E.producer_fenced
    assert md.pending is None


def test_a_whole_commit_and_the_partitions_it_carries():
    md = new()
    step(md, md.prepare_increment_epoch(60000, None, 2))
    step(md, md.prepare_add_partitions({("t", 0)}, 10))
    assert (md.state, md.start_ms) == (S.ONGOING, 10)
    step(md, md.prepare_add_partitions({("t", 1)}, 20))
    assert md.start_ms == 10 and md.partitions == {("t", 0), ("t", 1)}
    t = md.prepare_end(True, 30)
    assert t.state == S.PREPARE_COMMIT and t.partitions == {("t", 0), ("t", 1)}
    step(md, t)
    c = md.prepare_complete(40)
    assert md.pending == S.COMPLETE_COMMIT
    step(md, c)
    assert (md.state, md.partitions, md.producer_epoch) == (S.COMPLETE_COMMIT, set(), 0)
    # the next transaction starts afresh
    step(md, md.prepare_add_partitions({("u", 0)}, 50))
    assert (md.state, md.start_ms, md.partitions) == (S.ONGOING, 50, {("u", 0)})


def test_fencing_an_ongoing_transaction_aborts_it_with_the_bumped_epoch():
    md = new()
    step(md, md.prepare_increment_epoch(60000, None, 2))
    step(md, md.prepare_add_partitions({("t", 0)}, 10))
    fence = md.prepare_fence_epoch()
    assert (fence.state, fence.producer_epoch, md.pending) == (S.PREPARE_EPOCH_FENCE, 1, S.PREPARE_EPOCH_FENCE)
    abort = md.prepare_abort_after_fence(fence.producer_epoch, 20)
    assert (abort.state, abort.producer_epoch, abort.partitions) == (S.PREPARE_ABORT, 1, {("t", 0)})
    step(md, abort)
    step(md, md.prepare_complete(30))
    assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, 1)
    step(md, md.prepare_increment_epoch(60000, None, 40))
    assert md.producer_epoch == 2


def test_a_failed_fence_is_not_bumped_twice():
    md = new()
    step(md, md.prepare_increment_epoch(60000, None, 2))
    step(md, md.prepare_add_partitions({("t", 0)}, 10))
    fence = md.prepare_fence_epoch()
    md.prepare_abort_after_fence(fence.producer_epoch, 20)
    md.failed_epoch_fence = True
    md.abort_pending()  # the PrepareAbort append failed
    assert md.producer_epoch == 1  # the bumped epoch stays (never given out) ...
    assert md.prepare_fence_epoch().producer_epoch == 1  # ... and is reused


def test_invalid_transitions_and_a_second_pending_are_refused():
    md = new()
    step(md, md.prepare_increment_epoch(60000, None, 2))
    with pytest.raises(TransitionError):
        md.prepare_end(True, 3)  # Empty cannot become PrepareCommit
    md.prepare_add_partitions({("t", 0)}, 3)
    with pytest.raises(TransitionError):
        md.prepare_add_partitions({("t", 1)}, 4)  # one pending at a time
    md.abort_pending()
    assert md.state == S.EMPTY
    with pytest.raises(TransitionError):
        md.prepare_fence_epoch()  # only an Ongoing transaction is fenced


def test_exhausted_epochs_rotate_the_producer_id():
    md = new()
    md.producer_epoch = MAX_EPOCH - 1
    assert md.epoch_exhausted
    with pytest.raises(TransitionError):
        md.prepare_increment_epoch(60000, None, 2)
    step(md, md.prepare_rotate_producer_id(200, 60000, 2, True))
    assert (md.producer_id, md.producer_epoch, md.last_producer_id, md.last_producer_epoch) == (
        200,
        0,
        100,
        MAX_EPOCH - 1,
    )


def test_transits_write_what_replay_reads():
    md = new()
    step(md, md.prepare_increment_epoch(60000, None, 2))
    t = md.prepare_add_partitions({("t", 0), ("a", 3)}, 10)
    again = TxnMetadata.from_log("tx", decode_value(encode_value(t.log_value())))
    assert (again.state, again.partitions, again.producer_id, again.producer_epoch, again.start_ms) == (
        S.ONGOING,
        {("t", 0), ("a", 3)},
        100,
        0,
        10,
    )
    assert S.by_name("PrepareCommit") == S.PREPARE_COMMIT and S.ONGOING.kafka_name == "Ongoing"
    assert S.by_name("Nonsense") is None
