"""AlterClientQuotas (key 49), v0-v1: set or remove quotas of users, client ids and users'
client ids (and their defaults), or only check them (validate_only).

Kafka's checks per entry (ZkAdminManager): an empty entity, an unknown or empty entity type,
an IP with a user or client id, an unknown key, a fraction for a LONG key: INVALID_REQUEST with
Kafka's message. IP quotas (connection_creation_rate) are not served: refused the same way. An
authorizer set, ALTER_CONFIGS on the cluster is required (each entry CLUSTER_AUTHORIZATION_FAILED).
Written to the metadata store (ZooKeeper's /config/users, /config/clients; every broker's quota
managers read them), broker/quotas/admin.py.
"""

from __future__ import annotations

from odradek.broker.quotas import admin
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


@handles(49, 0, 1)
async def handle(ctx: RequestContext, req) -> object:
    alterations = [
        admin.Alteration(
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple((op.key, float(op.value), bool(op.remove)) for op in entry.ops),
        )
        for entry in req.entries
    ]
    if not ctx.authorized(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):
        results = [
            admin.AlterResult(a.components, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
            for a in alterations
        ]
    else:
        results = await admin.alter(ctx.services.metadata, alterations, req.validate_only)
    return ctx.respond(
        throttle_time=0,
        entries=tuple(
            ctx.nested(
                "EntryData",
                error_code=r.error,
                error_message=r.message,
                entity=tuple(ctx.nested("EntityData", entity_type=t, entity_name=n) for t, n in r.components),
            )
            for r in results
        ),
    )
