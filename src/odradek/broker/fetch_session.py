"""Fetch sessions (KIP-227): incremental fetch requests and responses.

A client that opens a session (session id 0, epoch 0) gets an id; later requests
name the session and the next epoch and carry only the partitions whose fetch
position changed (plus forgotten ones). Responses of an incremental fetch carry
only partitions with news: records, an error, or a changed high watermark, last
stable offset or log start offset. Epoch -1 means "no session"; closing one is
id X with epoch -1. The cache holds `max.incremental.fetch.session.cache.slots`
sessions and evicts the least recently used.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from odradek.protocol.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    high_watermark: int = -2
    last_stable_offset: int = -2
    log_start_offset: int = -2

    def changed(self, hw: int, lso: int, start: int) -> bool:
        news = hw != self.high_watermark or lso != self.last_stable_offset or start != self.log_start_offset
        self.high_watermark, self.last_stable_offset, self.log_start_offset = hw, lso, start
        return news


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int  # the epoch the next request must carry
    partitions: OrderedDict[tuple[str, int], CachedPartition] = field(default_factory=OrderedDict)


class FetchSessionCache:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._ids = itertools.count(random.randint(1, 1 << 20))

    def new_session(self) -> FetchSession | None:
        if self.slots <= 0:
            return None
        while len(self.sessions) >= self.slots:
            self.sessions.popitem(last=False)
        sid = next(self._ids) & 0x7FFFFFFF or next(self._ids)
        session = FetchSession(sid, 1)
        self.sessions[sid] = session
        return session

    def lookup(self, session_id: int, epoch: int) -> tuple[FetchSession | None, int]:
        session = self.sessions.get(session_id)
        if session is None:
            return None, ErrorCode.fetch_session_id_not_found
        if session.epoch != epoch:
            return None, ErrorCode.invalid_fetch_session_epoch
        self.sessions.move_to_end(session_id)
        return session, 0

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)
