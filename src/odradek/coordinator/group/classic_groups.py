"""The classic groups of one shard and their rebalance protocol, sans-IO (the classic half of
Kafka's GroupMetadataManager; ClassicGroup): SyncGroup, Heartbeat, LeaveGroup, the session,
join and sync deadlines, replaying GroupMetadata records, DescribeGroups and ListGroups.
JoinGroup is classic_join.py; one group's data is classic_group.py.

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                   ▲      │                                   │ leader's SyncGroup
      │                   │      └──no members left──▶ Empty          ▼ stored durably
      │                   └──────────join, leave, expiry─────────── Stable
      └── Dead (deleted, or offsets expired) ◀── Empty

Every operation takes the current time `now` (ms) and a `token` naming the request that
waits for an answer, and returns a Result (coordinator/runtime.py's CoordinatorResult): the
records to append, `(token, answer)` replies to send once they are committed, and an
optional continuation run after the append (the leader's assignment only takes effect once
written, as in Kafka). Deadlines are kept in a `Timer` the runtime fires.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from odradek.coordinator.group.classic_group import VALID_PREVIOUS, Group, GroupState, Member
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.records import GroupMetadataKey, GroupMetadataValue
from odradek.coordinator.group.requests import (
    UNKNOWN_MEMBER_ID,
    GroupDescription,
    HeartbeatRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    MemberDescription,
    Result,
    SyncRequest,
    SyncResult,
)
from odradek.coordinator.runtime import Timer
from odradek.protocol.errors import ErrorCode as E

S = GroupState
log = logging.getLogger("odradek.coordinator.group")


def default_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


def store_error(code: int) -> int:
    """Kafka's mapping of a failed __consumer_offsets append to what clients see."""
    if code in (
        E.unknown_topic_or_partition,
        E.not_enough_replicas,
        E.not_enough_replicas_after_append,
        E.request_timed_out,
    ):
        return int(E.coordinator_not_available)
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return int(E.not_coordinator)
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return int(E.unknown_server_error)
    return int(code)


class ClassicGroups:
    """The classic groups of a shard by id, their members, and their deadlines (`timer`)."""

    def __init__(self, config: GroupConfig, *, new_member_id: Callable[[str], str] = default_member_id) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        self.new_member_id = new_member_id
        self.timer: Timer[Result] = Timer()

    def simple_group(self, group_id: str, state_timestamp: int = -1) -> Group:
        """The group, created Empty (no members, no protocol type) if it does not exist: a
        group that only commits offsets (simple consumers, admin, transactions)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=state_timestamp)
        return group

    def delete(self, group_id: str) -> None:
        """The group is gone (Dead): its deadlines too."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.state = S.DEAD
        self._drop_deadlines(group_id)

    # =================================================================== deadlines
    def _schedule(self, key: tuple, at: int, fire: Callable[[Group, int, Result], None]) -> None:
        """A deadline of the group `key[1]`: `fire(group, now, result)` runs if it still exists."""
        group_id = key[1]

        def op(now: int) -> Result | None:
            group = self.groups.get(group_id)
            if group is None:
                return None
            res = Result()
            fire(group, now, res)
            return res

        self.timer.schedule(key, at, op)

    def cancel(self, key: tuple) -> None:
        self.timer.cancel(key)

    def _drop_deadlines(self, group_id: str) -> None:
        self.timer.cancel_if(lambda key: key[1] == group_id)

    def touch(self, group: Group, member: Member, now: int, timeout: int | None = None) -> None:
        """The member is alive: its session deadline restarts (`timeout`, default its session timeout)."""
        member_id = member.member_id
        self._schedule(
            ("hb", group.group_id, member_id),
            now + (member.session_timeout if timeout is None else timeout),
            lambda g, now2, res: self._on_session_expired(g, member_id, now2, res),
        )

    def await_pending_member(self, group: Group, member_id: str, at: int) -> None:
        """A member id handed out with MEMBER_ID_REQUIRED (KIP-394) is forgotten at `at`."""
        group.pending_members.add(member_id)
        self._schedule(
            ("pending", group.group_id, member_id),
            at,
            lambda g, now, res: self._on_pending_expired(g, member_id, now, res),
        )

    def join_result(self, group: Group, member: Member, *, skip_assignment: bool = False) -> JoinResult:
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

    def maybe_prepare_rebalance(self, group: Group, now: int, res: Result) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, now, res)
        else:
            self.check_join_complete(group, now, res)

    def prepare_rebalance(self, group: Group, now: int, res: Result) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, int(E.rebalance_in_progress), now, res)
        self._clear_pending_sync(group)
        delay = self.config.initial_rebalance_delay_ms
        if group.is_(S.EMPTY) and delay > 0:
            group.join_kind = "initial"
            group.new_member_added = False
            group.initial_remaining = max(group.rebalance_timeout() - delay, 0)
            self._schedule(("join", group.group_id), now + delay, self._on_join_deadline)
            self._transition(group, S.PREPARING_REBALANCE, now)
        else:
            group.join_kind = "normal"
            self._schedule(("join", group.group_id), now + group.rebalance_timeout(), self._on_join_deadline)
            self._transition(group, S.PREPARING_REBALANCE, now)
            self.check_join_complete(group, now, res)

    def check_join_complete(self, group: Group, now: int, res: Result) -> None:
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
            self._schedule(("join", group.group_id), now + step, self._on_join_deadline)
            return
        self._complete_join(group, now, res)

    def _complete_join(self, group: Group, now: int, res: Result) -> None:
        self.cancel(("join", group.group_id))
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
            self._schedule(("join", group.group_id), now + group.rebalance_timeout(), self._on_join_deadline)
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
                res.reply(m.join_token, self.join_result(group, m))
                m.join_token = None
            m.is_new = False
            self.touch(group, m, now)
        group.pending_sync = set(group.members)
        self._schedule(("sync", group.group_id), now + group.rebalance_timeout(), self._on_sync_deadline)

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
        self.cancel(("sync", group.group_id))

    def _on_sync_deadline(self, group: Group, now: int, res: Result) -> None:
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
            for mid in list(group.pending_sync):
                if mid in group.members:
                    self._remove_member(group, group.members[mid], res, "no SyncGroup in time")
            group.pending_sync.clear()
            self.maybe_prepare_rebalance(group, now, res)

    def _reset_and_propagate_assignment_error(self, group: Group, error: int, now: int, res: Result) -> None:
        for m in group.members.values():
            m.assignment = b""
        for m in group.members.values():
            if m.sync_token is not None:
                res.reply(m.sync_token, SyncResult(error))
                m.sync_token = None
                self.touch(group, m, now)

    # =================================================================== SyncGroup
    def sync(self, req: SyncRequest, *, token: object, now: int) -> Result:
        res = Result()

        def fail(code: int) -> Result:
            res.reply(token, SyncResult(int(code)))
            return res

        group_id, member_id = req.group_id, req.member_id
        if not group_id:
            return fail(E.invalid_group_id)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.unknown_member_id)
        if group.is_(S.DEAD):
            return fail(E.coordinator_not_available)
        if group.is_static_member_fenced(req.group_instance_id, member_id):
            return fail(E.fenced_instance_id)
        if not group.has(member_id):
            return fail(E.unknown_member_id)
        if req.generation != group.generation:
            return fail(E.illegal_generation)
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return fail(E.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.is_(S.EMPTY):
            return fail(E.unknown_member_id)
        if group.is_(S.PREPARING_REBALANCE):
            return fail(E.rebalance_in_progress)
        self._remove_pending_sync(group, member_id)
        if group.is_(S.STABLE):
            self.touch(group, member, now)
            res.reply(token, SyncResult(0, group.protocol_type, group.protocol_name, member.assignment))
            return res
        # CompletingRebalance: wait for the leader's assignment to be stored.
        if member.sync_token is not None and member.sync_token is not token:
            res.reply(member.sync_token, SyncResult(int(E.rebalance_in_progress)))
        member.sync_token = token
        if group.is_leader(member_id):
            full = {mid: bytes(req.assignments.get(mid, b"")) for mid in group.members}
            res.records.append(group.metadata_record(full))
            gen = group.generation
            res.then = lambda error, now2: self._assignment_stored(group, gen, full, error, now2)
        return res

    def _remove_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.cancel(("sync", group.group_id))

    def _assignment_stored(
        self, group: Group, generation: int, assignment: dict[str, bytes], error: int, now: int
    ) -> Result:
        res = Result()
        if (
            self.groups.get(group.group_id) is not group
            or not group.is_(S.COMPLETING_REBALANCE)
            or group.generation != generation
        ):
            return res
        if error:
            self._reset_and_propagate_assignment_error(group, store_error(error), now, res)
            self.maybe_prepare_rebalance(group, now, res)
            return res
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        for m in group.members.values():
            if m.sync_token is not None:
                res.reply(m.sync_token, SyncResult(0, group.protocol_type, group.protocol_name, m.assignment))
                m.sync_token = None
                self.touch(group, m, now)
        self._transition(group, S.STABLE, now)
        return res

    # =================================================================== Heartbeat
    def heartbeat(self, req: HeartbeatRequest, *, token: object, now: int) -> Result:
        res = Result()
        res.reply(token, int(self._heartbeat_error(req, now)))
        return res

    def _heartbeat_error(self, req: HeartbeatRequest, now: int) -> int:
        if not req.group_id:
            return E.invalid_group_id
        group = self.groups.get(req.group_id)
        if group is None:
            return E.unknown_member_id
        if group.is_(S.DEAD):
            return E.coordinator_not_available
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return E.fenced_instance_id
        if not group.has(req.member_id):
            return E.unknown_member_id
        if req.generation != group.generation:
            return E.illegal_generation
        if group.is_(S.EMPTY):
            return E.unknown_member_id
        self.touch(group, group.members[req.member_id], now)
        return E.rebalance_in_progress if group.is_(S.PREPARING_REBALANCE) else E.none

    def _on_session_expired(self, group: Group, member_id: str, now: int, res: Result) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # waiting members are alive; the rebalance timeout governs them
        self.remove_member_and_update(group, member, now, res, "session timeout")

    def _on_pending_expired(self, group: Group, member_id: str, now: int, res: Result) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.check_join_complete(group, now, res)

    # =================================================================== LeaveGroup
    def leave(self, req: LeaveRequest, *, token: object, now: int) -> Result:
        res = Result()
        if not req.group_id:
            res.reply(token, LeaveResult(int(E.invalid_group_id)))
            return res
        group = self.groups.get(req.group_id)
        if group is None:
            res.reply(token, LeaveResult(0, [(mid, iid, int(E.unknown_member_id)) for mid, iid in req.members]))
            return res
        if group.is_(S.DEAD):
            res.reply(token, LeaveResult(int(E.coordinator_not_available)))
            return res
        out = []
        for member_id, instance_id in req.members:
            out.append((member_id, instance_id, int(self._leave_one(group, member_id, instance_id, now, res))))
        res.reply(token, LeaveResult(0, out))
        return res

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None, now: int, res: Result) -> int:
        if member_id == UNKNOWN_MEMBER_ID:
            known = group.static_members.get(instance_id) if instance_id is not None else None
            if known is None or known not in group.members:
                return E.unknown_member_id
            self.remove_member_and_update(group, group.members[known], now, res)
            return E.none
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.cancel(("pending", group.group_id, member_id))
            self.check_join_complete(group, now, res)
            return E.none
        if group.is_static_member_fenced(instance_id, member_id):
            return E.fenced_instance_id
        if not group.has(member_id):
            return E.unknown_member_id
        self.remove_member_and_update(group, group.members[member_id], now, res)
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
        self.cancel(("hb", group.group_id, member.member_id))
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def remove_member_and_update(self, group: Group, member: Member, now: int, res: Result, why: str = "left") -> None:
        self._remove_member(group, member, res, why)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, now, res)
        elif group.is_(S.PREPARING_REBALANCE):
            self.check_join_complete(group, now, res)

    def waiting_replies(self, code: int) -> list[tuple[object, object]]:
        """Answers `code` to the joins and syncs waiting on every group (a shard going away)."""
        out: list[tuple[object, object]] = []
        for group in self.groups.values():
            for m in group.members.values():
                if m.join_token is not None:
                    out.append((m.join_token, JoinResult(int(code), m.member_id)))
                if m.sync_token is not None:
                    out.append((m.sync_token, SyncResult(int(code))))
        return out

    # =================================================================== replay
    def replay(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        """A GroupMetadata record (loading): the group as it was stored, or (a tombstone) gone."""
        self.groups.pop(key.group, None)
        self._drop_deadlines(key.group)
        if value is None:
            return
        group = Group(key.group)
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

    def loaded(self, now: int) -> None:
        """After a load: every member of every group gets a fresh session deadline."""
        for group in self.groups.values():
            for m in group.members.values():
                self.touch(group, m, now)

    # =================================================================== describe / list
    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return GroupDescription(group_id, 0, "Dead", "", "", [])
        if group.is_(S.STABLE):
            members = [
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(group.protocol_name),
                    m.assignment,
                )
                for m in group.members.values()
            ]
            return GroupDescription(
                group_id, 0, group.state.value, group.protocol_type or "", group.protocol_name or "", members
            )
        members = [
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
            for m in group.members.values()
        ]
        return GroupDescription(group_id, 0, group.state.value, group.protocol_type or "", "", members)

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> list[tuple[str, str, str]]:
        """[(group_id, protocol_type, state)]; filters are case-insensitive (KIP-518, KIP-848)."""
        want_states = {s.lower() for s in states} if states else None
        if types and "classic" not in {t.lower() for t in types}:
            return []
        out = []
        for g in self.groups.values():
            if g.is_(S.DEAD):
                continue
            if want_states is not None and g.state.value.lower() not in want_states:
                continue
            out.append((g.group_id, g.protocol_type or "", g.state.value))
        return out
