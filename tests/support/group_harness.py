"""A driver for the sans-IO group state machine: fake clock, an in-memory log that
makes every append durable at once (or fails it on demand), and replay checks."""

from __future__ import annotations

from typing import Any, NamedTuple

from odradek.coordinator.group.model import GroupState, Result
from odradek.coordinator.group.records import (
    GroupMetadataKey,
    decode_key,
    decode_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
)
from odradek.coordinator.group.state import CoordinatorConfig, GroupCoordinatorState

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
        self.state = GroupCoordinatorState(CoordinatorConfig(**config), new_member_id=self._new_id)
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
                for k, v in res.records:
                    enc = (
                        None
                        if v is None
                        else (encode_group_value(v) if isinstance(k, GroupMetadataKey) else encode_offset_value(v))
                    )
                    self.log.append(LogEntry(encode_key(k), enc, res.producer_id))
        for token, value in res.replies:
            assert token not in self.replies, f"token {token!r} answered twice"
            self.replies[token] = value
        if res.then is not None:
            self.run(res.then(error, self.now))

    def advance(self, ms: int) -> None:
        """Move the clock, firing each deadline at its own time (as a real timer would)."""
        target = self.now + ms
        while (at := self.state.next_deadline()) is not None and at <= target:
            self.now = max(self.now, at)
            for res in self.state.expire(self.now):
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
        self.run(
            self.state.join(
                group,
                member_id,
                instance,
                client,
                "/127.0.0.1",
                session,
                rebalance,
                protocol_type,
                list(protocols),
                require_known_member_id=v4,
                token=token,
                now=self.now,
            )
        )
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
        self.run(
            self.state.sync(
                group,
                generation,
                member_id,
                instance,
                protocol_type,
                protocol_name,
                assignments or {},
                token=token,
                now=self.now,
            )
        )
        return self.replies.get(token)

    def heartbeat(self, group: str, member_id: str, generation: int, instance: str | None = None) -> int:
        token = object()
        self.run(self.state.heartbeat(group, member_id, instance, generation, token=token, now=self.now))
        return self.replies[token]

    def leave(self, group: str, members: list[tuple[str, str | None]]) -> Any:
        token = object()
        self.run(self.state.leave(group, members, token=token, now=self.now))
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
        self.run(
            self.state.commit_offsets(
                group, member_id, instance, generation, offsets, retention_ms=retention_ms, token=token, now=self.now
            )
        )
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
            self.state.commit_txn_offsets(
                group, producer_id, epoch, member_id, instance, generation, offsets, token=token, now=self.now
            )
        )
        return self.replies[token]

    def end_txn(self, producer_id: int = 1000, *, commit: bool) -> None:
        """The transaction coordinator's marker is appended (and committed), then the coordinator told."""
        self.log.append(LogEntry(None, None, producer_id, commit))
        self.state.complete_transaction(producer_id, commit)

    def fetch(self, group: str, tp: tuple[str, int], *, require_stable: bool = False) -> tuple[int, int]:
        """(offset, error) of one partition, as OffsetFetch answers it."""
        ((_, rows),) = self.state.fetch_offsets(group, [(tp[0], [tp[1]])], require_stable=require_stable)
        ((_, offset, _, _, error),) = rows
        return offset, error

    def delete_group(self, group: str) -> int:
        token = object()
        self.run(self.state.delete_group(group, token=token, now=self.now))
        return self.replies[token]

    def delete_offsets(self, group: str, topics: list[tuple[str, list[int]]]) -> Any:
        token = object()
        self.run(self.state.delete_offsets(group, topics, token=token, now=self.now))
        return self.replies[token]

    # ------------------------------------------------------------- replay
    def replayed(self) -> GroupCoordinatorState:
        st = GroupCoordinatorState(self.state.config)
        for offset, (k, v, producer_id, commit) in enumerate(self.log):
            if k is None:
                assert commit is not None
                st.replay_end_transaction(producer_id, commit)
                continue
            key = decode_key(k)
            st.replay(key, decode_value(key, v), offset=offset, producer_id=producer_id)
        return st

    def assert_replay_matches(self) -> None:
        """Replaying the log reproduces every group that is at rest (Stable or Empty)."""
        other = self.replayed()
        for gid, group in self.state.groups.items():
            if group.state in (GroupState.STABLE, GroupState.EMPTY) and not group.pending_offset_writes:
                assert gid in other.groups, f"group {gid} missing after replay"
                assert other.groups[gid].snapshot() == group.snapshot()
        for gid in other.groups:
            assert gid in self.state.groups, f"group {gid} resurrected by replay"
        # offsets pending in open transactions, and where every offset's record is in the log
        assert other.txn.by_producer == self.state.txn.by_producer
        assert other.txn.by_group == self.state.txn.by_group
        for gid, group in self.state.groups.items():
            if gid in other.groups:
                theirs = other.groups[gid].offsets
                assert {tp: v.record_offset for tp, v in theirs.items()} == {
                    tp: v.record_offset for tp, v in group.offsets.items()
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
    assert h.state.groups["g"].state is GroupState.STABLE
    return ids, gen
