"""CreateTopics (key 19), v2-7.

Per topic: legal name (INVALID_TOPIC_EXCEPTION), not existing
(TOPIC_ALREADY_EXISTS), partitions >= 1 or -1 for num.partitions
(INVALID_PARTITIONS), replication factor -1 or within the live brokers
(INVALID_REPLICATION_FACTOR), manual assignments naming live brokers
(INVALID_REPLICA_ASSIGNMENT), configs known and valid (INVALID_CONFIG).
validate_only checks without creating. v5+ returns the topic id, partition count,
replication factor and the effective configs. Authorization: CREATE on the cluster or on the
topic (TOPIC_AUTHORIZATION_FAILED, "Authorization failed."); the new topic's configs only with
DESCRIBE_CONFIGS on it (else topic_config_error_code TOPIC_AUTHORIZATION_FAILED, no configs).
"""

from __future__ import annotations

import uuid

from odradek.broker.quotas.manager import THROTTLING_QUOTA_EXCEEDED_MESSAGE, MutationQuota
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.assignment import AssignmentError
from odradek.cluster.metadata import topic_name_problem
from odradek.cluster.store import MetadataTimeout, MetadataUnavailable, TopicExistsError
from odradek.protocol.constants import ZERO_UUID
from odradek.protocol.errors import ErrorCode, PolicyViolationError


@handles(19, 2, 7)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    live = set(s.topics.live_brokers)
    results = []
    seen: set[str] = set()
    names = {t.name for t in req.topics}
    may_create_any = ctx.authorized(AclOperation.CREATE, ResourceType.CLUSTER)
    creatable = names if may_create_any else ctx.authorized_names(AclOperation.CREATE, ResourceType.TOPIC, names)
    describable = ctx.authorized_names(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    quota = MutationQuota(s.client_quotas(), ctx.connection.principal, ctx.client_id, ctx.api_version >= 6)
    for t in req.topics:
        code, message = 0, None
        partitions = t.num_partitions if t.num_partitions != -1 else s.config["num.partitions"]
        rf = t.replication_factor if t.replication_factor != -1 else s.config["default.replication.factor"]
        configs = {c.name: c.value for c in t.configs}
        assignment: list[tuple[int, ...]] = []
        if t.name in seen:
            code, message = ErrorCode.invalid_request, f"topic {t.name} appears twice in the request"
        elif t.name not in creatable:
            code, message = ErrorCode.topic_authorization_failed, "Authorization failed."
        elif problem := topic_name_problem(t.name):
            code, message = ErrorCode.invalid_topic_exception, problem
        elif t.name in s.snapshot.topics:
            code, message = ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists."
        elif t.assignments:
            assignment = [tuple(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition_index)]
            bad = sorted({b for replicas in assignment for b in replicas if b not in live})
            if t.num_partitions != -1 or t.replication_factor != -1:
                code, message = (
                    ErrorCode.invalid_request,
                    "both assignments and partitions/replication factor were given",
                )
            elif bad:
                code, message = ErrorCode.invalid_replica_assignment, f"unknown brokers in assignment: {bad}"
            elif sorted(a.partition_index for a in t.assignments) != list(range(len(assignment))):
                code, message = (
                    ErrorCode.invalid_replica_assignment,
                    "Partitions should be a consecutive 0-based integer sequence",
                )
            elif any(len(set(r)) != len(r) for r in assignment):
                code, message = (
                    ErrorCode.invalid_replica_assignment,
                    "Duplicate brokers not allowed in replica assignment",
                )
            elif len({len(r) for r in assignment}) > 1 or not assignment[0]:
                code, message = (
                    ErrorCode.invalid_replica_assignment,
                    "All partitions should have the same number of replicas",
                )
            else:
                partitions = len(assignment)
                rf = len(assignment[0])
        elif partitions < 1:
            code, message = ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
        elif rf < 1:
            code, message = ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
        elif rf > len(live):
            code, message = (
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {rf} larger than available brokers: {len(live)}.",
            )
        else:
            try:
                assignment = s.topics.assignment(partitions, rf)
            except AssignmentError as e:  # some brokers with a rack, some without: Kafka's UNKNOWN_SERVER_ERROR
                code, message = ErrorCode.unknown_server_error, str(e)
        if not code:
            problem = s.config_admin.validate_topic_configs(configs)
            if problem:
                code, message = ErrorCode.invalid_config, problem
        if not code and (problem := s.topics.room_problem(assignment)):
            code, message = ErrorCode.policy_violation, problem  # (validate_only too, as Kafka's checks)
        seen.add(t.name)
        # validate_only answers with an id as Kafka does (one drawn for the topic that was not created)
        topic_id = uuid.uuid4() if not code and req.validate_only else ZERO_UUID
        if not code and not req.validate_only and not quota.take(len(assignment)):
            code, message = ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE
        if not code and not req.validate_only:
            try:
                topic_id = (await s.topics.create_topic(t.name, assignment, configs)).topic_id
            except TopicExistsError as e:  # created meanwhile, or being deleted (Kafka's answers)
                code, message = ErrorCode.topic_already_exists, str(e)
            except PolicyViolationError as e:  # no room on this broker any more (topic_admin.py)
                code, message = ErrorCode.policy_violation, str(e)
            except MetadataUnavailable as e:  # ZooKeeper failed under the write: Kafka's answer to a ZooKeeper error
                code, message = ErrorCode.unknown_server_error, f"creating {t.name} failed: {e}"
            except MetadataTimeout as e:  # written, its leaders not seen in time
                code, message = ErrorCode.request_timed_out, f"creating {t.name}: {e}"
            except Exception as e:
                code, message = ErrorCode.kafka_storage_error, f"creating {t.name} failed: {e}"
        ok = not code
        # the new topic's configs only to who may DESCRIBE_CONFIGS it (else TOPIC_AUTHORIZATION_FAILED for them)
        config_error = ErrorCode.topic_authorization_failed if ok and t.name not in describable else 0
        described = _described(ctx, configs) if ok and ctx.api_version >= 5 and not config_error else ()
        results.append(
            ctx.nested(
                "CreatableTopicResult",
                name=t.name,
                topic_id=topic_id,
                error_code=code,
                error_message=message,
                topic_config_error_code=config_error,
                num_partitions=partitions if ok else -1,
                replication_factor=rf if ok else -1,
                configs=described,
            )
        )
    quota.finish(ctx.connection)
    return ctx.respond(throttle_time=0, topics=tuple(results))


def _described(ctx: RequestContext, overrides: dict) -> tuple:
    """Every config of the new topic, as DescribeConfigs would show it (v5+)."""
    return tuple(
        ctx.nested(
            "CreatableTopicConfigs",
            name=e.name,
            value=e.value,
            read_only=False,
            config_source=e.source,
            is_sensitive=False,
        )
        for e in ctx.services.config_admin.topic_entries(overrides)
    )
