"""AlterConfigs (key 33), v0-2: replaces a resource's whole set of overrides
(deprecated by IncrementalAlterConfigs, still used by older tools).

Without ALTER_CONFIGS on the topic (a broker's: on the cluster): TOPIC_ / CLUSTER_AUTHORIZATION_FAILED
(a topic's with Kafka 4's message, "Topic authorization failed.").
"""

from __future__ import annotations

from odradek.broker.handlers._config_resources import alter_authorization_error
from odradek.broker.registry import RequestContext, handles


@handles(33, 0, 2)
async def handle(ctx: RequestContext, req) -> object:
    out = []
    for res in req.resources:
        code, message = alter_authorization_error(ctx, res.resource_type, res.resource_name)
        if not code:
            code, message, _old = ctx.services.config_admin.current_overrides(res.resource_type, res.resource_name)
        if not code:
            new = {c.name: c.value for c in res.configs if c.value is not None}
            code, message = await ctx.services.config_admin.apply(
                res.resource_type, res.resource_name, new, req.validate_only
            )
        out.append(
            ctx.nested(
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return ctx.respond(throttle_time=0, responses=tuple(out))
