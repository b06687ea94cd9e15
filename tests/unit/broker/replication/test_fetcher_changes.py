"""A follower's Fetch costs what changed (issue 28): `FetcherState.refresh` re-reads only the
partitions whose position may have moved, and an incremental request names only those.

Each way a partition's fetch position or readiness changes is seen: records appended (`done`),
a truncation, a new leader epoch, a backoff and its end, a park, a partition added or removed,
and, at the periodic sweep, what moves outside the fetcher (retention moving the log start
offset, a log directory going offline). The last test drives a fetcher's state, its session
handler and the leader's real session cache (broker/fetch_session.py) through random rounds
and checks that the leader's session always holds exactly what the follower fetches.
"""

from __future__ import annotations

import random
import uuid

from odradek.broker.fetch_session import CachedPartition, FetchSessionCache
from odradek.broker.replication.fetch_session_handler import FetchSessionHandler, SessionFetch
from odradek.broker.replication.fetcher_state import SWEEP_MS, FetcherConfig, FetcherState, PartitionData
from odradek.protocol.errors import ErrorCode

NOW = 1_000_000
CONFIG = FetcherConfig(backoff_ms=500)
TID = uuid.uuid4()


class Replica:
    """A follower's replica as the state reads it (`ReplicaLog`), counting the reads."""

    reads = 0

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.log_end_offset = 0
        self.latest_epoch = 1
        self.log_start_offset = 0
        self.is_leader = False
        self.offline = False

    def fetch_position(self) -> tuple[int, int, int]:
        Replica.reads += 1
        if self.offline:
            raise OSError("log directory offline")
        return self.log_end_offset, self.latest_epoch, self.log_start_offset

    def last_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]:
        return epoch, self.log_end_offset


def follow(n: int, now: int = NOW) -> tuple[FetcherState, dict]:
    state = FetcherState(CONFIG)
    replicas = {("t", p): Replica(("t", p)) for p in range(n)}
    for t, p in replicas:
        state.add(t, p, TID, 1)
    assert state.refresh(now, replicas)
    state.take_changes()
    return state, replicas


def changed(state: FetcherState, replicas: dict, now: int = NOW) -> dict:
    """{key: fetch offset, or None when no longer fetched} of what the next refresh changes."""
    state.refresh(now, replicas)
    return {k: (r.fetch_offset if r is not None else None) for k, r in state.take_changes().items()}


def append(state: FetcherState, replicas: dict, key: tuple[str, int], n: int = 1) -> None:
    replicas[key].log_end_offset += n
    state.done(state.fetching[key], replicas[key], appended=True)


def test_a_fetch_reads_only_the_partitions_that_moved():
    state, replicas = follow(500)
    Replica.reads = 0
    assert changed(state, replicas, NOW + 1) == {}
    assert Replica.reads == 0
    append(state, replicas, ("t", 7), 3)
    assert changed(state, replicas, NOW + 2) == {("t", 7): 3}
    assert Replica.reads == 1
    # a full request still names every partition, in request order (the appended one last)
    reqs = state.requests()
    assert len(reqs) == 500 and reqs[-1].key == ("t", 7) and reqs[-1].fetch_offset == 3


def test_a_truncation_is_seen():
    state, replicas = follow(3)
    append(state, replicas, ("t", 1), 10)
    changed(state, replicas)
    req = state.fetching[("t", 1)]
    replicas[("t", 1)].log_end_offset, replicas[("t", 1)].latest_epoch = 4, 2
    assert state.truncated(req, replicas[("t", 1)], NOW) is None
    assert changed(state, replicas) == {("t", 1): 4}
    assert state.fetching[("t", 1)].last_fetched_epoch == 2


def test_a_backed_off_partition_leaves_the_fetch_and_comes_back_exactly_when_due():
    state, replicas = follow(3)
    state.on_partition(state.fetching[("t", 2)], _error(), replicas[("t", 2)], NOW)  # backs off 500 ms
    assert changed(state, replicas, NOW) == {("t", 2): None}
    assert state.next_ready_ms(NOW) == NOW + 500
    assert changed(state, replicas, NOW + 499) == {}
    assert changed(state, replicas, NOW + 500) == {("t", 2): 0}
    assert state.next_ready_ms(NOW + 500) is None


def test_a_partition_backed_off_again_comes_back_at_the_later_time():
    state, replicas = follow(2)
    state.on_fetch_failed(state.requests(), NOW, "connection lost")
    assert changed(state, replicas, NOW) == {("t", 0): None, ("t", 1): None}
    assert state.refresh(NOW + 500, replicas)
    state.take_changes()
    state.on_partition(state.fetching[("t", 0)], _error(), replicas[("t", 0)], NOW + 500)
    assert state.next_ready_ms(NOW + 500) == NOW + 1000
    assert changed(state, replicas, NOW + 999) == {("t", 0): None}
    assert changed(state, replicas, NOW + 1000) == {("t", 0): 0}


def test_a_delayed_partition_past_due_is_taken_by_next_ready_then_refresh():
    state, replicas = follow(1)
    state.on_fetch_failed(state.requests(), NOW, "connection lost")
    assert state.refresh(NOW, replicas) is False
    assert state.next_ready_ms(NOW + 600) is None  # ready already: not "delayed past" then
    assert changed(state, replicas, NOW + 600) == {("t", 0): 0}


def test_a_parked_partition_leaves_until_a_new_leader_epoch_adds_it_again():
    state, replicas = follow(2)
    state.on_exception(("t", 0), OSError("disk"), NOW)
    assert changed(state, replicas) == {("t", 0): None}
    assert state.next_ready_ms(NOW) is None and changed(state, replicas, NOW + SWEEP_MS * 5) == {}
    assert not state.add("t", 0, TID, 1)  # the same epoch: still parked
    assert changed(state, replicas, NOW + SWEEP_MS * 5 + 1) == {}
    assert state.add("t", 0, TID, 2)
    changes = state.refresh(NOW + SWEEP_MS * 5 + 2, replicas) and state.take_changes()
    assert changes and changes[("t", 0)] is not None and changes[("t", 0)].leader_epoch == 2


def test_a_new_leader_epoch_is_sent_again():
    state, replicas = follow(2)
    assert state.add("t", 1, TID, 5)
    state.refresh(NOW, replicas)
    changes = state.take_changes()
    assert list(changes) == [("t", 1)] and changes[("t", 1)].leader_epoch == 5  # type: ignore[union-attr]


def test_added_and_removed_partitions_are_seen():
    state, replicas = follow(2)
    replicas[("t", 9)] = Replica(("t", 9))
    state.add("t", 9, TID, 1)
    state.remove(("t", 0))
    assert changed(state, replicas) == {("t", 9): 0, ("t", 0): None}
    assert [r.key for r in state.requests()] == [("t", 1), ("t", 9)]


def test_a_partition_that_became_leader_leaves_at_the_sweep():
    state, replicas = follow(2)
    replicas[("t", 0)].is_leader = True
    assert changed(state, replicas, NOW + 1) == {}
    assert changed(state, replicas, NOW + SWEEP_MS) == {("t", 0): None}


def test_a_partition_followed_again_without_news_comes_back_at_the_sweep():
    state, replicas = follow(2)
    replicas[("t", 0)].is_leader = True
    changed(state, replicas, NOW + SWEEP_MS)
    replicas[("t", 0)].is_leader = False
    assert changed(state, replicas, NOW + SWEEP_MS + 1) == {}
    assert changed(state, replicas, NOW + 2 * SWEEP_MS) == {("t", 0): 0}


def test_what_moves_outside_the_fetcher_is_seen_at_the_sweep():
    """Retention moving the follower's log start offset; a log directory going offline."""
    state, replicas = follow(3)
    replicas[("t", 0)].log_start_offset = 7
    replicas[("t", 1)].offline = True
    assert changed(state, replicas, NOW + SWEEP_MS - 1) == {}
    assert changed(state, replicas, NOW + SWEEP_MS) == {("t", 1): None, ("t", 0): 0}
    assert state.fetching[("t", 0)].log_start_offset == 7
    assert state.partitions[("t", 1)].parked == "OSError: log directory offline"


def test_partitions_without_a_topic_id_are_counted():
    state = FetcherState(CONFIG)
    replicas = {("a", 0): Replica(("a", 0)), ("b", 0): Replica(("b", 0))}
    state.add("a", 0, TID, 1)
    state.add("b", 0, None, 1)
    state.refresh(NOW, replicas)
    assert state.without_id == 1
    state.on_exception(("b", 0), OSError("disk"), NOW)
    state.refresh(NOW, replicas)
    assert state.without_id == 0
    state.add("b", 0, uuid.UUID(int=0), 2)  # the zero id is no id
    state.refresh(NOW, replicas)
    assert state.without_id == 1


# ------------------------------------------------------------------ with the leader's session


class Leader:
    """The leader's session cache (what its Fetch handler resolves), keyed by topic id."""

    def __init__(self) -> None:
        self.cache = FetchSessionCache(10)

    def answer(self, sent: SessionFetch) -> tuple[int, dict]:
        """(session id, the session's partitions {partition: fetch offset}) after `sent`."""
        requested: list[tuple[object, int, CachedPartition]] = [
            (
                p.topic_id,
                p.partition,
                CachedPartition(p.fetch_offset, p.max_bytes, p.leader_epoch, p.last_fetched_epoch),
            )
            for p in sent.to_send
        ]
        forgotten: list[tuple[object, int]] = [(p.topic_id, p.partition) for p in sent.forgotten]
        session, _incremental, error = self.cache.resolve(
            sent.session_id, sent.epoch, requested, forgotten, sessions_allowed=True
        )
        assert error == 0 and session is not None
        return session.id, {p: (cp.fetch_offset, cp.current_leader_epoch) for (_t, p), cp in session.partitions.items()}


def test_the_leaders_session_holds_what_the_follower_fetches_through_random_rounds():
    rng = random.Random(28)
    state, replicas = follow(40)
    handler, leader = FetchSessionHandler(), Leader()
    now, epochs = NOW, dict.fromkeys(replicas, 1)
    for _round in range(400):
        now += rng.choice((0, 1, 50, 300))
        for _ in range(rng.randint(0, 3)):
            key = rng.choice(list(replicas))
            st = state.partitions.get(key)
            req = state.fetching.get(key)
            what = rng.random()
            if what < 0.4 and req is not None:  # records
                append(state, replicas, key, rng.randint(1, 5))
            elif what < 0.5 and req is not None:  # an error: back off
                state.on_partition(req, _error(), replicas[key], now)
            elif what < 0.55 and req is not None:  # a whole failed request
                state.on_fetch_failed(state.requests(), now, "lost")
                handler.handle_error()
            elif what < 0.6 and st is not None:  # parked
                state.on_exception(key, OSError("disk"), now)
            elif what < 0.7:  # a new leader epoch (unparks)
                epochs[key] += 1
                state.add(key[0], key[1], TID, epochs[key])
            elif what < 0.8:  # removed, or added back
                if st is not None:
                    state.remove(key)
                else:
                    state.add(key[0], key[1], TID, epochs[key])
            elif what < 0.85:  # retention moves the log start (seen at the sweep)
                replicas[key].log_start_offset = replicas[key].log_end_offset
        state.refresh(now, replicas)
        sent = handler.build(15, state.take_changes(), state.requests)
        sid, held = leader.answer(sent)
        assert handler.handle_response(0, sid, [p.key for p in sent.to_send] if sent.full else [])
        assert held == {k[1]: (r.fetch_offset, r.leader_epoch) for k, r in state.fetching.items()}
        assert handler.partitions == state.fetching
        # nothing else is ready: a partition out of the fetch is parked, removed or delayed
        for key, st in state.partitions.items():
            if key not in state.fetching:
                assert st.parked is not None or st.delayed_until_ms > now


def _error() -> PartitionData:
    return PartitionData(ErrorCode.not_leader_or_follower)  # (any error but the fenced epoch backs off)
