"""JoinGroup of the classic protocol, sans-IO: new, known and static members joining
(Kafka's GroupMetadataManager.classicGroupJoin*), over the groups of classic_groups.py.

A new member without an id gets MEMBER_ID_REQUIRED and a pending id (KIP-394) unless it is
static; a known member re-joining with the same protocols while Stable gets its current
assignment without a rebalance (the leader gets the member list again); a static member
(KIP-345) rejoining with a new member id replaces the old one, and its metadata is compared
by subscribed topics only.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.coordinator.group.classic_group import NEW_MEMBER_JOIN_TIMEOUT_MS, Group, GroupState, Member
from odradek.coordinator.group.classic_groups import ClassicGroups
from odradek.coordinator.group.records import subscribed_topics
from odradek.coordinator.group.requests import UNKNOWN_MEMBER_ID, JoinRequest, JoinResult, Result, SyncResult
from odradek.protocol.errors import ErrorCode as E

S = GroupState


def join(
    groups: ClassicGroups, req: JoinRequest, *, token: object, now: int, holds_offsets: Callable[[str], bool]
) -> Result:
    """Answers `token` with a JoinResult: at once, or when the rebalance completes.
    `holds_offsets(group_id)`: whether offsets keep a group that the join leaves unused."""
    res = Result()

    def fail(code: int) -> Result:
        res.reply(token, JoinResult(int(code), req.member_id))
        return res

    if not req.group_id:
        return fail(E.invalid_group_id)
    config = groups.config
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        return fail(E.invalid_session_timeout)
    group = groups.groups.get(req.group_id)
    if group is None:
        if req.member_id != UNKNOWN_MEMBER_ID:
            return fail(E.unknown_member_id)
        group = groups.groups[req.group_id] = Group(req.group_id, state_timestamp=now)
    if not _accept_joining_member(groups, group, req.member_id):
        if group.has(req.member_id):
            groups.remove_member_and_update(group, group.members[req.member_id], now, res)
        return fail(E.group_max_size_reached)
    j = _Join(groups, group, req, token, now, res)
    if req.member_id == UNKNOWN_MEMBER_ID:
        j.new_member()
    else:
        j.current_member()
    if (
        not group.members
        and not group.pending_members
        and group.is_(S.EMPTY)
        and group.generation == 0
        and not holds_offsets(req.group_id)
    ):
        groups.delete(req.group_id)  # a rejected first join leaves nothing behind
    return res


def _accept_joining_member(groups: ClassicGroups, group: Group, member_id: str) -> bool:
    if group.state in (S.EMPTY, S.DEAD):
        return True
    if group.state is S.PREPARING_REBALANCE:
        return (
            group.has(member_id) and group.members[member_id].awaiting_join
        ) or group.awaiting_join_count < groups.config.max_size
    return group.has(member_id) or len(group.members) < groups.config.max_size


class _Join:
    """One JoinGroup request on one group: the request, its token, and the result it fills."""

    __slots__ = ("groups", "group", "req", "token", "now", "res", "rebalance_timeout")

    def __init__(self, groups: ClassicGroups, group: Group, req: JoinRequest, token: object, now: int, res: Result):
        self.groups = groups
        self.group = group
        self.req = req
        self.token = token
        self.now = now
        self.res = res
        # v0 sends no rebalance timeout: the session timeout stands in
        self.rebalance_timeout = req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0 else req.session_timeout_ms

    def reply(self, answer: JoinResult) -> None:
        self.res.reply(self.token, answer)

    def new_member(self) -> None:
        group, req = self.group, self.req
        if group.is_(S.DEAD):
            self.reply(JoinResult(int(E.coordinator_not_available), UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            self.reply(JoinResult(int(E.inconsistent_group_protocol), UNKNOWN_MEMBER_ID))
            return
        new_id = self.groups.new_member_id(req.client_id)
        instance_id = req.group_instance_id
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is None or old_id not in group.members:
                self.add_member_and_rebalance(new_id)
            else:
                self.update_static_member_and_rebalance(old_id, new_id, instance_id)
        elif req.require_known_member_id:
            # KIP-394: hand out an id and wait for the member to come back with it.
            self.groups.await_pending_member(group, new_id, self.now + req.session_timeout_ms)
            self.reply(JoinResult(int(E.member_id_required), new_id))
        else:
            self.add_member_and_rebalance(new_id)

    def current_member(self) -> None:
        group, req, member_id = self.group, self.req, self.req.member_id

        def fail(code: int) -> None:
            self.reply(JoinResult(int(code), member_id))

        if group.is_(S.DEAD):
            return fail(E.coordinator_not_available)
        if not group.supports_protocols(req.protocol_type, req.protocols):
            return fail(E.inconsistent_group_protocol)
        if member_id in group.pending_members:
            self.add_member_and_rebalance(member_id)
            return None
        if group.is_static_member_fenced(req.group_instance_id, member_id):
            return fail(E.fenced_instance_id)
        if not group.has(member_id):
            return fail(E.unknown_member_id)
        member = group.members[member_id]
        if group.state is S.PREPARING_REBALANCE:
            self.update_member_and_rebalance(member)
        elif group.state is S.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # A retried join of the generation being completed: answer it again.
                self.reply(self.groups.join_result(group, member))
            else:
                self.update_member_and_rebalance(member)
        elif group.state is S.STABLE:
            if group.is_leader(member_id) or not member.matches(req.protocols):
                self.update_member_and_rebalance(member)
            else:
                self.reply(
                    JoinResult(
                        0,
                        member_id,
                        group.generation,
                        group.protocol_type,
                        group.protocol_name,
                        group.leader or "",
                        False,
                        [],
                    )
                )
        else:
            fail(E.unknown_member_id)
        return None

    def add_member_and_rebalance(self, member_id: str) -> None:
        group, req = self.group, self.req
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            self.rebalance_timeout,
            req.session_timeout_ms,
            req.protocol_type,
            list(req.protocols),
            join_token=self.token,
            is_new=True,
        )
        if group.is_(S.PREPARING_REBALANCE) and group.generation == 0:
            group.new_member_added = True
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if group.leader is None or group.leader not in group.members:
            group.leader = member_id
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member_id
        group.pending_members.discard(member_id)
        self.groups.cancel(("pending", group.group_id, member_id))
        self.groups.touch(group, member, self.now, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self.groups.maybe_prepare_rebalance(group, self.now, self.res)

    def update_member_and_rebalance(self, member: Member) -> None:
        self.update_member(member)
        self.groups.maybe_prepare_rebalance(self.group, self.now, self.res)

    def update_member(self, member: Member) -> None:
        member.protocols = list(self.req.protocols)
        member.session_timeout = self.req.session_timeout_ms
        member.rebalance_timeout = self.rebalance_timeout
        if member.join_token is not None and member.join_token is not self.token:
            # A superseded JoinGroup (the client retried): don't leave it hanging.
            self.res.reply(member.join_token, JoinResult(int(E.rebalance_in_progress), member.member_id))
        member.join_token = self.token

    def update_static_member_and_rebalance(self, old_id: str, new_id: str, instance_id: str) -> None:
        groups, group, res, token, now = self.groups, self.group, self.res, self.token, self.now
        member = _replace_static_member(groups, group, instance_id, old_id, new_id, res)
        old = (list(member.protocols), member.session_timeout, member.rebalance_timeout)
        groups.touch(group, member, now)
        if group.state is S.STABLE:
            old_meta = member.metadata(group.protocol_name)
            member.protocols = list(self.req.protocols)
            member.session_timeout = self.req.session_timeout_ms
            member.rebalance_timeout = self.rebalance_timeout
            if group.select_protocol() == group.protocol_name and _same_subscription(
                group.protocol_type, member.metadata(group.protocol_name), old_meta
            ):
                # KIP-345: same protocol and subscription: no rebalance; persist the new
                # member id, then give the member its generation (the leader is told to
                # skip the assignment, KIP-814).
                res.records.append(group.metadata_record())
                gen = group.generation

                def then(error: int, now2: int) -> Result:
                    out = Result()
                    live = groups.groups.get(group.group_id)
                    if error:
                        if live is group and new_id in group.members:
                            member.protocols, member.session_timeout, member.rebalance_timeout = old
                            _replace_static_member(groups, group, instance_id, new_id, old_id, out)
                        out.reply(token, JoinResult(int(E.unknown_server_error), new_id))
                    elif live is group and group.generation == gen and new_id in group.members:
                        out.reply(token, groups.join_result(group, member, skip_assignment=group.is_leader(new_id)))
                    else:
                        out.reply(token, JoinResult(int(E.rebalance_in_progress), new_id))
                    return out

                res.then = then
            else:
                member.join_token = token
                groups.prepare_rebalance(group, now, res)
        elif group.state is S.COMPLETING_REBALANCE:
            self.update_member(member)
            groups.prepare_rebalance(group, now, res)
        else:  # PreparingRebalance: the member will be in the next generation.
            self.update_member(member)
            groups.check_join_complete(group, now, res)


def _replace_static_member(
    groups: ClassicGroups, group: Group, instance_id: str, old_id: str, new_id: str, res: Result
) -> Member:
    member = group.members.pop(old_id)
    # Fence the old incarnation's waiting requests right away.
    if member.join_token is not None:
        res.reply(member.join_token, JoinResult(int(E.fenced_instance_id), old_id))
        member.join_token = None
    if member.sync_token is not None:
        res.reply(member.sync_token, SyncResult(int(E.fenced_instance_id)))
        member.sync_token = None
    groups.cancel(("hb", group.group_id, old_id))
    member.member_id = new_id
    group.members[new_id] = member
    if group.leader == old_id:
        group.leader = new_id
    if old_id in group.pending_sync:
        group.pending_sync.discard(old_id)
        group.pending_sync.add(new_id)
    group.static_members[instance_id] = new_id
    return member


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
        a, b = subscribed_topics(new), subscribed_topics(old)
        return a is not None and a == b
    return False
