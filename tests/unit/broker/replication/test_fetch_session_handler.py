"""A follower's fetch session (fetch_session_handler.py, Kafka's FetchSessionHandler), sans-IO.

Each request the handler builds goes to the leader's real session cache
(broker/fetch_session.py's `FetchSessionCache.resolve`, what the Fetch handler calls), so the
two sides are shown to agree on the session: its id, epochs, and the partitions the leader
then holds with the fetch positions it reads from.
"""

from __future__ import annotations

import uuid

from odradek.broker.fetch_session import CachedPartition, FetchSessionCache
from odradek.broker.replication.fetch_session_handler import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionHandler,
    SessionFetch,
)
from odradek.broker.replication.fetcher_state import PartitionRequest
from odradek.protocol.errors import ErrorCode

T_ID, IDLE_ID = uuid.uuid4(), uuid.uuid4()
V15 = 15


def req(topic: str, partition: int, offset: int, *, epoch: int = 3, topic_id: uuid.UUID | None = None):
    tid = topic_id or (T_ID if topic == "t" else IDLE_ID)
    return PartitionRequest(topic, partition, tid, offset, epoch, epoch, 0, 1 << 20)


class Leader:
    """The leader's side: its session cache, keyed by topic id as Fetch v13+ is."""

    def __init__(self, slots: int = 10) -> None:
        self.cache = FetchSessionCache(slots)

    def answer(self, sent: SessionFetch) -> tuple[int, int, dict]:
        """(error code, session id, the session's partitions {(topic id, partition): fetch offset})."""
        requested = [
            (
                p.topic_id,
                p.partition,
                CachedPartition(p.fetch_offset, p.max_bytes, p.leader_epoch, p.last_fetched_epoch),
            )
            for p in sent.to_send
        ]
        forgotten = [(p.topic_id, p.partition) for p in sent.forgotten]
        session, _incremental, error = self.cache.resolve(
            sent.session_id, sent.epoch, requested, forgotten, sessions_allowed=True
        )
        if error:
            return error, 0, {}
        if session is None:
            return 0, 0, {(k, p): cp.fetch_offset for k, p, cp in requested}
        return 0, session.id, {k: cp.fetch_offset for k, cp in session.partitions.items()}


_fetched: dict[int, dict] = {}  # by handler: what its fetcher fetched at the last request built


def build(h: FetchSessionHandler, parts: list[PartitionRequest], version: int) -> SessionFetch:
    """The next request when the fetcher fetches `parts`: what changed since the last one built
    (as `FetcherState.take_changes` gives it: a new request, None for one no longer fetched),
    and every one for a full request."""
    before = _fetched.get(id(h), {})
    now = _fetched[id(h)] = {p.key: p for p in parts}
    changes: dict = {k: p for k, p in now.items() if before.get(k) is not p}
    changes.update({k: None for k in before if k not in now})
    return h.build(version, changes, lambda: list(parts))


def keys(sent: SessionFetch) -> list[tuple[str, int]]:
    return [p.key for p in sent.to_send]


def test_a_full_request_then_incremental_ones_naming_only_what_moved():
    h, leader = FetchSessionHandler(), Leader()
    parts = [req("t", 0, 10), req("t", 1, 20), req("idle", 0, 5)]
    sent = build(h, parts, V15)
    assert (sent.session_id, sent.epoch, keys(sent), sent.forgotten) == (0, INITIAL_EPOCH, [p.key for p in parts], [])
    assert sent.full
    error, sid, held = leader.answer(sent)
    assert error == 0 and sid != 0
    assert h.handle_response(0, sid, [p.key for p in parts])  # a full answer names every partition

    # t-0 got records (its fetch offset moved); t-1 and idle-0 did not: only t-0 is named
    parts = [req("t", 0, 15), req("t", 1, 20), req("idle", 0, 5)]
    sent = build(h, parts, V15)
    assert (sent.session_id, sent.epoch, keys(sent), sent.forgotten) == (sid, 1, [("t", 0)], [])
    assert not sent.full
    error, sid2, held = leader.answer(sent)
    assert (error, sid2) == (0, sid)
    assert held == {(T_ID, 0): 15, (T_ID, 1): 20, (IDLE_ID, 0): 5}  # the leader reads all three on
    assert h.handle_response(0, sid, [("t", 0)])  # an answer names only the partitions with news

    sent = build(h, parts, V15)  # nothing moved: an incremental request naming none
    assert (sent.epoch, keys(sent), sent.forgotten) == (2, [], [])
    assert leader.answer(sent)[0] == 0
    assert h.handle_response(0, sid, [])
    assert h.epoch == 3


def test_a_changed_leader_epoch_or_last_fetched_epoch_is_sent_again():
    h, leader = FetchSessionHandler(), Leader()
    parts = [req("t", 0, 10), req("t", 1, 20)]
    sent = build(h, parts, V15)
    assert h.handle_response(0, leader.answer(sent)[1], keys(sent))
    sent = build(h, [req("t", 0, 10, epoch=4), req("t", 1, 20)], V15)
    assert keys(sent) == [("t", 0)] and sent.to_send[0].leader_epoch == 4


def test_a_partition_added_is_sent_and_one_removed_is_forgotten():
    h, leader = FetchSessionHandler(), Leader()
    sent = build(h, [req("t", 0, 10), req("t", 1, 20)], V15)
    sid = leader.answer(sent)[1]
    assert h.handle_response(0, sid, keys(sent))
    # t-1 backs off (not fetched now), idle-0 joins
    sent = build(h, [req("t", 0, 10), req("idle", 0, 0)], V15)
    assert keys(sent) == [("idle", 0)]
    assert [(p.key, p.topic_id) for p in sent.forgotten] == [(("t", 1), T_ID)]
    error, _sid, held = leader.answer(sent)
    assert error == 0 and held == {(T_ID, 0): 10, (IDLE_ID, 0): 0}
    assert h.handle_response(0, sid, [("idle", 0)])
    assert h.topic_names == {T_ID: "t", IDLE_ID: "idle"}
    # t-1 is fetched again: sent as new
    sent = build(h, [req("t", 0, 10), req("idle", 0, 0), req("t", 1, 20)], V15)
    assert keys(sent) == [("t", 1)] and sent.forgotten == []
    assert leader.answer(sent)[2] == {(T_ID, 0): 10, (IDLE_ID, 0): 0, (T_ID, 1): 20}


def test_a_topic_recreated_under_a_new_id_forgets_the_old_one():
    h, leader = FetchSessionHandler(), Leader()
    sent = build(h, [req("t", 0, 10)], V15)
    assert h.handle_response(0, leader.answer(sent)[1], keys(sent))
    new_id = uuid.uuid4()
    sent = build(h, [req("t", 0, 0, topic_id=new_id)], V15)
    assert [p.topic_id for p in sent.to_send] == [new_id] and [p.topic_id for p in sent.forgotten] == [T_ID]
    assert leader.answer(sent)[2] == {(new_id, 0): 0}
    assert h.topic_names == {new_id: "t"}


def test_session_not_found_starts_a_new_session_with_a_full_request():
    h, leader = FetchSessionHandler(), Leader()
    parts = [req("t", 0, 10), req("idle", 0, 5)]
    sent = build(h, parts, V15)
    sid = leader.answer(sent)[1]
    assert h.handle_response(0, sid, keys(sent))
    leader.cache.sessions.clear()  # the leader restarted, or evicted the session
    sent = build(h, parts, V15)
    error, _, _ = leader.answer(sent)
    assert error == ErrorCode.fetch_session_id_not_found
    assert not h.handle_response(error, 0, [])
    sent = build(h, parts, V15)
    assert (sent.session_id, sent.epoch, keys(sent)) == (0, INITIAL_EPOCH, [("t", 0), ("idle", 0)])
    error, sid2, held = leader.answer(sent)
    assert error == 0 and sid2 not in (0, sid) and held == {(T_ID, 0): 10, (IDLE_ID, 0): 5}
    assert h.handle_response(0, sid2, keys(sent)) and h.epoch == 1


def test_another_error_or_a_failed_request_closes_the_session_and_opens_another():
    h, leader = FetchSessionHandler(), Leader()
    parts = [req("t", 0, 10)]
    sent = build(h, parts, V15)
    sid = leader.answer(sent)[1]
    assert h.handle_response(0, sid, keys(sent))
    build(h, parts, V15)
    h.handle_error()  # no answer: the leader may or may not have seen that epoch
    sent = build(h, parts, V15)
    assert (sent.session_id, sent.epoch, keys(sent)) == (sid, INITIAL_EPOCH, [("t", 0)])
    error, sid2, _ = leader.answer(sent)
    assert error == 0 and sid2 != sid and sid not in leader.cache.sessions  # closed, a new one opened
    assert h.handle_response(0, sid2, keys(sent))
    sent = build(h, parts, V15)
    assert not h.handle_response(ErrorCode.invalid_fetch_session_epoch, 0, [])
    assert build(h, parts, V15).epoch == INITIAL_EPOCH


def test_an_answer_naming_partitions_outside_the_session_is_not_used():
    h, leader = FetchSessionHandler(), Leader()
    sent = build(h, [req("t", 0, 10)], V15)
    sid = leader.answer(sent)[1]
    assert h.handle_response(0, sid, keys(sent))
    build(h, [req("t", 0, 10)], V15)
    assert not h.handle_response(0, sid, [("t", 7)])
    assert build(h, [req("t", 0, 10)], V15).full
    # a full answer missing a partition is not used either; the next request opens a session anew
    h2 = FetchSessionHandler()
    build(h2, [req("t", 0, 10), req("t", 1, 0)], V15)
    assert not h2.handle_response(0, 99, [("t", 0)])
    assert (h2.session_id, h2.epoch) == (0, INITIAL_EPOCH)


def test_a_leader_without_a_free_slot_answers_full_requests_without_a_session():
    h, leader = FetchSessionHandler(), Leader(slots=0)
    parts = [req("t", 0, 10)]
    for _ in range(3):
        sent = build(h, parts, V15)
        assert (sent.session_id, sent.epoch, keys(sent)) == (0, INITIAL_EPOCH, [("t", 0)])
        error, sid, _ = leader.answer(sent)
        assert (error, sid) == (0, 0)
        assert h.handle_response(0, sid, keys(sent))


def test_a_leader_before_fetch_v7_gets_sessionless_full_requests():
    h = FetchSessionHandler()
    for _ in range(2):
        sent = build(h, [req("t", 0, 10)], 6)
        assert (sent.session_id, sent.epoch, keys(sent)) == (0, FINAL_EPOCH, [("t", 0)])
        assert h.handle_response(0, 0, [("t", 0)])


def test_another_fetch_version_starts_a_new_session():
    """The leader keys partitions by name before v13 and by id from it: a session built at one
    cannot go on at the other."""
    h, leader = FetchSessionHandler(), Leader()
    parts = [req("t", 0, 10)]
    sent = build(h, parts, V15)
    sid = leader.answer(sent)[1]
    assert h.handle_response(0, sid, keys(sent))
    sent = build(h, parts, 12)
    assert (sent.session_id, sent.epoch, keys(sent)) == (sid, INITIAL_EPOCH, [("t", 0)])


def test_the_epoch_after_the_largest_is_one():
    h, leader = FetchSessionHandler(), Leader()
    sent = build(h, [req("t", 0, 10)], V15)
    sid = leader.answer(sent)[1]
    assert h.handle_response(0, sid, keys(sent))
    h.epoch = 0x7FFFFFFF
    leader.cache.sessions[sid].epoch = 0x7FFFFFFF
    sent = build(h, [req("t", 0, 10)], V15)
    assert leader.answer(sent)[0] == 0
    assert h.handle_response(0, sid, [])
    assert h.epoch == 1 == leader.cache.sessions[sid].epoch
