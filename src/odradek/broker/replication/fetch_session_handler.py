"""A follower's side of its fetch session with a leader (KIP-227; Kafka's FetchSessionHandler).

Sans-IO: the endpoint (leader_endpoint.py) asks `build` what the next Fetch names and reports
the answer (`handle_response`) or the failure (`handle_error`). The session's partitions are
the ones of the last request built, each as it was sent (`PartitionRequest`):

- a **full** request (epoch 0, INITIAL) names every partition; sent with session id 0 it asks
  the leader for a session, with an existing id it closes that one and asks for a new one;
- once the leader answered a full request with a session id, the requests are
  **incremental** (that id, the next epoch): they name only the partitions new to the session
  or changed since sent (fetch offset, leader epoch, last fetched epoch, log start offset,
  max bytes, topic id), and forget the ones no longer fetched (delayed, parked, removed):
  the fetcher's state says which (`FetcherState.take_changes`), so building one costs what
  changed, not the session's size (Kafka's FetchSessionHandler diffs every partition); the
  leader keeps fetching the others from where it last heard, and answers only the
  partitions with news (records, an error, a moved high watermark or log start offset);
- **FETCH_SESSION_ID_NOT_FOUND** (the leader restarted or evicted the session): the next
  request is full, asking for a new session; another top-level error, a failed request, or
  an answer naming partitions that are not the session's (or, to a full request, missing
  some): the next is full, closing the session and asking for a new one;
- a leader answering session id 0 made no session (no free slot): the next request is full
  again; a leader older than Fetch v7 knows no sessions: every request is full, sessionless
  (epoch -1).

Only one request of a session is in flight at a time (one fetcher, one connection).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from odradek.broker.replication.fetcher_state import Key, PartitionRequest
from odradek.protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full request: open a session (closing the one named, if any)
FINAL_EPOCH = -1  # a full request without a session
MIN_SESSION_VERSION = 7  # Fetch v7 brought sessions

# top-level errors that concern the session only: the next (full) request goes at once
SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch})


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (the leader's rule: after the largest int comes 1)."""
    return epoch + 1 if epoch < 0x7FFFFFFF else 1


@dataclass(frozen=True, slots=True)
class SessionFetch:
    """What one Fetch request names: its session id and epoch, the partitions it sends and the
    ones it forgets."""

    session_id: int
    epoch: int
    to_send: list[PartitionRequest]
    forgotten: list[PartitionRequest]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # of the next request
        self.partitions: dict[Key, PartitionRequest] = {}  # the session's, as last sent
        self._version = -1  # the Fetch version of the session's requests (topics by name or by id)
        self._sent_epoch = INITIAL_EPOCH  # of the request in flight (FINAL_EPOCH: sessionless)
        self._names: dict[uuid.UUID | None, str] | None = None  # topic id -> name, built once per membership

    def __repr__(self) -> str:
        return f"FetchSessionHandler(session {self.session_id} epoch {self.epoch}, {len(self.partitions)} partitions)"

    @property
    def topic_names(self) -> dict[uuid.UUID | None, str]:
        """The session's topics by id (to read an answer that names topics by id)."""
        if self._names is None:
            self._names = {p.topic_id: p.topic for p in self.partitions.values()}
        return self._names

    def build(
        self,
        version: int,
        changes: Mapping[Key, PartitionRequest | None],
        everything: Callable[[], list[PartitionRequest]],
    ) -> SessionFetch:
        """The next request at Fetch `version`. An incremental one names `changes`, what moved
        since the last request built (a partition's new request, None for one no longer
        fetched: `FetcherState.take_changes`); a full one names `everything()` (every partition
        to fetch now). Either way the session's partitions become the ones it fetches now."""
        if version < MIN_SESSION_VERSION:
            partitions = everything()
            self._set(partitions)
            self._version, self._sent_epoch = version, FINAL_EPOCH
            self._initial()
            return SessionFetch(INVALID_SESSION_ID, FINAL_EPOCH, partitions, [])
        self._sent_epoch = self.epoch
        if version != self._version:
            # the leader keys a session's partitions by topic id (v13+) or by name: a session
            # built at one cannot go on at the other
            self._version = version
            self.epoch = INITIAL_EPOCH
        if self.epoch == INITIAL_EPOCH:
            self._sent_epoch = INITIAL_EPOCH
            partitions = everything()
            self._set(partitions)
            return SessionFetch(self.session_id, INITIAL_EPOCH, partitions, [])
        session = self.partitions
        to_send: list[PartitionRequest] = []
        forgotten: list[PartitionRequest] = []
        for key, p in changes.items():
            q = session.get(key)
            if p is None:  # no longer fetched (delayed, parked, removed)
                if q is not None:
                    forgotten.append(session.pop(key))
                    self._names = None
                continue
            if q is not None and q.topic_id is not p.topic_id and q.topic_id != p.topic_id:
                # a topic recreated under a new id is another partition to a leader keying by id
                if version >= 13:
                    forgotten.append(q)
                del session[key]
                q = None
            if q is None:
                self._names = None
                to_send.append(p)
            elif q != p:
                to_send.append(p)
            session[key] = p  # (a partition already there keeps its place: the session's order stays)
        return SessionFetch(self.session_id, self.epoch, to_send, forgotten)

    def handle_response(self, error_code: int, session_id: int, answered: Iterable[Key]) -> bool:
        """The leader answered (top-level `error_code`, `session_id`, the partitions named in
        its answer). False when the answer is not to be used (an error; partitions the
        request did not expect); the next request is then full."""
        if self._sent_epoch == FINAL_EPOCH:
            return not error_code  # sessionless (a leader before Fetch v7)
        if error_code:
            if error_code == ErrorCode.fetch_session_id_not_found:
                self._initial()
            else:
                self._close_existing()
            return False
        keys = set(answered)
        if self._sent_epoch == INITIAL_EPOCH:  # the answer to a full request names every partition
            if keys != self.partitions.keys():
                self._initial()
                return False
            if session_id == INVALID_SESSION_ID:
                self._initial()  # no session made: ask again next time
            else:
                self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            return True
        if not keys <= self.partitions.keys():
            self._close_existing()
            return False
        if session_id == INVALID_SESSION_ID:
            self._initial()  # the leader closed the session
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (no answer): the next one closes the session and opens another."""
        self._close_existing()

    def _set(self, partitions: list[PartitionRequest]) -> None:
        old = self.partitions
        if self._names is not None and (
            len(partitions) != len(old)
            or any(
                (q := old.get(p.key)) is None or (q.topic_id is not p.topic_id and q.topic_id != p.topic_id)
                for p in partitions
            )
        ):
            self._names = None
        self.partitions = {p.key: p for p in partitions}

    def _initial(self) -> None:
        self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH

    def _close_existing(self) -> None:
        self.epoch = INITIAL_EPOCH
