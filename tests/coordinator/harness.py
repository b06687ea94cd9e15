"""A driver for the sans-IO group state machine: fake clock, an in-memory log that
makes every append durable at once (or fails it on demand), and replay checks."""

from __future__ import annotations

from typing import Any

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


class Harness:
    def __init__(self, **config: Any) -> None:
        config.setdefault("initial_rebalance_delay_ms", 0)
        self.state = GroupCoordinatorState(CoordinatorConfig(**config), new_member_id=self._new_id)
        self.now = 1_000_000
        self.log: list[tuple[bytes, bytes | None]] = []
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
                for k, v in res.records:
                    enc = (
                        None
                        if v is None
                        else (encode_group_value(v) if isinstance(k, GroupMetadataKey) else encode_offset_value(v))
                    )
                    self.log.append((encode_key(k), enc))
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
        for k, v in self.log:
            key = decode_key(k)
            st.replay(key, decode_value(key, v))
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
