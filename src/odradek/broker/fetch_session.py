"""Fetch sessions (KIP-227): incremental fetch requests and responses.

A client that opens a session (session id 0, epoch 0) gets an id; later requests
name the session and the next epoch and carry only the partitions whose fetch
position changed (plus forgotten ones). Responses of an incremental fetch carry
only partitions with news: records, an error, a diverging epoch, or a changed high
watermark, last stable offset or log start offset (after an error the next answer
names the partition again). Epoch -1 means "no session"; closing one is
id X with epoch -1. The cache holds `max.incremental.fetch.session.cache.slots`
sessions and evicts the least recently used.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch_codec import PartitionResult

if TYPE_CHECKING:
    from odradek.broker.follower_state import IdleFollower
    from odradek.broker.partition import Isolation
    from odradek.broker.replica_manager import ReplicaManager

FINAL_EPOCH = -1
INITIAL_EPOCH = 0


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -2
    last_stable_offset: int = -2
    log_start_offset: int = -2
    # the topic's name as the Fetch handler resolved it (v13+ name topics by id), and the
    # metadata snapshot it did so in: resolved again only when the metadata changed
    name: str | None = None
    named_in: object = None
    # v13+: the topic's id (the session keys such a partition by the id's integer, whose hash
    # is computed in C, not by uuid.UUID.__hash__ several times per request)
    topic_id: uuid.UUID | None = None
    # a follower's last read here found nothing to send, in this state (see read_partitions)
    idle: IdleFollower | None = None

    def asked(self, fetch_offset: int, max_bytes: int, current_leader_epoch: int, last_fetched_epoch: int) -> None:
        """The partition named again in an incremental request: what it asks now. Its idle
        record goes with it (the next read is a read)."""
        self.fetch_offset, self.max_bytes = fetch_offset, max_bytes
        self.current_leader_epoch, self.last_fetched_epoch = current_leader_epoch, last_fetched_epoch
        self.idle = None

    def answers(self, pr: PartitionResult) -> bool:
        """Whether an incremental response names the partition whose read is `pr`
        (`must_respond` of what it read)."""
        return self.must_respond(
            pr.high_watermark,
            pr.last_stable_offset,
            pr.log_start_offset,
            records=bool(pr.records),
            error=pr.error_code != 0,
            diverging=pr.diverging_epoch is not None,
        )

    def must_respond(self, hw: int, lso: int, start: int, *, records: bool, error: bool, diverging: bool) -> bool:
        """Whether an incremental response names this partition (Kafka's CachedPartition.
        maybeUpdateResponseData), remembering what it tells: records, an error or a diverging
        epoch always (a follower answered twice with a diverging epoch, its truncation not yet
        where the logs meet, must hear the second); else a high watermark, last stable offset
        or log start offset other than the last answered. An error forgets the high watermark
        answered, so the answer after the error went away names the partition again."""
        news = hw != self.high_watermark or lso != self.last_stable_offset or start != self.log_start_offset
        self.high_watermark, self.last_stable_offset, self.log_start_offset = hw, lso, start
        if error:
            self.high_watermark = -1
        return news or records or error or diverging


# (topic key, topic name or None when unknown, partition, its cached state)
Target = tuple[object, "str | None", int, CachedPartition]
# (topic key, topic name, cached state, the partition's answer, its read when it returned records)
PartitionRead = tuple[object, "str | None", CachedPartition, PartitionResult, Any]
_UNKNOWN_TOPIC_ID = int(ErrorCode.unknown_topic_id)
_UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.topic_authorization_failed)


def read_partitions(
    rm: ReplicaManager,
    targets: Iterable[Target],
    max_bytes: int,
    now_ms: int,
    *,
    by_id: bool,
    isolation: Isolation,
    replica_id: int,
    replica_epoch: int,
    update_fetch_state: bool,
    incremental: bool,
    denied: Collection[str] = (),
) -> tuple[list[PartitionRead], int, bool]:
    """Read each partition of a Fetch (the Fetch handler's and the followers' fast path's one
    way): the partitions' answers in order, the record bytes returned (within `max_bytes`, each
    partition within its own limit, the first one read whole even above them), and whether any
    partition failed or diverged (such an answer goes out now, not after the wait).

    In an `incremental` session, a follower's partition whose last read found it caught up with
    nothing to send, the leader's state unchanged since (`IdleFollower.still_idle`, and the same
    metadata), is not read again and not answered: the answer would leave it out, as it has no
    news. Only the follower's fetch time moves, as the read would move it."""
    out: list[PartitionRead] = []
    total = 0
    errors = False
    read = rm.read
    snapshot = rm.snapshot
    for key, name, part, cp in targets:
        idle = cp.idle
        if idle is not None:
            if (
                incremental
                and idle.snapshot is snapshot
                and name is not None
                and name not in denied
                and idle.still_idle(
                    replica_epoch,
                    cp.high_watermark,
                    cp.last_stable_offset,
                    cp.log_start_offset,
                    now_ms,
                    update_fetch_state,
                )
            ):
                continue
            cp.idle = None
        pr = PartitionResult(part)
        r = None
        if name is None:
            pr.error_code = _UNKNOWN_TOPIC_ID if by_id else _UNKNOWN_TOPIC_OR_PARTITION
            errors = True
        elif name in denied:
            pr.error_code = _TOPIC_AUTHORIZATION_FAILED
            errors = True
        else:
            budget = min(cp.max_bytes, max_bytes - total)
            r = read(
                name,
                part,
                cp.fetch_offset,
                max(budget, 0),
                min_one=total == 0,
                isolation=isolation,
                replica_id=replica_id,
                replica_epoch=replica_epoch,
                current_leader_epoch=cp.current_leader_epoch,
                last_fetched_epoch=cp.last_fetched_epoch,
                now_ms=now_ms,
                update_fetch_state=update_fetch_state,
            )
            pr.take(r)
            if r.idle_follower is not None:
                r.idle_follower.snapshot = snapshot
                cp.idle = r.idle_follower
            if r.error_code or r.diverging_epoch is not None:
                errors = True  # a diverging follower must truncate: answered now, not after the wait
            elif r.regions:
                pr.records = r.regions
                total += r.size
        out.append((key, name, cp, pr, r if pr.records else None))
    return out, total, errors


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int  # the epoch the next request must carry
    partitions: OrderedDict[tuple[object, int], CachedPartition] = field(default_factory=OrderedDict)


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

    def resolve(
        self,
        session_id: int,
        epoch: int,
        requested: list[tuple[object, int, CachedPartition]],
        forgotten: list[tuple[object, int]],
        *,
        sessions_allowed: bool,
    ) -> tuple[FetchSession | None, bool, int]:
        """What a Fetch request means for its session: (the session to answer in, whether the
        response is incremental, an error code for the whole request).

        Session id 0 and epoch 0 open a session (when `sessions_allowed` and a slot is
        free); an id with epoch 0 or -1 closes it (0 opens a new one too); an id with the
        expected epoch updates its partitions with `requested` (new fetch positions) and
        drops `forgotten`, and the next epoch is expected. Without a session every
        requested partition is answered (a full response)."""
        if session_id and epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            self.remove(session_id)
        if session_id and epoch not in (FINAL_EPOCH, INITIAL_EPOCH):
            session, error = self.lookup(session_id, epoch)
            if session is None:
                return None, False, error
            for key, part, cp in requested:
                old = session.partitions.get((key, part))
                if old is None:
                    session.partitions[(key, part)] = cp
                else:
                    old.asked(cp.fetch_offset, cp.max_bytes, cp.current_leader_epoch, cp.last_fetched_epoch)
            for key, part in forgotten:
                session.partitions.pop((key, part), None)
            session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
            return session, True, 0
        if epoch == INITIAL_EPOCH and sessions_allowed:
            session = self.new_session()
            if session is not None:
                for key, part, cp in requested:
                    session.partitions[(key, part)] = cp
                return session, False, 0
        return None, False, 0
