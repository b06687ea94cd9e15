"""One classic group (Kafka's ClassicGroup, ClassicGroupMember, ClassicGroupState): its
state, generation, protocol, members and static members, and its GroupMetadata record.

Plain data and queries; the rebalance protocol that changes them is classic_groups.py and
classic_join.py. A group's committed offsets are not here (offsets.py). Nothing here knows
about sockets, the event loop or wire entities.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.group.records import GroupMetadataKey, GroupMetadataValue, GroupRecord, MemberMetadata

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member waiting in its first
# join is dropped after this long even while it waits (KIP-394).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


# Kafka's GroupState.validPreviousStates: a transition to the key is legal from these.
VALID_PREVIOUS = {
    GroupState.DEAD: {
        GroupState.STABLE,
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.EMPTY,
        GroupState.DEAD,
    },
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
}


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_token: Any = None  # a JoinGroup waiting for the rebalance to complete
    sync_token: Any = None  # a SyncGroup waiting for the leader's assignment
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        return self.protocols == list(protocols)


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    pending_sync: set[str] = field(default_factory=set)  # joined the generation, no SyncGroup yet
    new_member_added: bool = False
    join_kind: str = ""  # "initial" (group.initial.rebalance.delay.ms) or "normal" while preparing
    initial_remaining: int = 0  # what is left of the rebalance timeout during the initial delay

    # ----------------------------------------------------------------- queries
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader == member_id

    @property
    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        if instance_id is None:
            return False
        known = self.static_members.get(instance_id)
        return known is not None and known != member_id

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Kafka's supportsProtocols: anything non-empty joins an Empty group; otherwise the
        protocol type must match and one protocol must be supported by every member."""
        names = {name for name, _ in protocols}
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        return not self.members or bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """The protocol all members support with the most votes (each votes for its first
        supported candidate in its own preference order); ties go to the first seen."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            vote = next(name for name, _ in m.protocols if name in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        return max(votes.items(), key=lambda kv: kv[1])[0]

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    # ----------------------------------------------------------------- persistence view
    def metadata_record(self, assignment: Mapping[str, bytes] | None = None) -> GroupRecord:
        """The GroupMetadata record of this group (with `assignment` instead of the
        members' current ones when given: the leader's, before it takes effect)."""
        members = tuple(
            MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout,
                m.session_timeout,
                m.metadata(self.protocol_name),
                m.assignment if assignment is None else assignment.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        value = GroupMetadataValue(
            self.protocol_type or "", self.generation, self.protocol_name, self.leader, self.state_timestamp, members
        )
        return GroupMetadataKey(self.group_id), value

    def snapshot(self) -> dict:
        """What survives a restart: compare a live group with its replayed twin (its offsets:
        offsets.py)."""
        return {
            "group_id": self.group_id,
            "state": self.state.value,
            "generation": self.generation,
            "protocol_type": self.protocol_type or None,
            "protocol": self.protocol_name,
            "leader": self.leader,
            "state_timestamp": self.state_timestamp if self.state is GroupState.EMPTY else None,
            "members": [
                (
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout,
                    m.session_timeout,
                    m.metadata(self.protocol_name),
                    m.assignment,
                )
                for m in sorted(self.members.values(), key=lambda m: m.member_id)
            ],
            "static_members": dict(sorted(self.static_members.items())),
        }
