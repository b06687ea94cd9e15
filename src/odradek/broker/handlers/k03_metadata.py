"""Metadata (key 3), v0-13.

Brokers, the cluster id and controller, and for each requested topic (all topics
when the list is null; none when it is empty, v1+) its stable topic id and
partitions with leader, replicas and ISR. Unknown topics are created when
`auto.create.topics.enable` is on and the request allows it (v4+ flag; always
for older versions), as Kafka does; invalid names get INVALID_TOPIC_EXCEPTION, a
`default.replication.factor` above the live brokers INVALID_REPLICATION_FACTOR, a topic
created meanwhile (or being deleted) LEADER_NOT_AVAILABLE, as Kafka 3.9's ZooKeeper mode.
v10+ may ask by topic id. Internal topics are listed with is_internal. A partition
without a leader (in a cluster: its in-sync replicas are down) has LEADER_NOT_AVAILABLE.
Authorization as Kafka's: a topic the principal may not DESCRIBE is left out of an all-topics
answer and answered TOPIC_AUTHORIZATION_FAILED (no id, no partitions, whether it exists or not)
when named (by id: with its id); auto-creation needs CREATE on the cluster or on the topic
(TOPIC_AUTHORIZATION_FAILED otherwise). Authorized operations (topics v8+, the cluster v8-10,
0 without DESCRIBE on it) when asked, from the ACLs (every supported one with no authorizer).
Responses are written by protocol/metadata_codec.py, not through kio entities, and a
topic's encoded bytes are kept (per version and authorized-operations flag) until the
metadata changes: a topic of 1,000 partitions is then a copy, not 1,000 entities per request.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, NamedTuple

from odradek.broker.registry import RequestContext, VersionCodec, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.assignment import AssignmentError
from odradek.cluster.metadata import INTERNAL_TOPICS, ClusterSnapshot, TopicInfo, topic_name_problem
from odradek.cluster.store import MetadataUnavailable, TopicExistsError
from odradek.protocol.constants import UNKNOWN_OPERATIONS, ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.protocol.metadata_codec import (
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    encode_metadata_response,
    encode_topic,
)

log = logging.getLogger("odradek.broker.metadata")


class MetadataAnswer(NamedTuple):
    brokers: tuple[MetadataBroker, ...]
    cluster_id: str | None
    controller_id: int
    topics: list[bytes]  # each encoded for the request's version
    cluster_authorized_operations: int


def _encode(version: int, a: MetadataAnswer) -> tuple[list[Any], int]:
    body = encode_metadata_response(
        version, a.brokers, a.cluster_id, a.controller_id, a.topics, a.cluster_authorized_operations
    )
    return [body], len(body)


@handles(3, 0, 13, codecs={range(0, 14): VersionCodec(encode=_encode)})
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    snap = s.snapshot
    v = ctx.api_version
    results: list[bytes] = []
    with_ops = getattr(req, "include_topic_authorized_operations", False)

    def ops_of(name: str) -> int:
        return ctx.authorized_operations(ResourceType.TOPIC, name) if with_ops else UNKNOWN_OPERATIONS

    def described(name: str) -> bool:
        return ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    unauthorized = ErrorCode.topic_authorization_failed
    if req.topics is None or (v == 0 and not req.topics):
        # every topic the principal may describe; the others are left out silently
        wanted: list[tuple[str | None, uuid.UUID | None]] = [
            (t.name, None)
            for t in sorted(snap.topics.values(), key=lambda t: t.name)
            if s.acls is None or described(t.name)
        ]
        auto = False
    else:
        wanted = [(getattr(t, "name", None), getattr(t, "topic_id", None)) for t in req.topics]
        auto = getattr(req, "allow_auto_topic_creation", True) and s.config["auto.create.topics.enable"]
    may_create_any = ctx.authorized(AclOperation.CREATE, ResourceType.CLUSTER)
    for name, topic_id in wanted:
        if name is None and topic_id not in (None, ZERO_UUID):
            info = snap.topic_by_id(topic_id)
            if info is None:
                results.append(_topic_error(v, ErrorCode.unknown_topic_id, None, UNKNOWN_OPERATIONS, topic_id))
                continue
            if not described(info.name):  # topic ids are not secret: Kafka answers the id
                results.append(_topic_error(v, unauthorized, None, UNKNOWN_OPERATIONS, topic_id))
                continue
            name = info.name
        else:
            if name is not None and not described(name):  # nothing said about its existence
                results.append(_topic_error(v, unauthorized, name, UNKNOWN_OPERATIONS))
                continue
            info = snap.topics.get(name) if name is not None else None
        ops = ops_of(name) if name is not None else UNKNOWN_OPERATIONS
        if (
            info is None
            and auto
            and name is not None
            and not may_create_any
            and not ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, name)
        ):
            results.append(_topic_error(v, unauthorized, name, UNKNOWN_OPERATIONS, internal=name in INTERNAL_TOPICS))
            continue
        if info is None:
            problem = topic_name_problem(name)
            if problem or name is None:
                results.append(_topic_error(v, ErrorCode.invalid_topic_exception, name, ops))
                continue
            if not auto or name.startswith("__"):
                results.append(_topic_error(v, ErrorCode.unknown_topic_or_partition, name, ops))
                continue
            rf, live = s.config["default.replication.factor"], len(s.topics.live_brokers)
            if rf > live:  # Kafka's INVALID_REPLICATION_FACTOR (ZooKeeper mode), nothing created
                log.info(
                    "not auto-creating topic %s: replication factor %d larger than available brokers: %d",
                    name,
                    rf,
                    live,
                )
                results.append(_topic_error(v, ErrorCode.invalid_replication_factor, name, ops))
                continue
            try:
                assignment = s.topics.assignment(s.config["num.partitions"], rf)
                info = await s.topics.create_topic(name, assignment, {})
            except TopicExistsError:  # created meanwhile, or being deleted: Kafka answers LEADER_NOT_AVAILABLE
                results.append(_topic_error(v, ErrorCode.leader_not_available, name, ops))
                continue
            except AssignmentError as e:  # some brokers with a rack, some without: Kafka passes its error on
                log.warning("not auto-creating topic %s: %s", name, e)
                results.append(_topic_error(v, ErrorCode.unknown_server_error, name, ops))
                continue
            except MetadataUnavailable as e:  # ZooKeeper failed under the write: Kafka passes its error on
                log.warning("auto-creating topic %s failed: %s", name, e)
                results.append(_topic_error(v, ErrorCode.unknown_server_error, name, ops))
                continue
            except Exception:  # a storage failure (offline dir) must not break the request
                log.exception("auto-creating topic %s failed", name)
                results.append(_topic_error(v, ErrorCode.kafka_storage_error, name, ops))
                continue
            # Kafka 4 answers the creating request UNKNOWN_TOPIC_OR_PARTITION (its controller creates the
            # topic a moment later); a single node has it and its leader at once (docs/compatibility.md).
        results.append(_TOPICS.get(snap, v, ops, info))
    snap = s.snapshot
    brokers = tuple(
        MetadataBroker(b.node_id, b.host, b.port, b.rack)
        for b in (x.at(ctx.connection.listener_name) for x in snap.brokers)
        if b is not None
    )
    cluster_ops = UNKNOWN_OPERATIONS
    if getattr(req, "include_cluster_authorized_operations", False):
        described_cluster = ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER)
        cluster_ops = ctx.authorized_operations(ResourceType.CLUSTER) if described_cluster else 0
    return MetadataAnswer(brokers, s.cluster_id, snap.controller_id, results, cluster_ops)


class _EncodedTopics:
    """Each topic's encoded bytes by (topic, version, authorized operations), kept while the
    metadata snapshot they came from is the broker's current one: a snapshot is immutable, and
    every change of the metadata is a new one, so a new snapshot empties the cache. An entry
    holds its TopicInfo and answers only for that very object."""

    def __init__(self) -> None:
        self._snapshot: ClusterSnapshot | None = None
        self._encoded: dict[tuple[int, int, int], tuple[TopicInfo, bytes]] = {}

    def get(self, snap: ClusterSnapshot, version: int, ops: int, info: TopicInfo) -> bytes:
        if snap is not self._snapshot:
            self._snapshot = snap
            self._encoded = {}
        k = (id(info), version, ops)
        hit = self._encoded.get(k)
        if hit is not None and hit[0] is info:
            return hit[1]
        data = encode_topic(version, _topic(info, ops))
        self._encoded[k] = (info, data)
        return data


_TOPICS = _EncodedTopics()


def _topic(info: TopicInfo, ops: int) -> MetadataTopic:
    parts = tuple(
        MetadataPartition(
            ErrorCode.leader_not_available if p.leader < 0 else 0,
            p.partition,
            p.leader,
            p.leader_epoch,
            p.replicas,
            p.isr,
            p.offline_replicas,
        )
        for p in info.partitions
    )
    return MetadataTopic(0, info.name, info.topic_id, info.internal, parts, ops)


def _topic_error(
    v: int, code: ErrorCode, name: str | None, ops: int, topic_id: uuid.UUID | None = None, *, internal: bool = False
) -> bytes:
    topic = MetadataTopic(code, name if name is not None else "", topic_id or ZERO_UUID, internal, (), ops)
    return encode_topic(v, topic)
