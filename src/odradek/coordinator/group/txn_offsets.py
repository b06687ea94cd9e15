"""Offsets committed in transactions (TxnOffsetCommit, KIP-98; KIP-447 for the group fields), as a
mixin of the group state machine (see rebalance.py for the conventions: Results, tokens, `now`).

Rules follow Kafka's OffsetMetadataManager (commitTransactionalOffset, replay with a producer id,
replayEndTransactionMarker) and ClassicGroup.validateOffsetCommit:
- the group is validated as for OffsetCommit, except that a request without member id and
  generation (v0-2) is accepted whatever the group's state and CompletingRebalance is no
  error; an unknown group is created (empty, no protocol type) when the generation is < 0,
  ILLEGAL_GENERATION otherwise;
- the offsets are appended to the group's partition of __consumer_offsets as one transactional
  batch of the producer (its id and epoch, base sequence 0 as Kafka writes it: the broker
  checks no sequence of the coordinator's batches); once durable they are pending under the producer id, and
  OffsetFetch does not return them (require_stable: UNSTABLE_OFFSET_COMMIT);
- `complete_transaction(producer_id, commit)` runs once the transaction's marker is committed
  to that partition: a commit moves the producer's pending offsets into their groups' committed
  offsets, except where a plain commit of the same partition is later in the log (Kafka orders
  them by record offset, which stays right after compaction); an abort drops them;
- loading replays the same: records of transactional batches are pending until the producer's
  marker is read; a transaction still open at the end of the log stays pending;
- a tombstone of a partition (OffsetDelete, DeleteGroups) drops its pending offsets too (see
  offsets.py for expiry, which waits for open transactions).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from odradek.coordinator.group.model import Group, PendingTxnOffsets, Result, TopicPartition
from odradek.coordinator.group.offsets import CommitEntry, OffsetsMixin, at_record_offsets, store_error
from odradek.coordinator.group.records import OffsetCommitKey, OffsetCommitValue
from odradek.protocol.errors import ErrorCode as E


class _InFlight:
    """A TxnOffsetCommit whose records are being appended: if its producer's transaction ends
    meanwhile, the outcome is noted here and applied to its offsets once they are durable."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        self.outcome: bool | None = None


class TxnOffsetsMixin(OffsetsMixin):
    txn: PendingTxnOffsets
    _txn_writes: dict[int, list[_InFlight]]

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation: int,
        offsets: list[CommitEntry],
        *,
        token: Any,
        now: int,
    ) -> Result:
        """Answers `token` with {(topic, partition): error_code}."""
        res = Result(group_id, producer_id=producer_id, producer_epoch=producer_epoch)

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
        error = self._validate_commit(group, member_id, group_instance_id, generation, transactional=True)
        if error:
            if created:
                del self.groups[group_id]
            return all_(error)
        errors: dict[TopicPartition, int] = {}
        values: dict[TopicPartition, OffsetCommitValue] = {}
        for topic, partition, offset, leader_epoch, metadata in offsets:
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors[(topic, partition)] = int(E.offset_metadata_too_large)
                continue
            values[(topic, partition)] = OffsetCommitValue(offset, metadata, now, leader_epoch)
            errors[(topic, partition)] = 0
        if not values:
            if created:
                del self.groups[group_id]
            res.reply(token, errors)
            return res
        res.records.extend((OffsetCommitKey(group_id, t, p), v) for (t, p), v in values.items())
        group.pending_offset_writes += 1
        write = _InFlight()
        self._txn_writes.setdefault(producer_id, []).append(write)

        def then(error: int, now2: int) -> Result:
            out = Result(group_id)
            group.pending_offset_writes -= 1
            writes = self._txn_writes.get(producer_id, [])
            if write in writes:
                writes.remove(write)
                if not writes:
                    del self._txn_writes[producer_id]
            if error:
                code = store_error(error)
                errors.update({tp: code for tp in values})
                if (
                    created
                    and self.groups.get(group_id) is group
                    and not group.offsets
                    and not group.members
                    and group.pending_offset_writes == 0
                    and not self.txn.has_open(group_id)
                ):
                    del self.groups[group_id]
            else:
                stored = at_record_offsets(values, res.base_offset)
                if write.outcome is None:
                    for tp, v in stored.items():
                        self.txn.add(producer_id, group_id, tp, v)
                elif write.outcome:  # the transaction committed while these were being written
                    for tp, v in stored.items():
                        self._materialise(group_id, tp, v)
            out.reply(token, errors)
            return out

        res.then = then
        return res

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT (or ABORT) marker is in this partition's log: its pending
        offsets become the committed ones (or are dropped). No records: the marker is the record."""
        for write in self._txn_writes.pop(producer_id, []):
            write.outcome = commit
        self.replay_end_transaction(producer_id, commit)

    # =================================================================== replay
    def replay_offset_record(
        self, key: OffsetCommitKey, value: OffsetCommitValue | None, record_offset: int, producer_id: int
    ) -> None:
        """An offset record of __consumer_offsets at `record_offset`, of a transactional batch of
        `producer_id` (-1: a plain batch)."""
        tp = (key.topic, key.partition)
        if value is not None and record_offset >= 0:
            value = dataclasses.replace(value, record_offset=record_offset)
        if value is None:
            self.txn.drop(key.group, tp)
            group = self.groups.get(key.group)
            if group is not None:
                group.offsets.pop(tp, None)
                if (
                    not group.offsets
                    and not group.members
                    and group.generation == 0
                    and group.protocol_type is None
                    and not self.txn.has_open(key.group)
                ):
                    del self.groups[key.group]
            return
        if key.group not in self.groups:  # a group without members that commits offsets
            self.groups[key.group] = Group(key.group)
        if producer_id >= 0:
            self.txn.add(producer_id, key.group, tp, value)
        else:
            self.groups[key.group].offsets[tp] = value

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's marker (a control batch) in __consumer_offsets."""
        pending = self.txn.end(producer_id)
        if commit:
            for group_id, offsets in pending.items():
                for tp, value in offsets.items():
                    self._materialise(group_id, tp, value)

    def _materialise(self, group_id: str, tp: TopicPartition, value: OffsetCommitValue) -> None:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        current = group.offsets.get(tp)
        if current is None or value.record_offset > current.record_offset:
            group.offsets[tp] = value
