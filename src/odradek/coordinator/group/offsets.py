"""Committed offsets and group administration (describe, list, delete), as a mixin of
the group state machine (see state.py for the conventions: Results, tokens, `now`).

Rules follow Kafka's ClassicGroup.validateOffsetCommit / OffsetMetadataManager:
- generation < 0 on an Empty (or missing) group: a simple consumer or the admin client;
  the commit is accepted and the group stays Empty without a protocol type;
- otherwise the member must be known (FENCED_INSTANCE_ID for a stale static member)
  and the generation current; commits during CompletingRebalance get
  REBALANCE_IN_PROGRESS; commits during PreparingRebalance are accepted;
- offsets enter the cache only once their records are durable;
- offsets of Empty groups expire `offsets.retention.minutes` after the group became
  Empty (or after their commit, for groups that never had members); explicit expire
  timestamps (OffsetCommit v2-v4 retention_time) win; a Stable "consumer" group's
  offsets of topics it no longer subscribes to expire from their commit time; an Empty
  group left without offsets dies and gets a tombstone;
- offsets pending in open transactions (txn_offsets.py) are not fetched (require_stable:
  UNSTABLE_OFFSET_COMMIT), get a tombstone with their partition (OffsetDelete, DeleteGroups),
  hold back the expiry of their partition's offset, and keep their group from dying.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from odradek.coordinator.group.model import (
    UNKNOWN_MEMBER_ID,
    Group,
    GroupDescription,
    GroupState,
    MemberDescription,
    PendingTxnOffsets,
    Result,
)
from odradek.coordinator.group.records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue, subscribed_topics
from odradek.protocol.errors import ErrorCode as E

S = GroupState

# (topic, partition, offset, leader_epoch, metadata)
CommitEntry = tuple[str, int, int, int, str | None]


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


def at_record_offsets(values: dict[tuple[str, int], OffsetCommitValue], base_offset: int) -> dict:
    """The values of records appended in this order from `base_offset`, with their log offsets."""
    if base_offset < 0:
        return dict(values)
    return {tp: dataclasses.replace(v, record_offset=base_offset + i) for i, (tp, v) in enumerate(values.items())}


class OffsetsMixin:
    groups: dict[str, Group]
    config: Any
    txn: PendingTxnOffsets

    # =================================================================== OffsetCommit
    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: list[CommitEntry],
        *,
        retention_ms: int = -1,
        token: Any,
        now: int,
    ) -> Result:
        """Answers `token` with {(topic, partition): error_code}."""
        res = Result(group_id)

        def all_(code: int) -> Result:
            res.reply(token, {(t, p): int(code) for t, p, *_ in offsets})
            return res

        if not group_id:
            return all_(E.invalid_group_id)
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if generation >= 0:
                return all_(E.illegal_generation)
            group = self.groups[group_id] = Group(group_id, state_timestamp=-1)
            created = True
        error = self._validate_commit(group, member_id, group_instance_id, generation)
        if error:
            return all_(error)
        if group.members.get(member_id) is not None and group.state in (S.STABLE, S.PREPARING_REBALANCE):
            self._set_deadline(("hb", group_id, member_id), now + group.members[member_id].session_timeout)  # type: ignore[attr-defined]
        errors: dict[tuple[str, int], int] = {}
        values: dict[tuple[str, int], OffsetCommitValue] = {}
        for topic, partition, offset, leader_epoch, metadata in offsets:
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors[(topic, partition)] = int(E.offset_metadata_too_large)
                continue
            expire = now + retention_ms if retention_ms >= 0 else -1
            values[(topic, partition)] = OffsetCommitValue(offset, metadata, now, leader_epoch, expire)
            errors[(topic, partition)] = 0
        if not values:
            if created:
                del self.groups[group_id]
            res.reply(token, errors)
            return res
        res.records.extend((OffsetCommitKey(group_id, t, p), v) for (t, p), v in values.items())
        group.pending_offset_writes += 1

        def then(error: int, now2: int) -> Result:
            out = Result(group_id)
            group.pending_offset_writes -= 1
            live = self.groups.get(group_id) is group
            if error:
                code = store_error(error)
                errors.update({tp: code for tp in values})
                if live and created and not group.offsets and not group.members and group.pending_offset_writes == 0:
                    del self.groups[group_id]
            elif live:
                group.offsets.update(at_record_offsets(values, res.base_offset))
            out.reply(token, errors)
            return out

        res.then = then
        return res

    def _validate_commit(
        self, group: Group, member_id: str, instance_id: str | None, generation: int, *, transactional: bool = False
    ) -> int:
        """Kafka's ClassicGroup.validateOffsetCommit. A transactional commit (TxnOffsetCommit)
        without member id and generation (v0-2) is accepted whatever the group's state, and
        the group's state is not enforced (no REBALANCE_IN_PROGRESS)."""
        if group.is_(S.DEAD):
            return E.coordinator_not_available
        if generation < 0 and group.is_(S.EMPTY):
            return E.none
        if generation >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    return E.unknown_member_id
                if known != member_id:
                    return E.fenced_instance_id
            elif not group.has(member_id):
                return E.unknown_member_id
            if generation != group.generation:
                return E.illegal_generation
        elif not transactional and not group.is_(S.EMPTY):
            return E.unknown_member_id
        if not transactional and group.is_(S.COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    # =================================================================== OffsetFetch
    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None, *, require_stable: bool = False
    ) -> list[tuple[str, list[tuple[int, int, int, str, int]]]]:
        """[(topic, [(partition, offset, leader_epoch, metadata, error)])]; all committed offsets
        when topics is None. Offsets pending in open transactions are not returned; with
        `require_stable` (KIP-447) a partition that has some gets UNSTABLE_OFFSET_COMMIT instead."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and not group.is_(S.DEAD) else {}
        unstable = (-1, -1, "", int(E.unstable_offset_commit))

        def row(topic: str, p: int, found: OffsetCommitValue | None) -> tuple[int, int, int, str, int]:
            if require_stable and self.txn.has(group_id, (topic, p)):
                return (p, *unstable)
            if found is None:
                return (p, -1, -1, "", 0)
            return (p, found.offset, found.leader_epoch, found.metadata, 0)

        if topics is None:
            by_topic: dict[str, list] = {}
            for (t, p), v in sorted(offsets.items()):
                by_topic.setdefault(t, []).append(row(t, p, v))
            return list(by_topic.items())
        return [(topic, [row(topic, p, offsets.get((topic, p))) for p in partitions]) for topic, partitions in topics]

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

    # =================================================================== DeleteGroups
    def delete_group(self, group_id: str, *, token: Any, now: int) -> Result:
        """Answers `token` with an error code."""
        res = Result(group_id)
        if not group_id:
            res.reply(token, int(E.invalid_group_id))
            return res
        group = self.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            res.reply(token, int(E.group_id_not_found))
            return res
        if not group.is_(S.EMPTY):
            res.reply(token, int(E.non_empty_group))
            return res
        # As Kafka: pending transactional offsets do not keep a group from being deleted; the
        # partitions that only have those get a tombstone too, which drops them.
        pending_only = self.txn.partitions(group_id) - group.offsets.keys()
        res.records.extend((OffsetCommitKey(group_id, t, p), None) for (t, p) in sorted(group.offsets))
        res.records.extend((OffsetCommitKey(group_id, t, p), None) for (t, p) in sorted(pending_only))
        res.records.append((GroupMetadataKey(group_id), None))
        for tp in group.offsets.keys() | pending_only:
            self.txn.drop(group_id, tp)
        group.state = S.DEAD
        group.offsets.clear()
        del self.groups[group_id]
        self._drop_deadlines(group_id)  # type: ignore[attr-defined]
        res.then = lambda error, now2: Result(group_id, replies=[(token, store_error(error) if error else 0)])
        return res

    # =================================================================== OffsetDelete
    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]], *, token: Any, now: int) -> Result:
        """Answers `token` with (top-level error, {(topic, partition): error})."""
        res = Result(group_id)
        group = self.groups.get(group_id)
        if not group_id:
            res.reply(token, (int(E.invalid_group_id), {}))
            return res
        if group is None or group.is_(S.DEAD):
            res.reply(token, (int(E.group_id_not_found), {}))
            return res
        errors: dict[tuple[str, int], int] = {}
        if group.is_(S.EMPTY):
            subscribed: set[str] = set()
        elif group.protocol_type == "consumer":
            subscribed = self._subscribed_topics(group) or set()
        else:
            res.reply(token, (int(E.non_empty_group), {}))
            return res
        for topic, partitions in topics:
            for p in partitions:
                if topic in subscribed:
                    errors[(topic, p)] = int(E.group_subscribed_to_topic)
                    continue
                errors[(topic, p)] = 0
                # a tombstone when there is a committed offset or a pending transactional one
                pending = self.txn.has(group_id, (topic, p))
                if group.offsets.pop((topic, p), None) is not None or pending:
                    res.records.append((OffsetCommitKey(group_id, topic, p), None))
                    self.txn.drop(group_id, (topic, p))

        def then(error: int, now2: int) -> Result:
            code = store_error(error) if error else 0
            return Result(group_id, replies=[(token, (code, errors))])

        if res.records:
            res.then = then
        else:
            res.reply(token, (0, errors))
        return res

    def _subscribed_topics(self, group: Group) -> set[str] | None:
        if group.protocol_type != "consumer" or group.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in group.members.values():
            t = subscribed_topics(m.metadata(group.protocol_name))
            if t is None:
                return None
            topics |= t
        return topics

    # =================================================================== expiry
    def expire_offsets(self, now: int) -> list[Result]:
        """Remove expired offsets (tombstones), and Empty groups left without offsets."""
        out = []
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if group.pending_offset_writes:
                continue
            subscribed = self._subscribed_topics(group) if group.is_(S.STABLE) else None
            expired = []
            for (t, p), v in group.offsets.items():
                if v.expire_timestamp >= 0:
                    gone = now >= v.expire_timestamp
                elif group.is_(S.EMPTY):
                    base = group.state_timestamp if group.state_timestamp >= 0 else v.commit_timestamp
                    gone = now - base >= retention
                elif subscribed is not None and t not in subscribed:
                    gone = now - v.commit_timestamp >= retention
                else:
                    gone = False
                if gone and not self.txn.has(group.group_id, (t, p)):  # Kafka waits for the transaction
                    expired.append((t, p))
            res = Result(group.group_id)
            for tp in expired:
                del group.offsets[tp]
                res.records.append((OffsetCommitKey(group.group_id, *tp), None))
            if (
                group.is_(S.EMPTY)
                and not group.offsets
                and not group.members
                and not group.pending_members
                and not self.txn.has_open(group.group_id)  # not while a transaction of it is open
            ):
                group.state = S.DEAD
                del self.groups[group.group_id]
                self._drop_deadlines(group.group_id)  # type: ignore[attr-defined]
                res.records.append((GroupMetadataKey(group.group_id), None))
            if res.records:
                out.append(res)
        return out
