"""What the config APIs (k32 DescribeConfigs, k33 AlterConfigs, k44 IncrementalAlterConfigs)
share: the authorization of a config resource, as Kafka's ConfigHelper and KafkaApis decide it
(a topic's configs by the topic's ACLs, a broker's and its loggers' by the cluster's)."""

from __future__ import annotations

from odradek.broker.config_admin import RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC
from odradek.broker.registry import RequestContext
from odradek.broker.security.acl import TOPIC_AUTHORIZATION_FAILED_MESSAGE, AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode


def config_authorization_error(ctx: RequestContext, op: AclOperation, resource_type: int, name: str) -> int:
    """0, or TOPIC_ / CLUSTER_AUTHORIZATION_FAILED when the principal may not `op`
    (DESCRIBE_CONFIGS or ALTER_CONFIGS) this resource's configs."""
    if resource_type == RESOURCE_TOPIC and not ctx.authorized(op, ResourceType.TOPIC, name):
        return ErrorCode.topic_authorization_failed
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and not ctx.authorized(op, ResourceType.CLUSTER):
        return ErrorCode.cluster_authorization_failed
    return 0


def alter_authorization_error(ctx: RequestContext, resource_type: int, name: str) -> tuple[int, str | None]:
    """AlterConfigs' and IncrementalAlterConfigs' refusal without ALTER_CONFIGS: (0, None) or the
    code and Kafka 4's message (a topic's says "Topic authorization failed.", a broker's none)."""
    code = config_authorization_error(ctx, AclOperation.ALTER_CONFIGS, resource_type, name)
    return code, TOPIC_AUTHORIZATION_FAILED_MESSAGE if code == ErrorCode.topic_authorization_failed else None
