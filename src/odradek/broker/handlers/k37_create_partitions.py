"""CreatePartitions (key 37), v0-3: grow a topic to `count` partitions.

Fewer or equal partitions: INVALID_PARTITIONS; unknown topic:
UNKNOWN_TOPIC_OR_PARTITION; assignments naming unknown brokers:
INVALID_REPLICA_ASSIGNMENT; validate_only checks without changing anything.
Without ALTER on the topic: TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
"""

from __future__ import annotations

from odradek.broker.quotas.manager import THROTTLING_QUOTA_EXCEEDED_MESSAGE, MutationQuota
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.cluster.assignment import AssignmentError
from odradek.cluster.store import MetadataTimeout, MetadataUnavailable
from odradek.protocol.errors import ErrorCode, PolicyViolationError


@handles(37, 0, 3)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    live = set(s.topics.live_brokers)
    results = []
    quota = MutationQuota(s.client_quotas(), ctx.connection.principal, ctx.client_id, ctx.api_version >= 3)
    alterable = ctx.authorized_names(AclOperation.ALTER, ResourceType.TOPIC, {t.name for t in req.topics})
    for t in req.topics:
        info = s.snapshot.topics.get(t.name)
        code, message = 0, None
        new = t.count - len(info.partitions) if info is not None else 0
        if t.name not in alterable:  # whether it exists or not
            code, message = ErrorCode.topic_authorization_failed, None
        elif info is None:
            code, message = ErrorCode.unknown_topic_or_partition, f"The topic '{t.name}' does not exist."
        elif new <= 0:
            code, message = (
                ErrorCode.invalid_partitions,
                f"Topic currently has {len(info.partitions)} partitions, "
                f"which is higher than or equal to the requested {t.count}.",
            )
        elif t.assignments and any(b not in live for a in t.assignments for b in a.broker_ids):
            code, message = ErrorCode.invalid_replica_assignment, "assignment names unknown brokers"
        elif t.assignments and len(t.assignments) != new:
            code, message = (
                ErrorCode.invalid_replica_assignment,
                f"Increasing the number of partitions by {new} but {len(t.assignments)} assignments provided.",
            )
        elif not req.validate_only and not quota.take(new):
            code, message = ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE
        elif not req.validate_only:
            try:
                if t.assignments:
                    assignment = [tuple(a.broker_ids) for a in t.assignments]
                else:
                    assignment = s.topics.assignment(new, info.replication_factor, first_partition=len(info.partitions))
                await s.topics.create_partitions(t.name, assignment)
            except AssignmentError as e:  # some brokers with a rack, some without: Kafka's UNKNOWN_SERVER_ERROR
                code, message = ErrorCode.unknown_server_error, str(e)
            except PolicyViolationError as e:  # no room for them on this broker (topic_admin.py)
                code, message = ErrorCode.policy_violation, str(e)
            except MetadataUnavailable as e:  # ZooKeeper failed under the write: Kafka's answer to a ZooKeeper error
                code, message = ErrorCode.unknown_server_error, str(e)
            except MetadataTimeout as e:  # written, the new partitions' leaders not seen in time
                code, message = ErrorCode.request_timed_out, str(e)
            except Exception as e:
                code, message = ErrorCode.kafka_storage_error, str(e)
        results.append(ctx.nested("CreatePartitionsTopicResult", name=t.name, error_code=code, error_message=message))
    quota.finish(ctx.connection)
    return ctx.respond(throttle_time=0, results=tuple(results))
