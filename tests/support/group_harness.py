"""A driver for one sans-IO group shard (coordinator/group/shard.py): fake clock, an in-memory
log that makes every append durable at once (or fails it on demand), and replay checks."""

from __future__ import annotations

from typing import Any, NamedTuple

from odradek.coordinator.group.classic_group import GroupState
from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.records import serialize_record
from odradek.coordinator.group.requests import (
    HeartbeatRequest,
    JoinRequest,
    LeaveRequest,
    OffsetCommitRequest,
    OffsetEntry,
    Result,
    SyncRequest,
)
from odradek.coordinator.group.shard import GroupShard

RANGE = [("range", b"range-meta")]


class LogEntry(NamedTuple):
    """One record of the in-memory __consumer_offsets (its offset: its index), or a marker."""

    key: bytes | None
    value: bytes | None
    producer_id: int = -1  # of its transactional batch; -1: a plain batch
    commit: bool | None = None  # a marker (COMMIT / ABORT) of producer_id: key is None


class Harness:
    def __init__(self, **config: Any) -> None:
        config.setdefault("initial_rebalance_delay_ms", 0)
        self.shard = GroupShard(GroupConfig(**config), new_member_id=self._new_id)
        self.now = 1_000_000
        self.log: list[LogEntry] = []
        self.replies: dict[Any, Any] = {}
        self.fail_next_append: int = 0
        self._ids = 0

    def _new_id(self, client_id: str) -> str:
        self._ids += 1
        return f"{client_id}-{self._ids}"

    # ------------------------------------------------------------- plumbing
    def run(self, res: Result) -> None:
        error = 0
        if res.records:
            if self.fail_next_append:
                error, self.fail_next_append = self.fail_next_append, 0
            else:
                res.base_offset = len(self.log)
                for record in res.records:
                    self.log.append(LogEntry(*serialize_record(record), res.producer_id))
        for token, value in res.replies:
            assert token not in self.replies, f"token {token!r} answered twice"
            self.replies[token] = value
        if res.then is not None:
            more = res.then(error, self.now)
            if more is not None:
                self.run(more)

    def advance(self, ms: int) -> None:
        """Move the clock, firing each deadline at its own time (as a real timer would)."""
        target = self.now + ms
        while (at := self.shard.next_deadline()) is not None and at <= target:
            self.now = max(self.now, at)
            for res in self.shard.expire(self.now):
                self.run(res)
        self.now = target

    def reply(self, token: Any) -> Any:
        return self.replies.get(token)

    # ------------------------------------------------------------- operations
    def join(
        self,
        token: Any,
        group: str = "g",
        member_id: str = "",
        *,
        instance: str | None = None,
        client: str = "c",
        protocols: list[tuple[str, bytes]] = RANGE,
        session: int = 10000,
        rebalance: int = 30000,
        protocol_type: str = "consumer",
        v4: bool = True,
    ) -> Any:
        req = JoinRequest(
            group, member_id, instance, client, "/127.0.0.1", session, rebalance, protocol_type, tuple(protocols), v4
        )
        self.run(self.shard.join(req, token=token, now=self.now))
        return self.replies.get(token)

    def join_new(self, token: Any, group: str = "g", **kw: Any) -> Any:
        """KIP-394 two-step join: MEMBER_ID_REQUIRED, then join with the given id."""
        first = self.join(("pre", token), group, **kw)
        assert first.error == 79, first
        return self.join(token, group, first.member_id, **kw)

    def sync(
        self,
        token: Any,
        group: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Any:
        req = SyncRequest(group, generation, member_id, instance, protocol_type, protocol_name, assignments or {})
        self.run(self.shard.sync(req, token=token, now=self.now))
        return self.replies.get(token)

    def heartbeat(self, group: str, member_id: str, generation: int, instance: str | None = None) -> int:
        token = object()
        req = HeartbeatRequest(group, member_id, instance, generation)
        self.run(self.shard.heartbeat(req, token=token, now=self.now))
        return self.replies[token]

    def leave(self, group: str, members: list[tuple[str, str | None]]) -> Any:
        token = object()
        self.run(self.shard.leave(LeaveRequest(group, tuple(members)), token=token, now=self.now))
        return self.replies[token]

    def commit(
        self,
        group: str,
        offsets: list[tuple[str, int, int, int, str | None]],
        *,
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
        retention_ms: int = -1,
    ) -> dict:
        token = object()
        req = OffsetCommitRequest(group, member_id, instance, generation, entries(offsets), retention_ms)
        self.run(self.shard.commit_offsets(req, token=token, now=self.now))
        return self.replies[token]

    def txn_commit(
        self,
        group: str,
        offsets: list[tuple[str, int, int, int, str | None]],
        *,
        producer_id: int = 1000,
        epoch: int = 0,
        member_id: str = "",
        generation: int = -1,
        instance: str | None = None,
    ) -> dict:
        """TxnOffsetCommit: answered with {(topic, partition): error}."""
        token = object()
        self.run(
            self.shard.commit_offsets(
                txn_commit_request(group, offsets, producer_id, epoch, member_id, generation, instance),
                token=token,
                now=self.now,
            )
        )
        return self.replies[token]

    def end_txn(self, producer_id: int = 1000, *, commit: bool) -> None:
        """The transaction coordinator's marker is appended (and committed), then the coordinator told."""
        self.log.append(LogEntry(None, None, producer_id, commit))
        self.shard.replay_end_transaction(producer_id, commit)

    def fetch(self, group: str, tp: tuple[str, int], *, require_stable: bool = False) -> tuple[int, int]:
        """(offset, error) of one partition, as OffsetFetch answers it."""
        ((_, rows),) = self.shard.fetch_offsets(group, [(tp[0], [tp[1]])], require_stable=require_stable)
        ((_, offset, _, _, error),) = rows
        return offset, error

    def delete_group(self, group: str) -> int:
        token = object()
        self.run(self.shard.delete_group(group, token=token, now=self.now))
        return self.replies[token]

    def delete_offsets(self, group: str, topics: list[tuple[str, list[int]]]) -> Any:
        token = object()
        self.run(self.shard.delete_offsets(group, topics, token=token, now=self.now))
        return self.replies[token]

    # ------------------------------------------------------------- replay
    def replayed(self) -> GroupShard:
        shard = GroupShard(self.shard.config)
        for offset, (k, v, producer_id, commit) in enumerate(self.log):
            if k is None:
                assert commit is not None
                shard.replay_end_transaction(producer_id, commit)
                continue
            shard.replay(offset, producer_id, k, v)
        return shard

    def assert_replay_matches(self) -> None:
        """Replaying the log reproduces every group that is at rest (Stable or Empty), every
        committed offset (and where its record is in the log), and the pending ones."""
        other = self.replayed()
        for gid, group in self.shard.groups.items():
            if group.state in (GroupState.STABLE, GroupState.EMPTY) and not self.shard.offsets.writing(gid):
                assert gid in other.groups, f"group {gid} missing after replay"
                assert other.groups[gid].snapshot() == group.snapshot()
        for gid in other.groups:
            assert gid in self.shard.groups, f"group {gid} resurrected by replay"
        # offsets pending in open transactions
        assert other.offsets.pending_txn.by_producer == self.shard.offsets.pending_txn.by_producer
        assert other.offsets.pending_txn.by_group == self.shard.offsets.pending_txn.by_group
        for gid in self.shard.groups:
            if gid in other.groups and not self.shard.offsets.writing(gid):
                ours, theirs = self.shard.offsets.of(gid), other.offsets.of(gid)
                assert theirs == ours
                assert {tp: v.record_offset for tp, v in theirs.items()} == {
                    tp: v.record_offset for tp, v in ours.items()
                }


def static_stable(h: Harness, instances=("i0", "i1")) -> tuple[dict[str, str], int]:
    """Static members join (no MEMBER_ID_REQUIRED for them) and sync; returns instance -> member id."""
    for inst in instances:
        h.join(("j", inst), instance=inst, client=inst)
    h.advance(200)  # the initial delay (and its extension) passes
    results = {inst: h.reply(("j", inst)) for inst in instances}
    ids = {inst: r.member_id for inst, r in results.items()}
    gen = results[instances[0]].generation
    assert all(r.error == 0 and r.generation == gen for r in results.values())
    leader = results[instances[0]].leader
    assignment = {mid: f"A-{inst}".encode() for inst, mid in ids.items()}
    for inst, mid in ids.items():
        if mid != leader:
            h.sync(("s", inst), "g", gen, mid, instance=inst)
    h.sync(("s", "leader"), "g", gen, leader, assignment)
    assert h.shard.groups["g"].state is GroupState.STABLE
    return ids, gen


def entries(offsets: list[tuple[str, int, int, int, str | None]]) -> tuple[OffsetEntry, ...]:
    return tuple(OffsetEntry(*o) for o in offsets)


def txn_commit_request(
    group: str,
    offsets: list[tuple[str, int, int, int, str | None]],
    producer_id: int = 1000,
    epoch: int = 0,
    member_id: str = "",
    generation: int = -1,
    instance: str | None = None,
) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group,
        member_id,
        instance,
        generation,
        entries(offsets),
        transactional=True,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
