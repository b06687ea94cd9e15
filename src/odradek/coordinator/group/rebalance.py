"""The classic group protocol as a sans-IO state machine.

Kafka's classic rebalance protocol (org.apache.kafka.coordinator.group.classic.ClassicGroup,
GroupMetadataManager, and the older kafka.coordinator.group.GroupCoordinator):

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                   ▲      │                                   │ leader's SyncGroup
      │                   │      └──no members left──▶ Empty          ▼ stored durably
      │                   └──────────join, leave, expiry─────────── Stable
      └── Dead (deleted, or offsets expired) ◀── Empty

Every operation takes the current time `now` (ms) and a `token` naming the request
that waits for an answer, and returns a Result: the records to append to the group's
partition of __consumer_offsets, `(token, answer)` replies to send once those are
durable, and an optional continuation run after the append (the leader's assignment
only takes effect, and offsets only enter the cache, once written, as in Kafka).
Timers are deadlines kept here (`next_deadline()`, `expire(now)`); the runtime arms one
event-loop timer for the earliest. `replay(key, value)` rebuilds state from the log.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.coordinator.group.model import (
    UNKNOWN_MEMBER_ID,
    VALID_PREVIOUS,
    Group,
    GroupState,
    JoinResult,
    LeaveResult,
    Member,
    PendingTxnOffsets,
    Result,
    SyncResult,
)
from odradek.coordinator.group.offsets import store_error
from odradek.coordinator.group.records import GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue
from odradek.coordinator.group.txn_offsets import TxnOffsetsMixin
from odradek.protocol.errors import ErrorCode as E

S = GroupState
log = logging.getLogger("odradek.coordinator.group")


@dataclass(frozen=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2147483647
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000

    @classmethod
    def from_broker(cls, config: Any) -> CoordinatorConfig:
        return cls(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60000,
        )


def _default_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


class ClassicGroupMachine(TxnOffsetsMixin):
    """All groups of this coordinator, their members, offsets (offsets.py, txn_offsets.py) and
    deadlines; every operation but JoinGroup, which GroupCoordinatorState (state.py) adds."""

    def __init__(
        self, config: CoordinatorConfig | None = None, *, new_member_id: Callable[[str], str] = _default_member_id
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.groups: dict[str, Group] = {}
        self.new_member_id = new_member_id
        self._deadlines: dict[tuple, int] = {}
        self._heap: list[tuple[int, int, tuple]] = []
        self._seq = 0
        self.txn = PendingTxnOffsets()
        self._txn_writes = {}

    # =================================================================== deadlines
    def _set_deadline(self, key: tuple, at: int) -> None:
        self._deadlines[key] = at
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, key))

    def _cancel(self, key: tuple) -> None:
        self._deadlines.pop(key, None)

    def deadline(self, key: tuple) -> int | None:
        return self._deadlines.get(key)

    def next_deadline(self) -> int | None:
        while self._heap:
            at, _, key = self._heap[0]
            if self._deadlines.get(key) == at:
                return at
            heapq.heappop(self._heap)
        return None

    def expire(self, now: int) -> list[Result]:
        """Fire every deadline at or before `now`."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            at, _, key = heapq.heappop(self._heap)
            if self._deadlines.get(key) != at:
                continue
            del self._deadlines[key]
            group = self.groups.get(key[1])
            if group is None:
                continue
            res = Result(group.group_id)
            kind = key[0]
            if kind == "hb":
                self._on_session_expired(group, key[2], now, res)
            elif kind == "pending":
                self._on_pending_expired(group, key[2], now, res)
            elif kind == "join":
                self._on_join_deadline(group, now, res)
            elif kind == "sync":
                self._on_sync_deadline(group, now, res)
            out.append(res)
        return out

    def _heartbeat(self, group: Group, member: Member, now: int, timeout: int | None = None) -> None:
        self._set_deadline(
            ("hb", group.group_id, member.member_id), now + (member.session_timeout if timeout is None else timeout)
        )

    def _join_result(self, group: Group, member: Member, *, skip_assignment: bool = False) -> JoinResult:
        leader = group.is_leader(member.member_id)
        return JoinResult(
            0,
            member.member_id,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader or "",
            skip_assignment,
            group.current_member_metadata() if leader else [],
        )

    # =================================================================== rebalance
    def _transition(self, group: Group, state: GroupState, now: int) -> None:
        if group.state not in VALID_PREVIOUS[state]:
            raise AssertionError(f"group {group.group_id}: illegal transition {group.state} -> {state}")
        log.info(
            "group %s: %s -> %s (generation %d, %d members)",
            group.group_id,
            group.state,
            state,
            group.generation,
            len(group.members),
        )
        group.state = state
        group.state_timestamp = now

    def _maybe_prepare_rebalance(self, group: Group, now: int, res: Result) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now, res)
        else:
            self._check_join_complete(group, now, res)

    def _prepare_rebalance(self, group: Group, now: int, res: Result) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, int(E.rebalance_in_progress), now, res)
        self._clear_pending_sync(group)
        delay = self.config.initial_rebalance_delay_ms
        if group.is_(S.EMPTY) and delay > 0:
            group.join_kind = "initial"
            group.new_member_added = False
            group.initial_remaining = max(group.rebalance_timeout() - delay, 0)
            self._set_deadline(("join", group.group_id), now + delay)
            self._transition(group, S.PREPARING_REBALANCE, now)
        else:
            group.join_kind = "normal"
            self._set_deadline(("join", group.group_id), now + group.rebalance_timeout())
            self._transition(group, S.PREPARING_REBALANCE, now)
            self._check_join_complete(group, now, res)

    def _check_join_complete(self, group: Group, now: int, res: Result) -> None:
        if group.is_(S.PREPARING_REBALANCE) and group.join_kind == "normal" and group.has_all_members_joined():
            self._complete_join(group, now, res)

    def _on_join_deadline(self, group: Group, now: int, res: Result) -> None:
        if not group.is_(S.PREPARING_REBALANCE):
            return
        if group.join_kind == "initial" and group.new_member_added and group.initial_remaining != 0:
            # More members arrived during the initial delay: wait another round.
            delay = self.config.initial_rebalance_delay_ms
            group.new_member_added = False
            step = min(delay, group.initial_remaining)
            group.initial_remaining = max(group.initial_remaining - delay, 0)
            self._set_deadline(("join", group.group_id), now + step)
            return
        self._complete_join(group, now, res)

    def _complete_join(self, group: Group, now: int, res: Result) -> None:
        self._cancel(("join", group.group_id))
        group.join_kind = ""
        # Dynamic members that did not rejoin in time are out; static ones stay (KIP-345).
        for m in group.not_yet_rejoined():
            if m.group_instance_id is None:
                self._remove_member(group, m, res, "did not rejoin in time")
        if group.is_(S.DEAD):
            return
        if group.members and not self._elect_joined_leader(group):
            # Only static members that did not rejoin: give them another rebalance timeout.
            group.join_kind = "normal"
            self._set_deadline(("join", group.group_id), now + group.rebalance_timeout())
            return
        group.generation += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            self._transition(group, S.COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.leader = None
            self._transition(group, S.EMPTY, now)
            res.records.append(group.metadata_record())
            return
        for m in group.members.values():
            if m.join_token is not None:
                res.reply(m.join_token, self._join_result(group, m))
                m.join_token = None
            m.is_new = False
            self._heartbeat(group, m, now)
        group.pending_sync = set(group.members)
        self._set_deadline(("sync", group.group_id), now + group.rebalance_timeout())

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader or "")
        if leader is not None and leader.awaiting_join:
            return True
        for m in group.members.values():
            if m.awaiting_join:
                group.leader = m.member_id
                return True
        return False

    def _clear_pending_sync(self, group: Group) -> None:
        group.pending_sync.clear()
        self._cancel(("sync", group.group_id))

    def _on_sync_deadline(self, group: Group, now: int, res: Result) -> None:
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
            for mid in list(group.pending_sync):
                if mid in group.members:
                    self._remove_member(group, group.members[mid], res, "no SyncGroup in time")
            group.pending_sync.clear()
            self._maybe_prepare_rebalance(group, now, res)

    def _reset_and_propagate_assignment_error(self, group: Group, error: int, now: int, res: Result) -> None:
        for m in group.members.values():
            m.assignment = b""
        for m in group.members.values():
            if m.sync_token is not None:
                res.reply(m.sync_token, SyncResult(error))
                m.sync_token = None
                self._heartbeat(group, m, now)

    # =================================================================== SyncGroup
    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        *,
        token: Any,
        now: int,
    ) -> Result:
        res = Result(group_id)

        def fail(code: int) -> Result:
            res.reply(token, SyncResult(int(code)))
            return res

        if not group_id:
            return fail(E.invalid_group_id)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.unknown_member_id)
        if group.is_(S.DEAD):
            return fail(E.coordinator_not_available)
        if group.is_static_member_fenced(group_instance_id, member_id):
            return fail(E.fenced_instance_id)
        if not group.has(member_id):
            return fail(E.unknown_member_id)
        if generation != group.generation:
            return fail(E.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return fail(E.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.is_(S.EMPTY):
            return fail(E.unknown_member_id)
        if group.is_(S.PREPARING_REBALANCE):
            return fail(E.rebalance_in_progress)
        self._remove_pending_sync(group, member_id)
        if group.is_(S.STABLE):
            self._heartbeat(group, member, now)
            res.reply(token, SyncResult(0, group.protocol_type, group.protocol_name, member.assignment))
            return res
        # CompletingRebalance: wait for the leader's assignment to be stored.
        if member.sync_token is not None and member.sync_token is not token:
            res.reply(member.sync_token, SyncResult(int(E.rebalance_in_progress)))
        member.sync_token = token
        if group.is_leader(member_id):
            full = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            res.records.append(group.metadata_record(full))
            gen = group.generation
            res.then = lambda error, now2: self._assignment_stored(group, gen, full, error, now2)
        return res

    def _remove_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel(("sync", group.group_id))

    def _assignment_stored(
        self, group: Group, generation: int, assignment: dict[str, bytes], error: int, now: int
    ) -> Result:
        res = Result(group.group_id)
        if (
            self.groups.get(group.group_id) is not group
            or not group.is_(S.COMPLETING_REBALANCE)
            or group.generation != generation
        ):
            return res
        if error:
            self._reset_and_propagate_assignment_error(group, store_error(error), now, res)
            self._maybe_prepare_rebalance(group, now, res)
            return res
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        for m in group.members.values():
            if m.sync_token is not None:
                res.reply(m.sync_token, SyncResult(0, group.protocol_type, group.protocol_name, m.assignment))
                m.sync_token = None
                self._heartbeat(group, m, now)
        self._transition(group, S.STABLE, now)
        return res

    # =================================================================== Heartbeat
    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation: int, *, token: Any, now: int
    ) -> Result:
        res = Result(group_id)
        res.reply(token, int(self._heartbeat_error(group_id, member_id, group_instance_id, generation, now)))
        return res

    def _heartbeat_error(self, group_id, member_id, instance_id, generation, now) -> int:
        if not group_id:
            return E.invalid_group_id
        group = self.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_(S.DEAD):
            return E.coordinator_not_available
        if group.is_static_member_fenced(instance_id, member_id):
            return E.fenced_instance_id
        if not group.has(member_id):
            return E.unknown_member_id
        if generation != group.generation:
            return E.illegal_generation
        if group.is_(S.EMPTY):
            return E.unknown_member_id
        self._heartbeat(group, group.members[member_id], now)
        return E.rebalance_in_progress if group.is_(S.PREPARING_REBALANCE) else E.none

    def _on_session_expired(self, group: Group, member_id: str, now: int, res: Result) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # waiting members are alive; the rebalance timeout governs them
        self._remove_member_and_update(group, member, now, res, "session timeout")

    def _on_pending_expired(self, group: Group, member_id: str, now: int, res: Result) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._check_join_complete(group, now, res)

    # =================================================================== LeaveGroup
    def leave(self, group_id: str, members: list[tuple[str, str | None]], *, token: Any, now: int) -> Result:
        res = Result(group_id)
        if not group_id:
            res.reply(token, LeaveResult(int(E.invalid_group_id)))
            return res
        group = self.groups.get(group_id)
        if group is None:
            res.reply(token, LeaveResult(0, [(mid, iid, int(E.unknown_member_id)) for mid, iid in members]))
            return res
        if group.is_(S.DEAD):
            res.reply(token, LeaveResult(int(E.coordinator_not_available)))
            return res
        out = []
        for member_id, instance_id in members:
            out.append((member_id, instance_id, int(self._leave_one(group, member_id, instance_id, now, res))))
        res.reply(token, LeaveResult(0, out))
        return res

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None, now: int, res: Result) -> int:
        if member_id == UNKNOWN_MEMBER_ID:
            known = group.static_members.get(instance_id) if instance_id is not None else None
            if known is None or known not in group.members:
                return E.unknown_member_id
            self._remove_member_and_update(group, group.members[known], now, res)
            return E.none
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel(("pending", group.group_id, member_id))
            self._check_join_complete(group, now, res)
            return E.none
        if group.is_static_member_fenced(instance_id, member_id):
            return E.fenced_instance_id
        if not group.has(member_id):
            return E.unknown_member_id
        self._remove_member_and_update(group, group.members[member_id], now, res)
        return E.none

    def _remove_member(self, group: Group, member: Member, res: Result, why: str = "") -> None:
        log.info("group %s: member %s removed%s", group.group_id, member.member_id, f" ({why})" if why else "")
        if member.join_token is not None:
            res.reply(member.join_token, JoinResult(int(E.unknown_member_id), member.member_id))
            member.join_token = None
        if member.sync_token is not None:
            res.reply(member.sync_token, SyncResult(int(E.unknown_member_id)))
            member.sync_token = None
        del group.members[member.member_id]
        if (
            member.group_instance_id is not None
            and group.static_members.get(member.group_instance_id) == member.member_id
        ):
            del group.static_members[member.group_instance_id]
        group.pending_sync.discard(member.member_id)
        self._cancel(("hb", group.group_id, member.member_id))
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _remove_member_and_update(self, group: Group, member: Member, now: int, res: Result, why: str = "left") -> None:
        self._remove_member(group, member, res, why)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now, res)
        elif group.is_(S.PREPARING_REBALANCE):
            self._check_join_complete(group, now, res)

    # =================================================================== replay
    def replay(
        self,
        key: GroupMetadataKey | OffsetCommitKey,
        value: GroupMetadataValue | OffsetCommitValue | None,
        *,
        offset: int = -1,
        producer_id: int = -1,
    ) -> None:
        """Apply one record of __consumer_offsets (loading, and the replay tests): `offset` is
        its log offset, `producer_id` that of its transactional batch (-1: a plain batch).
        Markers: replay_end_transaction (txn_offsets.py)."""
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            self.replay_offset_record(key, value, offset, producer_id)
            return
        old = self.groups.pop(key.group, None)
        self._drop_deadlines(key.group)
        if value is None:
            if old is not None and old.offsets:
                self.groups[key.group] = Group(key.group, offsets=old.offsets)
            return
        assert isinstance(value, GroupMetadataValue)
        group = Group(key.group, offsets=old.offsets if old is not None else {})
        group.protocol_type = value.protocol_type or None
        group.generation = value.generation
        group.protocol_name = value.protocol
        group.leader = value.leader
        group.state_timestamp = value.current_state_timestamp
        for m in value.members:
            protocols = [(value.protocol, m.subscription)] if value.protocol is not None else []
            group.members[m.member_id] = Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout,
                m.session_timeout,
                value.protocol_type,
                protocols,
                m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = S.STABLE if group.members else S.EMPTY
        if group.leader not in group.members:
            group.leader = next(iter(group.members), None)
        self.groups[key.group] = group

    def _drop_deadlines(self, group_id: str) -> None:
        for k in [k for k in self._deadlines if k[1] == group_id]:
            del self._deadlines[k]

    def loaded(self, group_ids: list[str] | None, now: int) -> None:
        """After a load: every member of a loaded group gets a fresh session deadline."""
        for gid in group_ids if group_ids is not None else list(self.groups):
            group = self.groups.get(gid)
            if group is not None:
                for m in group.members.values():
                    self._heartbeat(group, m, now)
