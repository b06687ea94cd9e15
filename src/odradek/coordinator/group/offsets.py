"""Committed offsets of the groups of one shard, sans-IO (Kafka's OffsetMetadataManager):
OffsetCommit and TxnOffsetCommit through one path, OffsetFetch, OffsetDelete, expiry, and
replaying offset records and transaction markers. Groups themselves are classic_groups.py,
which this validates commits against.

Rules follow Kafka's OffsetMetadataManager and ClassicGroup.validateOffsetCommit:
- generation < 0 on an Empty (or missing) group: a simple consumer or the admin client;
  the commit is accepted and the group stays Empty without a protocol type;
- otherwise the member must be known (FENCED_INSTANCE_ID for a stale static member)
  and the generation current; commits during CompletingRebalance get
  REBALANCE_IN_PROGRESS; commits during PreparingRebalance are accepted;
- a transactional commit (TxnOffsetCommit, KIP-98; KIP-447 for the group fields) is
  validated the same way, except that one without member id and generation (v0-2) is
  accepted whatever the group's state and CompletingRebalance is no error;
- offsets enter the cache only once their records are committed; a transactional commit's
  are appended as one transactional batch of the producer and stay pending under its
  producer id until its transaction's marker is in the log: a COMMIT makes them the
  committed ones, except where a plain commit of the same partition is later in the log
  (Kafka orders them by record offset, which stays right after compaction); an ABORT drops
  them. Pending offsets are not fetched (require_stable: UNSTABLE_OFFSET_COMMIT), get a
  tombstone with their partition (OffsetDelete, DeleteGroups), hold back the expiry of their
  partition's offset, and keep their group from dying;
- offsets of Empty groups expire `offsets.retention.minutes` after the group became Empty
  (or after their commit, for groups that never had members); explicit expire timestamps
  (OffsetCommit v2-v4 retention_time) win; a Stable "consumer" group's offsets of topics it
  no longer subscribes to expire from their commit time; an Empty group left without
  offsets dies and gets a tombstone.
"""

from __future__ import annotations

import dataclasses

from odradek.coordinator.group.classic_group import Group, GroupState
from odradek.coordinator.group.classic_groups import ClassicGroups, store_error
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue, subscribed_topics
from odradek.coordinator.group.requests import UNKNOWN_MEMBER_ID, OffsetCommitRequest, Result, TopicPartition
from odradek.protocol.errors import ErrorCode as E

S = GroupState


class PendingTxnOffsets:
    """Offsets committed in open transactions (TxnOffsetCommit), not yet visible: per producer
    id, per group, per partition (Kafka's pendingTransactionalOffsets), and the producer ids
    with pending offsets per group (Kafka 4.4's OpenTransactions: a group whose pending
    partitions were all dropped by tombstones has no open transaction any more)."""

    __slots__ = ("by_producer", "by_group")

    def __init__(self) -> None:
        self.by_producer: dict[int, dict[str, dict[TopicPartition, OffsetCommitValue]]] = {}
        self.by_group: dict[str, set[int]] = {}

    def add(self, producer_id: int, group_id: str, tp: TopicPartition, value: OffsetCommitValue) -> None:
        self.by_producer.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = value
        self.by_group.setdefault(group_id, set()).add(producer_id)

    def has(self, group_id: str, tp: TopicPartition) -> bool:
        """Is an offset of `tp` pending in any open transaction of the group?"""
        return any(tp in self.by_producer.get(pid, {}).get(group_id, {}) for pid in self.by_group.get(group_id, ()))

    def partitions(self, group_id: str) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for pid in self.by_group.get(group_id, ()):
            out.update(self.by_producer.get(pid, {}).get(group_id, {}))
        return out

    def has_open(self, group_id: str) -> bool:
        return bool(self.by_group.get(group_id))

    def drop(self, group_id: str, tp: TopicPartition) -> None:
        """A tombstone of `tp` was written: its pending offsets go too."""
        open_ = self.by_group.get(group_id)
        if open_ is None:
            return
        for pid in list(open_):
            by_group = self.by_producer.get(pid, {})
            offsets = by_group.get(group_id)
            if offsets is not None:
                offsets.pop(tp, None)
                if offsets:
                    continue
                del by_group[group_id]
                if not by_group:
                    del self.by_producer[pid]
            open_.discard(pid)
        if not open_:
            del self.by_group[group_id]

    def end(self, producer_id: int) -> dict[str, dict[TopicPartition, OffsetCommitValue]]:
        """The producer's transaction ended: its pending offsets, by group, leave the store."""
        pending = self.by_producer.pop(producer_id, {})
        for gid in pending:
            open_ = self.by_group.get(gid)
            if open_ is not None:
                open_.discard(producer_id)
                if not open_:
                    del self.by_group[gid]
        return pending


class _InFlight:
    """A TxnOffsetCommit whose records are being appended: if its producer's transaction ends
    meanwhile, the outcome is noted here and applied to its offsets once they are committed."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        self.outcome: bool | None = None


def at_record_offsets(values: dict[TopicPartition, OffsetCommitValue], base_offset: int) -> dict:
    """The values of records appended in this order from `base_offset`, with their log offsets."""
    if base_offset < 0:
        return dict(values)
    return {tp: dataclasses.replace(v, record_offset=base_offset + i) for i, (tp, v) in enumerate(values.items())}


class Offsets:
    """The committed offsets of every group of a shard, and those pending in transactions."""

    def __init__(self, config: GroupConfig, groups: ClassicGroups) -> None:
        self.config = config
        self.groups = groups
        self.committed: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}
        self.pending_writes: dict[str, int] = {}  # commits of each group being appended
        self.pending_txn = PendingTxnOffsets()
        self._txn_writes: dict[int, list[_InFlight]] = {}

    def of(self, group_id: str) -> dict[TopicPartition, OffsetCommitValue]:
        return self.committed.get(group_id, {})

    def holds(self, group_id: str) -> bool:
        """Does anything of offsets keep the group: committed ones, commits being written, or
        ones pending in an open transaction?"""
        return bool(self.committed.get(group_id)) or self.writing(group_id) or self.pending_txn.has_open(group_id)

    def writing(self, group_id: str) -> bool:
        return self.pending_writes.get(group_id, 0) > 0

    def _store(self, group_id: str, tp: TopicPartition, value: OffsetCommitValue) -> None:
        self.committed.setdefault(group_id, {})[tp] = value

    def _remove(self, group_id: str, tp: TopicPartition) -> OffsetCommitValue | None:
        offsets = self.committed.get(group_id)
        if offsets is None:
            return None
        value = offsets.pop(tp, None)
        if not offsets:
            del self.committed[group_id]
        return value

    def _writes(self, group_id: str, delta: int) -> None:
        n = self.pending_writes.get(group_id, 0) + delta
        if n:
            self.pending_writes[group_id] = n
        else:
            self.pending_writes.pop(group_id, None)

    # =================================================================== OffsetCommit, TxnOffsetCommit
    def commit(self, req: OffsetCommitRequest, *, token: object, now: int) -> Result:
        """Answers `token` with {(topic, partition): error_code}."""
        res = Result()
        if req.transactional:
            res.producer_id, res.producer_epoch = req.producer_id, req.producer_epoch
        group_id = req.group_id

        def all_(code: int) -> Result:
            res.reply(token, {(o.topic, o.partition): int(code) for o in req.offsets})
            return res

        if not group_id:
            return all_(E.invalid_group_id)
        group = self.groups.groups.get(group_id)
        created = group is None
        if group is None:
            if req.generation >= 0:
                return all_(E.illegal_generation)
            group = self.groups.simple_group(group_id)
        error = self._validate(group, req)
        if error:
            if created:
                self.groups.delete(group_id)
            return all_(error)
        member = group.members.get(req.member_id)
        if not req.transactional and member is not None and group.state in (S.STABLE, S.PREPARING_REBALANCE):
            self.groups.touch(group, member, now)
        errors: dict[TopicPartition, int] = {}
        values: dict[TopicPartition, OffsetCommitValue] = {}
        expire = now + req.retention_ms if req.retention_ms >= 0 else -1
        for o in req.offsets:
            metadata = o.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors[(o.topic, o.partition)] = int(E.offset_metadata_too_large)
                continue
            values[(o.topic, o.partition)] = OffsetCommitValue(o.offset, metadata, now, o.leader_epoch, expire)
            errors[(o.topic, o.partition)] = 0
        if not values:
            if created:
                self.groups.delete(group_id)
            res.reply(token, errors)
            return res
        res.records.extend((OffsetCommitKey(group_id, t, p), v) for (t, p), v in values.items())
        self._writes(group_id, +1)
        write = None
        if req.transactional:
            write = _InFlight()
            self._txn_writes.setdefault(req.producer_id, []).append(write)

        def then(error: int, now2: int) -> Result:
            self._writes(group_id, -1)
            if write is not None:
                self._forget_write(req.producer_id, write)
            live = self.groups.groups.get(group_id) is group
            if error:
                code = store_error(error)
                errors.update({tp: code for tp in values})
                if live and created and not group.members and not self.holds(group_id):
                    self.groups.delete(group_id)
            elif write is None:
                if live:
                    for tp, v in at_record_offsets(values, res.base_offset).items():
                        self._store(group_id, tp, v)
            else:
                for tp, v in at_record_offsets(values, res.base_offset).items():
                    if write.outcome is None:
                        self.pending_txn.add(req.producer_id, group_id, tp, v)
                    elif write.outcome:  # the transaction committed while these were being written
                        self._materialise(group_id, tp, v)
            out = Result()
            out.reply(token, errors)
            return out

        res.then = then
        return res

    def _forget_write(self, producer_id: int, write: _InFlight) -> None:
        writes = self._txn_writes.get(producer_id, [])
        if write in writes:
            writes.remove(write)
            if not writes:
                del self._txn_writes[producer_id]

    def _validate(self, group: Group, req: OffsetCommitRequest) -> int:
        """Kafka's ClassicGroup.validateOffsetCommit. A transactional commit without member id
        and generation (v0-2) is accepted whatever the group's state, and the group's state is
        not enforced (no REBALANCE_IN_PROGRESS)."""
        if group.is_(S.DEAD):
            return E.coordinator_not_available
        if req.generation < 0 and group.is_(S.EMPTY):
            return E.none
        if req.generation >= 0 or req.member_id != UNKNOWN_MEMBER_ID or req.group_instance_id is not None:
            if req.group_instance_id is not None:
                known = group.static_members.get(req.group_instance_id)
                if known is None:
                    return E.unknown_member_id
                if known != req.member_id:
                    return E.fenced_instance_id
            elif not group.has(req.member_id):
                return E.unknown_member_id
            if req.generation != group.generation:
                return E.illegal_generation
        elif not req.transactional and not group.is_(S.EMPTY):
            return E.unknown_member_id
        if not req.transactional and group.is_(S.COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    # =================================================================== transactions
    def end_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT (or ABORT) marker is in the partition (loading, or written and
        committed since): its pending offsets become the committed ones (or are dropped), and
        its commits still being written follow once written. No records: the marker is the record."""
        for write in self._txn_writes.pop(producer_id, []):
            write.outcome = commit
        pending = self.pending_txn.end(producer_id)
        if commit:
            for group_id, offsets in pending.items():
                for tp, value in offsets.items():
                    self._materialise(group_id, tp, value)

    def _materialise(self, group_id: str, tp: TopicPartition, value: OffsetCommitValue) -> None:
        self.groups.simple_group(group_id, state_timestamp=-1)
        current = self.of(group_id).get(tp)
        if current is None or value.record_offset > current.record_offset:
            self._store(group_id, tp, value)

    # =================================================================== replay
    def replay(
        self, key: OffsetCommitKey, value: OffsetCommitValue | None, record_offset: int, producer_id: int
    ) -> None:
        """An offset record at `record_offset`, of a transactional batch of `producer_id` (-1:
        a plain batch)."""
        tp = (key.topic, key.partition)
        if value is not None and record_offset >= 0:
            value = dataclasses.replace(value, record_offset=record_offset)
        if value is None:
            self.pending_txn.drop(key.group, tp)
            self._remove(key.group, tp)
            group = self.groups.groups.get(key.group)
            if (
                group is not None
                and not group.members
                and group.generation == 0
                and group.protocol_type is None
                and not self.holds(key.group)
            ):
                self.groups.delete(key.group)
            return
        self.groups.simple_group(key.group, state_timestamp=-1)  # a group without members that commits offsets
        if producer_id >= 0:
            self.pending_txn.add(producer_id, key.group, tp, value)
        else:
            self._store(key.group, tp, value)

    # =================================================================== OffsetFetch
    def fetch(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None, *, require_stable: bool = False
    ) -> list[tuple[str, list[tuple[int, int, int, str, int]]]]:
        """[(topic, [(partition, offset, leader_epoch, metadata, error)])]; all committed offsets
        when topics is None. Offsets pending in open transactions are not returned; with
        `require_stable` (KIP-447) a partition that has some gets UNSTABLE_OFFSET_COMMIT instead."""
        group = self.groups.groups.get(group_id)
        offsets = self.of(group_id) if group is not None and not group.is_(S.DEAD) else {}
        unstable = (-1, -1, "", int(E.unstable_offset_commit))

        def row(topic: str, p: int, found: OffsetCommitValue | None) -> tuple[int, int, int, str, int]:
            if require_stable and self.pending_txn.has(group_id, (topic, p)):
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

    # =================================================================== DeleteGroups, OffsetDelete
    def tombstones_of_group(self, group_id: str) -> list[tuple[OffsetCommitKey, None]]:
        """A group is deleted: tombstones for each of its offsets, pending ones included (as
        Kafka: pending transactional offsets do not keep a group from being deleted), which
        leave the cache now."""
        committed = self.committed.pop(group_id, {})
        pending_only = self.pending_txn.partitions(group_id) - committed.keys()
        for tp in committed.keys() | pending_only:
            self.pending_txn.drop(group_id, tp)
        return [(OffsetCommitKey(group_id, t, p), None) for (t, p) in [*sorted(committed), *sorted(pending_only)]]

    def delete(self, group_id: str, topics: list[tuple[str, list[int]]], *, token: object, now: int) -> Result:
        """OffsetDelete; answers `token` with (top-level error, {(topic, partition): error})."""
        res = Result()
        group = self.groups.groups.get(group_id)
        if not group_id:
            res.reply(token, (int(E.invalid_group_id), {}))
            return res
        if group is None or group.is_(S.DEAD):
            res.reply(token, (int(E.group_id_not_found), {}))
            return res
        errors: dict[TopicPartition, int] = {}
        if group.is_(S.EMPTY):
            subscribed: set[str] = set()
        elif group.protocol_type == "consumer":
            subscribed = _subscribed_topics(group) or set()
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
                pending = self.pending_txn.has(group_id, (topic, p))
                if self._remove(group_id, (topic, p)) is not None or pending:
                    res.records.append((OffsetCommitKey(group_id, topic, p), None))
                    self.pending_txn.drop(group_id, (topic, p))

        def then(error: int, now2: int) -> Result:
            out = Result()
            out.reply(token, (store_error(error) if error else 0, errors))
            return out

        if res.records:
            res.then = then
        else:
            res.reply(token, (0, errors))
        return res

    # =================================================================== expiry
    def expire(self, now: int) -> list[Result]:
        """Remove expired offsets (tombstones), and Empty groups left without offsets."""
        out = []
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.groups.values()):
            gid = group.group_id
            if self.writing(gid):
                continue
            subscribed = _subscribed_topics(group) if group.is_(S.STABLE) else None
            expired = []
            for (t, p), v in self.of(gid).items():
                if v.expire_timestamp >= 0:
                    gone = now >= v.expire_timestamp
                elif group.is_(S.EMPTY):
                    base = group.state_timestamp if group.state_timestamp >= 0 else v.commit_timestamp
                    gone = now - base >= retention
                elif subscribed is not None and t not in subscribed:
                    gone = now - v.commit_timestamp >= retention
                else:
                    gone = False
                if gone and not self.pending_txn.has(gid, (t, p)):  # Kafka waits for the transaction
                    expired.append((t, p))
            res = Result()
            for tp in expired:
                self._remove(gid, tp)
                res.records.append((OffsetCommitKey(gid, *tp), None))
            if (
                group.is_(S.EMPTY)
                and not self.of(gid)
                and not group.members
                and not group.pending_members
                and not self.pending_txn.has_open(gid)  # not while a transaction of it is open
            ):
                self.groups.delete(gid)
                res.records.append((GroupMetadataKey(gid), None))
            if res.records:
                out.append(res)
        return out


def _subscribed_topics(group: Group) -> set[str] | None:
    """The topics a "consumer" group's members subscribe to (None: not known)."""
    if group.protocol_type != "consumer" or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for m in group.members.values():
        t = subscribed_topics(m.metadata(group.protocol_name))
        if t is None:
            return None
        topics |= t
    return topics
