"""The classic group protocol's state machine, GroupCoordinatorState: JoinGroup (new, known and
static members joining) here; the conventions (Results, tokens, `now`, deadlines), the state
diagram, SyncGroup, heartbeats, leaving and replay in rebalance.py; offsets in offsets.py.

Rules follow Kafka's ClassicGroup / GroupMetadataManager (classicGroupJoin*): a new member
without an id gets MEMBER_ID_REQUIRED and a pending id (KIP-394) unless it is static; a known
member re-joining with the same protocols while Stable gets its current assignment without a
rebalance (the leader gets the member list again); a static member (KIP-345) rejoining with a
new member id replaces the old one, and its metadata is compared by subscribed topics only.
"""

from __future__ import annotations

from typing import Any

from odradek.coordinator.group.model import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    UNKNOWN_MEMBER_ID,
    Group,
    GroupState,
    JoinResult,
    Member,
    Result,
    SyncResult,
)
from odradek.coordinator.group.rebalance import ClassicGroupMachine, CoordinatorConfig
from odradek.protocol.errors import ErrorCode as E

__all__ = ["CoordinatorConfig", "GroupCoordinatorState"]

S = GroupState


class GroupCoordinatorState(ClassicGroupMachine):
    """The group coordinator's state machine: JoinGroup here, every other operation in
    ClassicGroupMachine (rebalance.py) and OffsetsMixin (offsets.py)."""

    # =================================================================== JoinGroup
    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout: int,
        rebalance_timeout: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        *,
        require_known_member_id: bool,
        token: Any,
        now: int,
    ) -> Result:
        res = Result(group_id)

        def fail(code: int) -> Result:
            res.reply(token, JoinResult(int(code), member_id))
            return res

        if not group_id:
            return fail(E.invalid_group_id)
        if not self.config.min_session_timeout_ms <= session_timeout <= self.config.max_session_timeout_ms:
            return fail(E.invalid_session_timeout)
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        group = self.groups.get(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER_ID:
                return fail(E.unknown_member_id)
            group = self.groups[group_id] = Group(group_id, state_timestamp=now)
        if not self._accept_joining_member(group, member_id):
            if group.has(member_id):
                self._remove_member_and_update(group, group.members[member_id], now, res)
            return fail(E.group_max_size_reached)
        args = (
            group_instance_id,
            client_id,
            client_host,
            session_timeout,
            rebalance_timeout,
            protocol_type,
            protocols,
            token,
            now,
            res,
        )
        if member_id == UNKNOWN_MEMBER_ID:
            self._join_new_member(group, require_known_member_id, *args)
        else:
            self._join_current_member(group, member_id, *args)
        if (
            not group.members
            and not group.pending_members
            and group.state is S.EMPTY
            and not group.offsets
            and group.generation == 0
            and group.pending_offset_writes == 0
            and not self.txn.has_open(group_id)
        ):
            del self.groups[group_id]  # a rejected first join leaves nothing behind
        return res

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            return (
                group.has(member_id) and group.members[member_id].awaiting_join
            ) or group.awaiting_join_count < self.config.max_size
        return group.has(member_id) or len(group.members) < self.config.max_size

    def _join_new_member(
        self,
        group: Group,
        require_known: bool,
        instance_id,
        client_id,
        client_host,
        session_timeout,
        rebalance_timeout,
        protocol_type,
        protocols,
        token,
        now,
        res: Result,
    ) -> None:
        if group.is_(S.DEAD):
            res.reply(token, JoinResult(int(E.coordinator_not_available), UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(protocol_type, protocols):
            res.reply(token, JoinResult(int(E.inconsistent_group_protocol), UNKNOWN_MEMBER_ID))
            return
        new_id = self.new_member_id(client_id)
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is None or old_id not in group.members:
                self._add_member_and_rebalance(
                    group,
                    new_id,
                    instance_id,
                    client_id,
                    client_host,
                    session_timeout,
                    rebalance_timeout,
                    protocol_type,
                    protocols,
                    token,
                    now,
                    res,
                )
            else:
                self._update_static_member_and_rebalance(
                    group, old_id, new_id, instance_id, session_timeout, rebalance_timeout, protocols, token, now, res
                )
        elif require_known:
            # KIP-394: hand out an id and wait for the member to come back with it.
            group.pending_members.add(new_id)
            self._set_deadline(("pending", group.group_id, new_id), now + session_timeout)
            res.reply(token, JoinResult(int(E.member_id_required), new_id))
        else:
            self._add_member_and_rebalance(
                group,
                new_id,
                None,
                client_id,
                client_host,
                session_timeout,
                rebalance_timeout,
                protocol_type,
                protocols,
                token,
                now,
                res,
            )

    def _join_current_member(
        self,
        group: Group,
        member_id: str,
        instance_id,
        client_id,
        client_host,
        session_timeout,
        rebalance_timeout,
        protocol_type,
        protocols,
        token,
        now,
        res: Result,
    ) -> None:
        def fail(code: int) -> None:
            res.reply(token, JoinResult(int(code), member_id))

        if group.is_(S.DEAD):
            return fail(E.coordinator_not_available)
        if not group.supports_protocols(protocol_type, protocols):
            return fail(E.inconsistent_group_protocol)
        if member_id in group.pending_members:
            self._add_member_and_rebalance(
                group,
                member_id,
                instance_id,
                client_id,
                client_host,
                session_timeout,
                rebalance_timeout,
                protocol_type,
                protocols,
                token,
                now,
                res,
            )
            return None
        if group.is_static_member_fenced(instance_id, member_id):
            return fail(E.fenced_instance_id)
        if not group.has(member_id):
            return fail(E.unknown_member_id)
        member = group.members[member_id]
        if group.state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, protocols, session_timeout, rebalance_timeout, token, now, res
            )
        elif group.state is S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # A retried join of the generation being completed: answer it again.
                res.reply(token, self._join_result(group, member))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, session_timeout, rebalance_timeout, token, now, res
                )
        elif group.state is S.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                self._update_member_and_rebalance(
                    group, member, protocols, session_timeout, rebalance_timeout, token, now, res
                )
            else:
                res.reply(
                    token,
                    JoinResult(
                        0,
                        member_id,
                        group.generation,
                        group.protocol_type,
                        group.protocol_name,
                        group.leader or "",
                        False,
                        [],
                    ),
                )
        else:
            fail(E.unknown_member_id)
        return None

    def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        instance_id,
        client_id,
        client_host,
        session_timeout,
        rebalance_timeout,
        protocol_type,
        protocols,
        token,
        now,
        res: Result,
    ) -> None:
        member = Member(
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout,
            session_timeout,
            protocol_type,
            list(protocols),
            join_token=token,
            is_new=True,
        )
        if group.is_(S.PREPARING_REBALANCE) and group.generation == 0:
            group.new_member_added = True
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member_id] = member
        if group.leader is None or group.leader not in group.members:
            group.leader = member_id
        if instance_id is not None:
            group.static_members[instance_id] = member_id
        group.pending_members.discard(member_id)
        self._cancel(("pending", group.group_id, member_id))
        self._heartbeat(group, member, now, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, now, res)

    def _update_member_and_rebalance(
        self,
        group: Group,
        member: Member,
        protocols,
        session_timeout,
        rebalance_timeout,
        token,
        now,
        res: Result,
    ) -> None:
        self._update_member(member, protocols, session_timeout, rebalance_timeout, token, res)
        self._maybe_prepare_rebalance(group, now, res)

    def _update_member(self, member: Member, protocols, session_timeout, rebalance_timeout, token, res: Result) -> None:
        member.protocols = list(protocols)
        member.session_timeout = session_timeout
        member.rebalance_timeout = rebalance_timeout
        if member.join_token is not None and member.join_token is not token:
            # A superseded JoinGroup (the client retried): don't leave it hanging.
            res.reply(member.join_token, JoinResult(int(E.rebalance_in_progress), member.member_id))
        member.join_token = token

    def _update_static_member_and_rebalance(
        self,
        group: Group,
        old_id: str,
        new_id: str,
        instance_id: str,
        session_timeout,
        rebalance_timeout,
        protocols,
        token,
        now,
        res: Result,
    ) -> None:
        member = self._replace_static_member(group, instance_id, old_id, new_id, res)
        old = (list(member.protocols), member.session_timeout, member.rebalance_timeout)
        self._heartbeat(group, member, now)
        if group.state is S.STABLE:
            old_meta = member.metadata(group.protocol_name)
            member.protocols, member.session_timeout, member.rebalance_timeout = (
                list(protocols),
                session_timeout,
                rebalance_timeout,
            )
            if group.select_protocol() == group.protocol_name and _same_subscription(
                group.protocol_type, member.metadata(group.protocol_name), old_meta
            ):
                # KIP-345: same protocol and subscription: no rebalance; persist the new
                # member id, then give the member its generation (the leader is told to
                # skip the assignment, KIP-814).
                res.records.append(group.metadata_record())
                gen = group.generation

                def then(error: int, now2: int) -> Result:
                    out = Result(group.group_id)
                    live = self.groups.get(group.group_id)
                    if error:
                        if live is group and new_id in group.members:
                            member.protocols, member.session_timeout, member.rebalance_timeout = old
                            self._replace_static_member(group, instance_id, new_id, old_id, out)
                        out.reply(token, JoinResult(int(E.unknown_server_error), new_id))
                    elif live is group and group.generation == gen and new_id in group.members:
                        out.reply(token, self._join_result(group, member, skip_assignment=group.is_leader(new_id)))
                    else:
                        out.reply(token, JoinResult(int(E.rebalance_in_progress), new_id))
                    return out

                res.then = then
            else:
                member.join_token = token
                self._prepare_rebalance(group, now, res)
        elif group.state is S.COMPLETING_REBALANCE:
            self._update_member(member, protocols, session_timeout, rebalance_timeout, token, res)
            self._prepare_rebalance(group, now, res)
        else:  # PreparingRebalance: the member will be in the next generation.
            self._update_member(member, protocols, session_timeout, rebalance_timeout, token, res)
            self._check_join_complete(group, now, res)

    def _replace_static_member(self, group: Group, instance_id: str, old_id: str, new_id: str, res: Result) -> Member:
        member = group.members.pop(old_id)
        # Fence the old incarnation's waiting requests right away.
        if member.join_token is not None:
            res.reply(member.join_token, JoinResult(int(E.fenced_instance_id), old_id))
            member.join_token = None
        if member.sync_token is not None:
            res.reply(member.sync_token, SyncResult(int(E.fenced_instance_id)))
            member.sync_token = None
        self._cancel(("hb", group.group_id, old_id))
        member.member_id = new_id
        group.members[new_id] = member
        if group.leader == old_id:
            group.leader = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        group.static_members[instance_id] = new_id
        return member


def _subscribed_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (every version starts with int16 version,
    then an array of int16-length strings); None when it does not parse."""
    try:
        n = int.from_bytes(metadata[2:6], "big", signed=True)
        if n < 0 or n > len(metadata):
            return None
        pos, out = 6, []
        for _ in range(n):
            ln = int.from_bytes(metadata[pos : pos + 2], "big", signed=True)
            if ln < 0 or pos + 2 + ln > len(metadata):
                return None
            out.append(metadata[pos + 2 : pos + 2 + ln].decode("utf-8"))
            pos += 2 + ln
        return sorted(out)
    except (UnicodeDecodeError, ValueError):
        return None


def _same_subscription(protocol_type: str | None, new: bytes, old: bytes) -> bool:
    """Would a restarted static member's metadata leave the assignment valid?

    For "consumer" groups only the subscribed topics count: a restarted consumer's
    subscription differs from its previous one in the owned partitions and generation it
    reports (ConsumerProtocolSubscription v1+; the Java client sends both), which must not
    cause the rebalance static membership exists to avoid. Other protocol types compare bytes.
    """
    if new == old:
        return True
    if protocol_type == "consumer":
        a, b = _subscribed_topics(new), _subscribed_topics(old)
        return a is not None and a == b
    return False
