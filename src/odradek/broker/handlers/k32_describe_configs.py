"""DescribeConfigs (key 32), v1-4.

Topic resources: every topic-level config, the override or the broker's value,
with its source (TOPIC_CONFIG, STATIC_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG,
DEFAULT_CONFIG), optionally only the named keys; synonyms when asked, as Kafka lists
them: the topic override, then each layer of the broker setting that holds a value
(dynamic or static, default; none for a setting whose Kafka default is null and that
is not set); v3+ types and documentation. Broker resources: this broker's id, every
broker setting; the empty name, the cluster-wide dynamic defaults only (as Kafka). Unknown
topics: UNKNOWN_TOPIC_OR_PARTITION; another broker's id, a name that is not a number or an
unsupported resource type: INVALID_REQUEST with Kafka's message.
Without DESCRIBE_CONFIGS on the topic (a broker's or its loggers': on the cluster):
TOPIC_ / CLUSTER_AUTHORIZATION_FAILED for that resource.
"""

from __future__ import annotations

from odradek.broker.config_admin import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_TOPIC,
    SENSITIVE_TYPES,
    TYPE_IDS,
    ConfigAdmin,
    ConfigEntry,
)
from odradek.broker.handlers._config_resources import config_authorization_error
from odradek.broker.registry import RequestContext, handles
from odradek.broker.security.acl import AclOperation
from odradek.protocol.errors import ErrorCode


@handles(32, 1, 4)
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    results = []
    for res in req.resources:
        code, message, entries = 0, None, []
        denied = config_authorization_error(ctx, AclOperation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
        if denied:
            code, message = denied, None
        elif res.resource_type == RESOURCE_TOPIC:
            info = s.snapshot.topics.get(res.resource_name)
            if info is None:
                code, message = ErrorCode.unknown_topic_or_partition, f"Topic {res.resource_name} does not exist"
            else:
                entries = s.config_admin.topic_entries(info.configs)
        elif res.resource_type == RESOURCE_BROKER:
            code, message, entries = _broker_resource(s.config_admin, s.node_id, res.resource_name)
        elif res.resource_type == RESOURCE_BROKER_LOGGER:  # no loggers listed: an empty list
            code, message = _broker_logger_resource(s.node_id, res.resource_name)
        else:
            code, message = ErrorCode.invalid_request, f"unsupported resource type {res.resource_type}"
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        configs = []
        for e in entries:
            if keys is not None and e.name not in keys:
                continue
            synonyms = ()
            if req.include_synonyms:
                synonyms = tuple(
                    ctx.nested("DescribeConfigsSynonym", name=n, value=v, source=src) for n, v, src in e.synonyms
                )
            sensitive = e.setting.type in SENSITIVE_TYPES
            configs.append(
                ctx.nested(
                    "DescribeConfigsResourceResult",
                    name=e.name,
                    value=None if sensitive else e.value,
                    read_only=res.resource_type == RESOURCE_BROKER and not e.setting.dynamic,
                    config_source=e.source,
                    is_sensitive=sensitive,
                    synonyms=synonyms,
                    config_type=TYPE_IDS.get(e.setting.type, 0),
                    documentation=e.setting.doc if getattr(req, "include_documentation", False) else None,
                )
            )
        results.append(
            ctx.nested(
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=tuple(configs),
            )
        )
    return ctx.respond(throttle_time=0, results=tuple(results))


def _broker_resource(admin: ConfigAdmin, node_id: int, name: str) -> tuple[int, str | None, list[ConfigEntry]]:
    """A broker resource's entries, or Kafka's error for a name that is not this broker."""
    if name == "":
        return 0, None, admin.default_entries()
    if not _is_int(name):
        return ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}", []
    if int(name) != node_id:
        message = f"Unexpected broker id, expected {node_id} or empty string, but received {name}"
        return ErrorCode.invalid_request, message, []
    return 0, None, admin.broker_entries()


def _broker_logger_resource(node_id: int, name: str) -> tuple[int, str | None]:
    if name == "":
        return ErrorCode.invalid_request, "Broker id must not be empty"
    if not _is_int(name):
        return ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}"
    if int(name) != node_id:
        return ErrorCode.invalid_request, f"Unexpected broker id, expected {node_id} but received {name}"
    return 0, None


def _is_int(name: str) -> bool:
    try:
        int(name)
    except ValueError:
        return False
    return True
