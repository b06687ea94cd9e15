"""What the group API handlers (k08-k16, k28, k42, k47) share: entity building, and the one
parser and response builder of OffsetCommit (k08) and TxnOffsetCommit (k28)."""

from __future__ import annotations

from typing import Any

from odradek.broker.registry import RequestContext, make
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator.group.requests import OffsetEntry, TopicPartition
from odradek.protocol.errors import ErrorCode


def nested(ctx: RequestContext, class_name: str, **fields: Any) -> Any:
    """Like ctx.nested, but a field may be called `name` (topic entries)."""
    return make(getattr(ctx.module, class_name), **fields)


def offsets_to_commit(ctx: RequestContext, req: Any) -> tuple[tuple[OffsetEntry, ...], dict[TopicPartition, int]]:
    """The offsets of an OffsetCommit or TxnOffsetCommit request, and the partitions refused
    before the group is consulted: UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the
    metadata does not have, as in Kafka (committing offsets of an unknown topic fails), and
    TOPIC_AUTHORIZATION_FAILED before that for a topic the principal may not READ."""
    topics_known = ctx.services.snapshot.topics
    readable = ctx.authorized_names(AclOperation.READ, ResourceType.TOPIC, {t.name for t in req.topics})
    unknown: dict[TopicPartition, int] = {}
    entries = []
    for t in req.topics:
        info = topics_known.get(t.name)
        for p in t.partitions:
            if t.name not in readable:
                unknown[(t.name, p.partition_index)] = ErrorCode.topic_authorization_failed
                continue
            if info is None or not 0 <= p.partition_index < len(info.partitions):
                unknown[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
                continue
            entries.append(
                OffsetEntry(
                    t.name,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                )
            )
    return tuple(entries), unknown


def all_partitions(req: Any, code: int) -> dict[TopicPartition, int]:
    """Every partition of an OffsetCommit or TxnOffsetCommit request answered `code`."""
    return {(t.name, p.partition_index): code for t in req.topics for p in t.partitions}


def offset_commit_topics(ctx: RequestContext, req: Any, errors: dict[TopicPartition, int], prefix: str) -> tuple:
    """The response's topics (`prefix`: "OffsetCommit" or "TxnOffsetCommit"), one error per
    partition of the request."""
    return tuple(
        nested(
            ctx,
            f"{prefix}ResponseTopic",
            name=t.name,
            partitions=tuple(
                nested(
                    ctx,
                    f"{prefix}ResponsePartition",
                    partition_index=p.partition_index,
                    error_code=errors.get((t.name, p.partition_index), 0),
                )
                for p in t.partitions
            ),
        )
        for t in req.topics
    )
