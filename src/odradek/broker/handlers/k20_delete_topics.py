"""DeleteTopics (key 20), v1-6: by name, and from v6 by topic id.

Unknown topics: UNKNOWN_TOPIC_OR_PARTITION (by id: UNKNOWN_TOPIC_ID); internal
topics can't be deleted (INVALID_TOPIC_EXCEPTION, as Kafka's controller answers);
`delete.topic.enable=false` gives TOPIC_DELETION_DISABLED. Partition directories
are renamed to `-delete` and removed in the background by storage.
"""

from __future__ import annotations

from odradek.broker.registry import RequestContext, handles
from odradek.protocol.constants import ZERO_UUID
from odradek.protocol.errors import ErrorCode


@handles(20, 1, 6)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(name, None) for name in req.topic_names]
    results = []
    for name, topic_id in wanted:
        snap = s.snapshot
        code, message = 0, None
        if name is None and topic_id not in (None, ZERO_UUID):
            info = snap.topic_by_id(topic_id)
            if info is None:
                code, message = ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist"
        else:
            info = snap.topics.get(name)
            if info is None:
                code, message = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
        if info is not None:
            name, topic_id = info.name, info.topic_id
            if not s.config["delete.topic.enable"]:
                code, message = ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."
            elif info.internal:
                code, message = ErrorCode.invalid_topic_exception, f"Internal topic {name} can't be deleted"
            else:
                try:
                    await s.topics.delete_topic(name)
                except Exception as e:
                    code, message = ErrorCode.kafka_storage_error, f"deleting {name} failed: {e}"
        results.append(
            ctx.nested(
                "DeletableTopicResult",
                name=name,
                topic_id=topic_id or ZERO_UUID,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.respond(throttle_time=0, responses=tuple(results))
