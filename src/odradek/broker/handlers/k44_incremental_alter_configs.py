"""IncrementalAlterConfigs (key 44), v0-1: SET (0), DELETE (1), APPEND (2) and
SUBTRACT (3) on list configs, per key; the rest of the overrides stay. APPEND and
SUBTRACT on a config without an override start from its default; a key named twice
in one resource is INVALID_REQUEST. Broker resources: dynamic settings only
(INVALID_REQUEST for a read-only one, INVALID_CONFIG for a name odradek does not
know, which Kafka would store).

Without ALTER_CONFIGS on the topic (a broker's or its loggers': on the cluster):
TOPIC_ / CLUSTER_AUTHORIZATION_FAILED (a topic's with Kafka 4's message, "Topic authorization
failed.").
"""

from __future__ import annotations

from odradek.broker.config_admin import RESOURCE_TOPIC
from odradek.broker.handlers._config_resources import alter_authorization_error
from odradek.broker.registry import RequestContext, handles
from odradek.broker.settings import BY_NAME, BY_TOPIC_NAME
from odradek.protocol.errors import ErrorCode

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@handles(44, 0, 1)
async def handle(ctx: RequestContext, req) -> object:
    out = []
    for res in req.resources:
        code, message, new = ctx.services.config_admin.current_overrides(res.resource_type, res.resource_name)
        denied, why = alter_authorization_error(ctx, res.resource_type, res.resource_name)
        if denied:
            code, message = denied, why
        names = [c.name for c in res.configs]
        if not code and len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            code, message = ErrorCode.invalid_request, f"Error due to duplicate config keys: {dup}"
        if not code:
            for c in res.configs:
                op = c.config_operation
                if op == SET:
                    new[c.name] = c.value
                elif op == DELETE:
                    new.pop(c.name, None)
                elif op in (APPEND, SUBTRACT):
                    setting = (BY_TOPIC_NAME if res.resource_type == RESOURCE_TOPIC else BY_NAME).get(c.name)
                    if setting is None or setting.type != "list":
                        code, message = (
                            ErrorCode.invalid_config,
                            f"Config value append/subtract is not allowed for config {c.name}",
                        )
                        break
                    # not overridden: start from the config's default, as Kafka does
                    base = new[c.name] if c.name in new else ",".join(setting.default)
                    current = [x for x in (base or "").split(",") if x]
                    items = [x.strip() for x in (c.value or "").split(",") if x.strip()]
                    if op == APPEND:
                        current += [x for x in items if x not in current]
                    else:
                        current = [x for x in current if x not in items]
                    new[c.name] = ",".join(current)
                else:
                    code, message = ErrorCode.invalid_request, f"unknown config operation {op}"
                    break
            if not code:
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
