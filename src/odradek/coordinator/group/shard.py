"""One shard of the group coordinator: the state of one partition of `__consumer_offsets`
(Kafka's GroupCoordinatorShard), a `Shard` of coordinator/runtime.py.

It composes plain objects: `classic` (ClassicGroups: the groups of the classic protocol,
their rebalances and deadlines; classic_groups.py, classic_join.py) and `offsets` (Offsets:
committed and transactional offsets; offsets.py), and routes the operations and the records
of the partition to them. What spans both lives here: deleting a group (DeleteGroups), and
a group tombstone that leaves a group with offsets Empty. Next-generation (KIP-848) and share
groups would be more such objects beside `classic`.

Operations are sans-IO, as everything under it: each takes the request, a `token` for the
waiting answer and the time `now`, and returns a Result (records, replies, continuation).
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.coordinator.group import classic_join
from odradek.coordinator.group.classic_group import Group, GroupState
from odradek.coordinator.group.classic_groups import ClassicGroups, default_member_id, store_error
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.offsets import Offsets
from odradek.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
)
from odradek.coordinator.group.requests import (
    GroupDescription,
    HeartbeatRequest,
    JoinRequest,
    LeaveRequest,
    OffsetCommitRequest,
    Result,
    SyncRequest,
)
from odradek.protocol.errors import ErrorCode as E


class GroupShard:
    def __init__(self, config: GroupConfig, *, new_member_id: Callable[[str], str] = default_member_id) -> None:
        self.config = config
        self.classic = ClassicGroups(config, new_member_id=new_member_id)
        self.offsets = Offsets(config, self.classic)

    @property
    def groups(self) -> dict[str, Group]:
        return self.classic.groups

    # =================================================================== operations
    def join(self, req: JoinRequest, *, token: object, now: int) -> Result:
        return classic_join.join(self.classic, req, token=token, now=now, holds_offsets=self.offsets.holds)

    def sync(self, req: SyncRequest, *, token: object, now: int) -> Result:
        return self.classic.sync(req, token=token, now=now)

    def heartbeat(self, req: HeartbeatRequest, *, token: object, now: int) -> Result:
        return self.classic.heartbeat(req, token=token, now=now)

    def leave(self, req: LeaveRequest, *, token: object, now: int) -> Result:
        return self.classic.leave(req, token=token, now=now)

    def commit_offsets(self, req: OffsetCommitRequest, *, token: object, now: int) -> Result:
        """OffsetCommit and TxnOffsetCommit; answers `token` with {(topic, partition): error_code}."""
        return self.offsets.commit(req, token=token, now=now)

    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None, *, require_stable: bool = False
    ) -> list[tuple[str, list[tuple[int, int, int, str, int]]]]:
        return self.offsets.fetch(group_id, topics, require_stable=require_stable)

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]], *, token: object, now: int) -> Result:
        return self.offsets.delete(group_id, topics, token=token, now=now)

    def delete_group(self, group_id: str, *, token: object, now: int) -> Result:
        """DeleteGroups of one Empty group: tombstones for its offsets and its metadata;
        answers `token` with an error code once they are committed."""
        res = Result()
        if not group_id:
            res.reply(token, int(E.invalid_group_id))
            return res
        group = self.classic.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            res.reply(token, int(E.group_id_not_found))
            return res
        if not group.is_(GroupState.EMPTY):
            res.reply(token, int(E.non_empty_group))
            return res
        res.records.extend(self.offsets.tombstones_of_group(group_id))
        res.records.append((GroupMetadataKey(group_id), None))
        self.classic.delete(group_id)

        def then(error: int, now: int) -> Result:
            out = Result()
            out.reply(token, store_error(error) if error else 0)
            return out

        res.then = then
        return res

    def describe_group(self, group_id: str) -> GroupDescription:
        return self.classic.describe_group(group_id)

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> list[tuple[str, str, str]]:
        return self.classic.list_groups(states, types)

    def expire_offsets(self, now: int) -> list[Result]:
        return self.offsets.expire(now)

    # =================================================================== the runtime's Shard
    def replay(self, offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        k = decode_key(key)
        self.replay_record(k, decode_value(k, value), offset=offset, producer_id=producer_id)

    def replay_record(
        self,
        key: GroupMetadataKey | OffsetCommitKey,
        value: GroupMetadataValue | OffsetCommitValue | None,
        *,
        offset: int = -1,
        producer_id: int = -1,
    ) -> None:
        """One decoded record of the partition (at `offset`, of a transactional batch of
        `producer_id`; -1: a plain batch)."""
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            self.offsets.replay(key, value, offset, producer_id)
            return
        assert value is None or isinstance(value, GroupMetadataValue)
        self.classic.replay(key, value)
        if value is None and self.offsets.of(key.group):
            self.classic.simple_group(key.group)  # deleted as a group, not its offsets: Empty

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        self.offsets.end_transaction(producer_id, commit)

    def on_loaded(self, now: int) -> None:
        self.classic.loaded(now)

    def on_unloaded(self) -> list[tuple[object, object]]:
        return self.classic.waiting_replies(int(E.not_coordinator))

    def next_deadline(self) -> int | None:
        return self.classic.timer.next_deadline()

    def expire(self, now: int) -> list[Result]:
        return self.classic.timer.expire(now)
