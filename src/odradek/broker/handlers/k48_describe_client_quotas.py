"""DescribeClientQuotas (key 48), v0-v1: the quotas of the entities matching a filter.

Each component names an entity type (user, client-id, ip) and a match: exact (a name; null
the default), default, or specified (any name but the default); `strict` leaves out entities
with other parts. Kafka's refusals answer the whole request (INVALID_REQUEST, UNSUPPORTED_VERSION
for a custom entity type, entries null); DESCRIBE_CONFIGS on the cluster is required when an
authorizer is set (CLUSTER_AUTHORIZATION_FAILED). broker/quotas/admin.py does the work.
"""

from __future__ import annotations

from odradek.broker.quotas import admin
from odradek.broker.quotas.entities import FilterComponent, QuotaRequestError
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(48, 0, 1)
async def handle(ctx: RequestContext, req) -> object:
    if not ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return ctx.respond(
            throttle_time=0,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="Cluster authorization failed.",
            entries=None,
        )
    components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in req.components]
    try:
        found = admin.describe(ctx.services.snapshot, components, req.strict)
    except QuotaRequestError as e:
        message = None if e.error == -1 else str(e)  # Kafka sends no message with UNKNOWN_SERVER_ERROR
        return ctx.respond(throttle_time=0, error_code=e.error, error_message=message, entries=None)
    entries = tuple(
        ctx.nested(
            "EntryData",
            entity=tuple(ctx.nested("EntityData", entity_type=t, entity_name=n) for t, n in entity.components()),
            values=tuple(ctx.nested("ValueData", key=k, value=v) for k, v in values.items()),
        )
        for entity, values in found
    )
    return ctx.respond(throttle_time=0, error_code=0, error_message=None, entries=entries)
