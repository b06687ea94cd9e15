"""Fetch sessions (KIP-227): what a request's session id and epoch mean."""

from __future__ import annotations

from odradek.broker.fetch_session import CachedPartition, FetchSessionCache
from odradek.protocol.errors import ErrorCode


def parts(*offsets: int) -> list:
    return [("t", i, CachedPartition(off, 1000)) for i, off in enumerate(offsets)]


def test_epoch_zero_opens_a_session_with_every_partition():
    cache = FetchSessionCache(4)
    session, incremental, error = cache.resolve(0, 0, parts(5, 7), [], sessions_allowed=True)
    assert error == 0 and not incremental and session is not None
    assert session.epoch == 1 and list(session.partitions) == [("t", 0), ("t", 1)]


def test_the_next_epoch_updates_positions_and_forgets_partitions():
    cache = FetchSessionCache(4)
    session, _, _ = cache.resolve(0, 0, parts(5, 7, 9), [], sessions_allowed=True)
    changed = [("t", 1, CachedPartition(8, 500, current_leader_epoch=2))]
    same, incremental, error = cache.resolve(session.id, 1, changed, [("t", 2)], sessions_allowed=True)
    assert same is session and incremental and error == 0 and session.epoch == 2
    assert {k: (c.fetch_offset, c.max_bytes, c.current_leader_epoch) for k, c in session.partitions.items()} == {
        ("t", 0): (5, 1000, -1),
        ("t", 1): (8, 500, 2),
    }


def test_a_wrong_epoch_or_unknown_id_is_an_error_for_the_whole_request():
    cache = FetchSessionCache(4)
    session, _, _ = cache.resolve(0, 0, parts(1), [], sessions_allowed=True)
    assert cache.resolve(session.id, 5, [], [], sessions_allowed=True)[2] == ErrorCode.invalid_fetch_session_epoch
    assert cache.resolve(session.id + 1, 1, [], [], sessions_allowed=True)[2] == ErrorCode.fetch_session_id_not_found


def test_epoch_minus_one_closes_and_answers_without_a_session():
    cache = FetchSessionCache(4)
    session, _, _ = cache.resolve(0, 0, parts(1), [], sessions_allowed=True)
    assert cache.resolve(session.id, -1, parts(1), [], sessions_allowed=True) == (None, False, 0)
    assert session.id not in cache.sessions


def test_no_session_for_old_versions_or_without_slots_and_the_oldest_session_is_evicted():
    assert FetchSessionCache(4).resolve(0, 0, parts(1), [], sessions_allowed=False) == (None, False, 0)
    assert FetchSessionCache(0).resolve(0, 0, parts(1), [], sessions_allowed=True) == (None, False, 0)
    cache = FetchSessionCache(2)
    first = cache.resolve(0, 0, parts(1), [], sessions_allowed=True)[0]
    second = cache.resolve(0, 0, parts(1), [], sessions_allowed=True)[0]
    cache.resolve(first.id, 1, [], [], sessions_allowed=True)  # used: the second is now the oldest
    cache.resolve(0, 0, parts(1), [], sessions_allowed=True)
    assert first.id in cache.sessions and second.id not in cache.sessions


def test_an_incremental_response_names_a_partition_with_news_and_again_after_an_error():
    cp = CachedPartition(5, 1000)
    respond = cp.must_respond
    assert respond(10, 10, 0, records=False, error=False, diverging=False)  # the first answer
    assert not respond(10, 10, 0, records=False, error=False, diverging=False)  # nothing new
    assert respond(10, 10, 0, records=True, error=False, diverging=False)
    assert respond(11, 10, 0, records=False, error=False, diverging=False)  # high watermark
    assert respond(11, 11, 0, records=False, error=False, diverging=False)  # last stable offset
    assert respond(11, 11, 1, records=False, error=False, diverging=False)  # log start offset
    # Kafka's rule: an error, a diverging epoch, every time; and the answer after an error too
    for _ in range(2):
        assert respond(11, 11, 1, records=False, error=False, diverging=True)
    assert not respond(11, 11, 1, records=False, error=False, diverging=False)
    for _ in range(2):
        assert respond(11, 11, 1, records=False, error=True, diverging=False)
    assert respond(11, 11, 1, records=False, error=False, diverging=False)  # it went away
    assert not respond(11, 11, 1, records=False, error=False, diverging=False)
