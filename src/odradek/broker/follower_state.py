"""A follower's state on its leader (Kafka's Replica): where it fetched from and when it was
last caught up, what the ISR and the high watermark are computed from; and an idle follower's
fetch (issue 28), what lets an incremental session's reader (`fetch_session.read_partitions`)
answer the same fetch again without a read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from odradek.storage.log import Log


@dataclass(slots=True)
class FollowerState:
    replica_id: int
    log_end_offset: int = -1  # unknown until its first fetch
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    # the leader's log end offset when this follower last fetched: a follower that fetches
    # from at least there has caught up to where the leader was then (Kafka's rule)
    last_fetch_leader_leo: int = -1
    broker_epoch: int = -1  # the follower's broker epoch in its last fetch (Fetch v15+), -1 unknown

    def forget_position(self) -> None:
        """What it fetched no longer counts (it left the ISR, or restarted): unknown until it
        fetches again. When it last caught up stays, for the ISR's lag rule."""
        self.log_end_offset = self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0


class Leader(Protocol):
    """What an idle follower's check reads of its partition (broker.partition.Partition)."""

    log: Log
    leader_epoch: int
    isr: tuple[int, ...]
    followers: dict[int, FollowerState]

    @property
    def is_leader(self) -> bool: ...


@dataclass(slots=True, eq=False)
class IdleFollower:
    """A follower fetch that read nothing and found the follower caught up and in the ISR
    (`Partition.fetch_records`), and the leader's state it read: while that state holds and
    the fetch asks the same (its session drops this record when a request names the partition
    again), the fetch reads nothing again and has nothing to tell (an incremental answer
    leaves the partition out), so `still_idle` answers it with the position update alone.
    Kafka reads every partition of a session on each fetch; in Python that read is ~17 us, and
    a follower of 667 idle partitions paid 11 ms per fetch for it (bench/scale/cluster.py's
    produce spread, issue 28); this check is ~1 us."""

    partition: Leader
    follower: FollowerState
    log: Log
    leader_epoch: int
    log_end_offset: int
    snapshot: object = None  # the metadata it was read in (set by the session's reader)

    def still_idle(self, replica_epoch: int, hw: int, lso: int, start: int, now_ms: int, update: bool) -> bool:
        """Whether the same fetch (from the follower's broker epoch `replica_epoch`), whose
        session last answered `hw`, `lso` and `start`, reads nothing new: the same log, log end,
        high watermark, start and last stable offsets, leader epoch, the follower still in the
        ISR at that position, the log directory online. Then, unless `update` is False (a fetch
        woken from the purgatory), it counts as the follower's fetch (Kafka's
        updateFollowerFetchState of a caught-up follower: only its times move)."""
        p = self.partition
        log = self.log
        st = self.follower
        leo = self.log_end_offset
        if (
            log.log_end_offset != leo
            or log.high_watermark != hw
            or st.log_end_offset != leo
            or p.log is not log
            or p.leader_epoch != self.leader_epoch
            or not p.is_leader
            or st.broker_epoch != replica_epoch
            or log.log_start_offset != start
            or st.replica_id not in p.isr
            or p.followers.get(st.replica_id) is not st
            or log.closed
            or log.dir_state.offline
            or log.last_stable_offset != lso
        ):
            return False
        if update:
            if now_ms > st.last_caught_up_ms:
                st.last_caught_up_ms = now_ms
            st.last_fetch_ms = now_ms
        return True
