"""DeleteTopics (key 20), v1-6: by name, and from v6 by topic id.

Unknown topics: UNKNOWN_TOPIC_OR_PARTITION (by id: UNKNOWN_TOPIC_ID); internal
topics can't be deleted (INVALID_TOPIC_EXCEPTION, as Kafka's controller answers);
`delete.topic.enable=false` gives TOPIC_DELETION_DISABLED. The topics of one request are
deleted together; the answer comes once every broker has dropped them from its metadata
(in a cluster: cluster/zookeeper.py), as Kafka's does, or at the request's `timeout_ms`
with REQUEST_TIMED_OUT for those not yet dropped everywhere (their deletion goes on; a
timeout of 0 only starts it, as in Kafka). Partition directories are renamed to `-delete`
and removed in the background by storage. Authorization as Kafka's controller: DELETE on the
cluster allows every topic; otherwise, by name, a topic
the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether it exists or not, one it may
describe but not DELETE too; by id, TOPIC_AUTHORIZATION_FAILED with the name only when describable;
each with Kafka 4's message, "Topic authorization failed.".
"""

from __future__ import annotations

import asyncio
import logging

from odradek.broker.quotas.manager import THROTTLING_QUOTA_EXCEEDED_MESSAGE, MutationQuota
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import TOPIC_AUTHORIZATION_FAILED_MESSAGE, AclOperation, ResourceType
from odradek.cluster.store import MetadataTimeout, UnknownTopicError
from odradek.protocol.constants import ZERO_UUID
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.topics")


@handles(20, 1, 6)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(name, None) for name in req.topic_names]
    timeout_s = max(0.0, req.timeout.total_seconds())
    results: list[list] = []  # [name, topic id, error code, message]
    deleting: dict[str, asyncio.Future] = {}
    # DELETE on the cluster: every topic may be described and deleted (Kafka's controller)
    any_topic = ctx.authorized(AclOperation.DELETE, ResourceType.CLUSTER)
    quota = MutationQuota(s.client_quotas(), ctx.connection.principal, ctx.client_id, ctx.api_version >= 5)

    def may(op: AclOperation, topic: str) -> bool:
        return any_topic or ctx.authorized(op, ResourceType.TOPIC, topic)

    for name, topic_id in wanted:
        snap = s.snapshot
        code, message = 0, None
        denied = ErrorCode.topic_authorization_failed
        if name is None and topic_id not in (None, ZERO_UUID):
            info = snap.topic_by_id(topic_id)
            if info is None:
                code, message = ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist"
            elif not may(AclOperation.DELETE, info.name):
                # named in the answer only to who may describe it
                described = may(AclOperation.DESCRIBE, info.name)
                results.append([info.name if described else None, topic_id, denied, TOPIC_AUTHORIZATION_FAILED_MESSAGE])
                continue
        elif name is not None and not may(AclOperation.DESCRIBE, name):
            results.append([name, None, denied, TOPIC_AUTHORIZATION_FAILED_MESSAGE])  # nothing said about its existence
            continue
        else:
            info = snap.topics.get(name)
            if info is None:
                code, message = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            elif not may(AclOperation.DELETE, name):
                results.append([name, None, denied, TOPIC_AUTHORIZATION_FAILED_MESSAGE])
                continue
        if info is not None:
            name, topic_id = info.name, info.topic_id
            if not s.config["delete.topic.enable"]:
                code, message = ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."
            elif info.internal:
                code, message = ErrorCode.invalid_topic_exception, f"Internal topic {name} can't be deleted"
            elif name not in deleting and not quota.take(len(info.partitions)):
                code, message = ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE
            elif name not in deleting:
                deleting[name] = asyncio.ensure_future(s.topics.delete_topic(name, timeout_s))
        results.append([name, topic_id, code, message])
    if deleting:
        await asyncio.gather(*deleting.values(), return_exceptions=True)
    for r in results:
        task = deleting.get(r[0])
        if r[2] or task is None:
            continue
        e = task.exception()
        if isinstance(e, MetadataTimeout):
            r[2], r[3] = (
                ErrorCode.request_timed_out,
                f"deletion of {r[0]} not complete within {timeout_s * 1000:.0f} ms",
            )
        elif isinstance(e, UnknownTopicError):
            r[2], r[3] = ErrorCode.unknown_topic_or_partition, str(e)
        elif e is not None:
            log.error("deleting topic %s failed: %r", r[0], e)
            code = ErrorCode.kafka_storage_error if isinstance(e, OSError) else ErrorCode.unknown_server_error
            r[2], r[3] = code, f"deleting {r[0]} failed: {e}"
    quota.finish(ctx.connection)
    return ctx.respond(
        throttle_time=0,
        responses=tuple(
            ctx.nested(
                "DeletableTopicResult",
                name=name,
                topic_id=topic_id or ZERO_UUID,
                error_code=code,
                error_message=message,
            )
            for name, topic_id, code, message in results
        ),
    )
