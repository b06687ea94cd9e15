"""Topic and broker configs as DescribeConfigs / CreateTopics / AlterConfigs show them.

Topic-level names are derived from the broker settings' declaration (config.py:
each broker setting names its topic-level twin), so there is one list of what a
topic may override. Values are validated by the same parsers as broker settings,
then by storage's LogConfig.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from odradek.broker.config import BY_NAME, BY_TOPIC_NAME, SETTINGS, ConfigError
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.registry import RequestContext
    from odradek.broker.services import BrokerServices

# DescribeConfigs config sources and types (Kafka's enums).
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_IDS = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 9}
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
SENSITIVE_TYPES = {"password"}


def validate_topic_configs(services: BrokerServices, configs: Mapping[str, str | None]) -> str | None:
    for name, value in configs.items():
        setting = BY_TOPIC_NAME.get(name)
        if setting is None:
            return f"Unknown topic config name: {name}"
        if value is None:
            return f"Null value not supported for topic config: {name}"
        try:
            setting.parse(value)
        except ValueError as e:
            return str(e).replace(f"setting {setting.name}", f"topic config {name}")
    try:
        services.topic_configs.log_config({k: v for k, v in configs.items() if v is not None})
    except ValueError as e:
        return str(e)
    return None


def _render(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _source(src: str) -> int:
    return SOURCE_DEFAULT if src == "default" else SOURCE_DYNAMIC_BROKER if src == "dynamic" else SOURCE_STATIC_BROKER


def topic_config_entries(services: BrokerServices, overrides: dict[str, str]) -> list[tuple[str, str, int, Any]]:
    """(name, value, source, setting) for every topic-level config."""
    config = services.config
    defaults = config.topic_defaults()
    out = []
    for setting in SETTINGS:
        name = setting.topic_name
        if not name:
            continue
        if name in overrides:
            out.append((name, overrides[name], SOURCE_TOPIC, setting))
        else:
            out.append((name, defaults[name], _source(config.sources.get(setting.name, "default")), setting))
    return sorted(out)


def broker_config_entries(services: BrokerServices) -> list[tuple[str, str, int, Any]]:
    config = services.config
    out = [
        (name, _render(v), _source(config.sources.get(name, "default")), BY_NAME[name]) for name, v in config.items()
    ]
    return sorted(out)


def describe_topic_configs(ctx: RequestContext, overrides: dict[str, str], class_name: str) -> tuple:
    return tuple(
        ctx.nested(class_name, name=name, value=value, read_only=False, config_source=source, is_sensitive=False)
        for name, value, source, _setting in topic_config_entries(ctx.services, overrides)
    )


# --- AlterConfigs (33) and IncrementalAlterConfigs (44): apply a new set of topic
# overrides or dynamic broker settings, or only validate them.
def current_overrides(
    services: BrokerServices, resource_type: int, name: str
) -> tuple[int, str | None, dict[str, str]]:
    if resource_type == RESOURCE_TOPIC:
        info = services.snapshot.topics.get(name)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist", {}
        return 0, None, dict(info.configs)
    if resource_type == RESOURCE_BROKER:
        if name not in ("", str(services.node_id)):
            return ErrorCode.invalid_request, f"unexpected broker id {name}", {}
        config = services.config
        return 0, None, {k: str(v) for k, v in config.items() if config.sources.get(k) == "dynamic"}
    if resource_type == RESOURCE_BROKER_LOGGER:
        return 0, None, {}
    return ErrorCode.invalid_request, f"unsupported resource type {resource_type}", {}


async def apply(
    services: BrokerServices, resource_type: int, name: str, new: dict[str, str], validate_only: bool
) -> tuple[int, str | None]:
    if resource_type == RESOURCE_TOPIC:
        problem = validate_topic_configs(services, new)
        if problem:
            return ErrorCode.invalid_config, problem
        if not validate_only:
            await services.topics.set_topic_configs(name, new)
        return 0, None
    if resource_type == RESOURCE_BROKER:
        for key, value in new.items():
            setting = BY_NAME.get(key)
            if setting is None or not setting.dynamic:
                return ErrorCode.invalid_config, f"Cannot update these configs dynamically: {key}"
            try:
                setting.parse(value)
            except ConfigError as e:
                return ErrorCode.invalid_config, str(e)
        if not validate_only:
            for key, value in new.items():
                services.config.set_dynamic(key, value)
            # Topic defaults may have changed: every topic without an override takes the new value.
            services.topic_configs.refresh()
            services.replica_manager.reconfigure_all(services.snapshot.topics.values())
        return 0, None
    return 0, None  # logger levels: accepted, nothing to keep
