"""The group coordinator's requests and answers, as the handlers (broker/handlers/k08-k16,
k28, k42, k47) pass them: frozen dataclasses of domain values, no wire entities."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.coordinator.group.records import GroupRecord
from odradek.coordinator.runtime import CoordinatorResult

TopicPartition = tuple[str, int]


class Result(CoordinatorResult[GroupRecord]):
    """What a group operation returns: records for __consumer_offsets, replies, a continuation.
    (A subclass, not an alias: instances of a subscripted generic alias are built through
    typing, several microseconds a request.)"""

    __slots__ = ()


UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """JoinGroup. `rebalance_timeout_ms` < 0: the session timeout (v0 has none);
    `require_known_member_id` (v4+, KIP-394): a new member first gets MEMBER_ID_REQUIRED."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """SyncGroup: the leader's `assignments` by member id (empty from the followers);
    `protocol_type` / `protocol_name` None when the version does not send them."""

    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation: int


@dataclass(frozen=True, slots=True)
class LeaveRequest:
    """LeaveGroup: each member by member id, or by group instance id alone (KIP-345)."""

    group_id: str
    members: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """OffsetCommit, or (`transactional`) TxnOffsetCommit of the producer `producer_id` /
    `producer_epoch`. Generation -1 with no member id: a group without active members (simple
    consumers, admin; TxnOffsetCommit v0-2). `retention_ms` >= 0: an explicit expire time
    (OffsetCommit v2-4)."""

    group_id: str
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    generation: int = NO_GENERATION
    offsets: tuple[OffsetEntry, ...] = ()
    retention_ms: int = -1
    transactional: bool = False
    producer_id: int = -1
    producer_epoch: int = -1


# --------------------------------------------------------------------------- answers


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class LeaveResult:
    error: int
    members: list[tuple[str, str | None, int]] = field(default_factory=list)


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    error: int
    state: str
    protocol_type: str
    protocol_data: str
    members: list[MemberDescription]
