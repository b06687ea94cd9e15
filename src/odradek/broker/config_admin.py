"""Topic and broker configs as DescribeConfigs / CreateTopics / AlterConfigs show and change them
(Kafka's ConfigHelper and ConfigAdminManager).

Topic-level names are derived from the broker settings' declaration (config.py:
each broker setting names its topic-level twin), so there is one list of what a
topic may override. Values are validated by the same parsers as broker settings,
then by storage's LogConfig (through `TopicConfigs`).

`ConfigAdmin` gets what it reads and writes, nothing more: this broker's id and settings, the
topic defaults (`TopicConfigs`), the metadata (topic overrides) and `TopicAdmin` (to write
them). The handlers k19, k32, k33 and k44 reach it as `services.config_admin`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from odradek.broker.config import BrokerConfig, listener_scoped
from odradek.broker.password_encoder import PasswordDecodeError
from odradek.broker.security.tls import ListenerTls
from odradek.broker.security.tls_reload import TlsListeners, TlsUpdateRefused
from odradek.broker.settings import BY_NAME, BY_TOPIC_NAME, SETTINGS, ConfigError, Setting
from odradek.broker.settings.ssl import RECONFIGURABLE, SSL_NAMES
from odradek.cluster.metadata import DEFAULT_BROKER_ENTITY
from odradek.cluster.store import MetadataError, MetadataTimeout, UnknownTopicError
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.config")

if TYPE_CHECKING:
    from odradek.broker.topic_admin import TopicAdmin
    from odradek.broker.topic_configs import TopicConfigs
    from odradek.cluster.store import MetadataStore

# DescribeConfigs config sources and types (Kafka's enums).
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_IDS = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 9}
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
SENSITIVE_TYPES = {"password"}


def _render(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _source(src: str) -> int:
    if src == "default":
        return SOURCE_DEFAULT
    if src == "dynamic":
        return SOURCE_DYNAMIC_BROKER
    if src == "dynamic-default":
        return SOURCE_DYNAMIC_DEFAULT_BROKER
    return SOURCE_STATIC_BROKER


#: broker settings whose default is null in Kafka: unset, DescribeConfigs shows no value and no
#: synonym (odradek derives a value for some: log.retention.ms from log.retention.hours, ...)
NULL_DEFAULTS = frozenset(
    {
        "log.roll.ms",
        "log.roll.jitter.ms",
        "log.retention.ms",
        "log.retention.minutes",
        "log.flush.interval.ms",
        "broker.rack",
        "log.dirs",
    }
)


class ConfigEntry(NamedTuple):
    """One config as DescribeConfigs shows it; ``synonyms`` are (name, value, source), most
    specific first (topic override, then the broker setting's layers: dynamic or static, default)."""

    name: str
    value: str | None
    source: int
    setting: Setting
    synonyms: tuple[tuple[str, str | None, int], ...]


#: the settings a broker setting's value may come from, most specific first (Kafka's
#: DynamicBrokerConfig.brokerConfigSynonyms; log.roll.jitter.hours is not served)
_TIME_SYNONYMS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms",),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
BROKER_SYNONYMS = {
    name: group for group in _TIME_SYNONYMS for name in group if name != "log.flush.scheduler.interval.ms"
}
_LAYER_ORDER = {SOURCE_DYNAMIC_BROKER: 0, SOURCE_DYNAMIC_DEFAULT_BROKER: 1, SOURCE_STATIC_BROKER: 2, SOURCE_DEFAULT: 3}


def _broker_layers(config: BrokerConfig, setting: Setting) -> tuple[str | None, int, list]:
    """A broker setting's value, source and synonyms, as Kafka's ConfigHelper lists them: every
    layer of the setting and of its synonyms (`BROKER_SYNONYMS`: log.retention.ms's are
    .minutes and .hours) that holds a value, by layer (this broker's dynamic setting, every
    broker's, the static one, the default), within a layer in the synonyms' order; what comes
    before the setting's own first layer is left out (a dynamic log.retention.ms lists the default
    log.retention.hours after it; log.retention.hours does not list log.retention.ms)."""
    source = _source(config.sources.get(setting.name, "default"))
    if source == SOURCE_DEFAULT and setting.name in NULL_DEFAULTS:
        return None, source, []
    value = _render(config[setting.name])
    names = BROKER_SYNONYMS.get(setting.name, (setting.name,))
    found = [
        (_LAYER_ORDER[_source(src)], i, (name, _render(v), _source(src)))
        for i, name in enumerate(names)
        for v, src in config.layers(name)
        if not (src == "default" and name in NULL_DEFAULTS)
    ]
    layers = [layer for _order, _i, layer in sorted(found, key=lambda f: (f[0], f[1]))]
    while layers and layers[0][0] != setting.name:
        layers.pop(0)
    if source != SOURCE_DEFAULT and layers and layers[0][2] == SOURCE_DEFAULT:
        layers.insert(0, (setting.name, value, source))  # a value derived from another setting
    return value, source, layers


class ConfigAdmin:
    def __init__(
        self,
        node_id: int,
        config: BrokerConfig,
        topic_configs: TopicConfigs,
        metadata: MetadataStore,
        topics: TopicAdmin,
        tls: TlsListeners | None = None,
    ) -> None:
        """`tls`: the TLS listeners' contexts, checked and reloaded by a dynamic keystore update."""
        self.node_id = node_id
        self.config = config
        self.topic_configs = topic_configs
        self.metadata = metadata
        self.topics = topics
        self.tls = tls

    # --- validation (CreateTopics, AlterConfigs)
    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> str | None:
        """A message naming the first bad topic config, or None."""
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
            self.topic_configs.log_config({k: v for k, v in configs.items() if v is not None})
        except ValueError as e:
            return str(e)
        return None

    # --- DescribeConfigs (32), CreateTopics v5+ (19)
    def topic_entries(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """Every topic-level config: the override (source TOPIC_CONFIG) or the broker's value with its
        source; synonyms the override, then the layers of its broker setting that hold a value."""
        defaults = self.config.topic_defaults()
        out = []
        for setting in SETTINGS:
            name = setting.topic_name
            if not name:
                continue
            broker_value, broker_source, layers = _broker_layers(self.config, setting)
            if name in overrides:
                synonyms = [(name, overrides[name], SOURCE_TOPIC), *layers]
                out.append(ConfigEntry(name, overrides[name], SOURCE_TOPIC, setting, tuple(synonyms)))
            else:
                value = broker_value if broker_value is not None else defaults[name]
                out.append(ConfigEntry(name, value, broker_source, setting, tuple(layers)))
        return sorted(out)

    def broker_entries(self) -> list[ConfigEntry]:
        out = []
        for name, _value in self.config.items():
            setting = BY_NAME[name]
            value, source, layers = _broker_layers(self.config, setting)
            out.append(ConfigEntry(name, value, source, setting, tuple(layers)))
        config = self.config
        for (listener, mechanism, base), value in config.listener_scoped.items():
            # listener.name.<l>.[<mechanism>.]<setting>: this broker's dynamic one, or the static one
            name = f"listener.name.{listener}.{mechanism + '.' if mechanism else ''}{base}"
            source = (
                SOURCE_DYNAMIC_BROKER
                if (listener, mechanism, base) in config.dynamic_listener
                else SOURCE_STATIC_BROKER
            )
            rendered = _render(value)
            out.append(ConfigEntry(name, rendered, source, BY_NAME[base], ((name, rendered, source),)))
        return sorted(out)

    def default_entries(self) -> list[ConfigEntry]:
        """The cluster-wide dynamic defaults (resource name ""), as Kafka lists them: only the
        settings that have one, each with its cluster-wide synonyms only (not a broker's own
        dynamic value, nor the static or default ones under it)."""
        out = []
        for name in self.config.dynamic_default:
            setting = BY_NAME[name]
            _value, _source, layers = _broker_layers(self.config, setting)
            layers = [layer for layer in layers if layer[2] == SOURCE_DYNAMIC_DEFAULT_BROKER]
            value, source = (layers[0][1], layers[0][2]) if layers else (None, SOURCE_DEFAULT)
            out.append(ConfigEntry(name, value, source, setting, tuple(layers)))
        return sorted(out)

    async def reencode_passwords(self) -> None:
        """With `password.encoder.old.secret`: this broker's dynamic passwords that the old secret
        encrypted, encrypted again with `password.encoder.secret` and kept, as Kafka's
        DynamicBrokerConfig does when the broker starts (then the old secret can go)."""
        encoder = self.config.password_encoder
        if encoder is None or not encoder.old_secret:
            return
        entity = str(self.node_id)
        kept = dict(self.metadata.snapshot.broker_configs.get(entity, {}))
        changed = []
        for key, value in kept.items():
            where = listener_scoped(key)
            setting = BY_NAME.get(where[2] if where is not None else key)
            if setting is None or setting.type != "password":
                continue
            try:
                again = encoder.reencoded(value)
            except PasswordDecodeError as e:
                log.error("Dynamic password config %s could not be decoded, ignoring: %s", key, e)
                continue
            if again is not None:
                kept[key] = again
                changed.append(key)
        if changed:
            try:
                await self.topics.set_broker_configs(entity, kept)
            except MetadataError as e:
                log.warning("dynamic passwords not encrypted again with the new secret: %s", e)
                return
            log.info("dynamic password configs encrypted again with the new secret: %s", ", ".join(sorted(changed)))

    # --- AlterConfigs (33) and IncrementalAlterConfigs (44): apply a new set of topic
    # overrides or dynamic broker settings, or only validate them.
    def current_overrides(self, resource_type: int, name: str) -> tuple[int, str | None, dict[str, str]]:
        if resource_type == RESOURCE_TOPIC:
            info = self.metadata.snapshot.topics.get(name)
            if info is None:
                return ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.", {}
            return 0, None, dict(info.configs)
        if resource_type == RESOURCE_BROKER:
            if name not in ("", str(self.node_id)):
                return (
                    ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {self.node_id}, but received {name}",
                    {},
                )
            layer = self.config.dynamic_default if name == "" else self.config.dynamic_own
            out = {k: _render(v) for k, v in layer.items()}
            if name != "":  # this broker's own listener-scoped ones (the TLS stores)
                scoped = self.config.dynamic_listener.items()
                out.update({f"listener.name.{where[0]}.{where[2]}": _render(v) for where, v in scoped})
            return 0, None, out
        if resource_type == RESOURCE_BROKER_LOGGER:
            return 0, None, {}
        return ErrorCode.invalid_request, f"unsupported resource type {resource_type}", {}

    async def apply(
        self, resource_type: int, name: str, new: dict[str, str], validate_only: bool
    ) -> tuple[int, str | None]:
        """Validate and write one resource's new overrides: (error code, message). A write the
        metadata store fails is this resource's error, as Kafka's ZkAdminManager answers each
        resource apart (a ZooKeeper error: UNKNOWN_SERVER_ERROR), never the connection's end."""
        try:
            return await self._apply(resource_type, name, new, validate_only)
        except UnknownTopicError as e:  # deleted meanwhile
            return ErrorCode.unknown_topic_or_partition, str(e)
        except MetadataTimeout as e:  # written, not yet seen here
            return ErrorCode.request_timed_out, str(e)
        except MetadataError as e:
            log.warning("altering the configs of resource %s (type %d) failed: %s", name, resource_type, e)
            return ErrorCode.unknown_server_error, f"altering the configs of {name!r} failed: {e}"

    async def _apply(
        self, resource_type: int, name: str, new: dict[str, str], validate_only: bool
    ) -> tuple[int, str | None]:
        if resource_type == RESOURCE_TOPIC:
            problem = self.validate_topic_configs(new)
            if problem:
                return ErrorCode.invalid_config, problem
            if not validate_only:
                await self.topics.set_topic_configs(name, new)
            return 0, None
        if resource_type == RESOURCE_BROKER:
            tls_check = self._check_tls_update(name, new)
            if not isinstance(tls_check, TlsUpdate):
                return tls_check
            for key, value in new.items():
                if key in tls_check.keys:
                    continue  # checked above
                setting = BY_NAME.get(key)
                if setting is None:  # Kafka stores any name; odradek keeps none it would not use
                    return ErrorCode.invalid_config, f"Unknown broker setting: {key}"
                if not setting.dynamic:
                    return ErrorCode.invalid_request, f"Cannot update these configs dynamically: [{key}]"
                try:
                    setting.parse(value)
                except ConfigError as e:  # Kafka answers a bad broker value INVALID_REQUEST (a topic's: INVALID_CONFIG)
                    return ErrorCode.invalid_request, str(e)
            if not validate_only:
                # Kept in the metadata (ZooKeeper's /config/brokers/<entity>, or the single node's
                # metadata file), passwords encrypted as Kafka keeps them: every broker applies it
                # from there (broker/dynamic_config.py).
                kept = {k: self.config.encode_password(v) if k in tls_check.secrets else v for k, v in new.items()}
                for listener, built in tls_check.reload_now.items():
                    self.tls.install(listener, built)  # type: ignore[union-attr]  # only with self.tls  # the same settings again: the files reloaded
                await self.topics.set_broker_configs(DEFAULT_BROKER_ENTITY if name == "" else name, kept)
            return 0, None
        return 0, None  # logger levels: accepted, nothing to keep

    def _check_tls_update(self, name: str, new: Mapping[str, str]) -> TlsUpdate | tuple[int, str]:
        """The TLS store settings of a broker resource's new dynamic layer, checked as Kafka's
        DynamicBrokerConfig and SslFactory check them (broker/security/tls_reload.py): the
        listeners whose context is to be built again now (their settings unchanged: the files
        reloaded), or Kafka 3.9's answer (INVALID_REQUEST and its message)."""

        def scala_set(names: list[str]) -> str:
            return f"{'Set' if len(names) <= 4 else 'HashSet'}({', '.join(names)})"

        unprefixed = sorted(k for k in new if k in RECONFIGURABLE)
        if unprefixed:
            return ErrorCode.invalid_request, (
                "These security configs can be dynamically updated only per-listener using the listener prefix: "
                f"HashSet({', '.join(unprefixed)})"
            )
        keys = {k: w for k in new if (w := listener_scoped(k)) is not None and w[1] is None and w[2] in RECONFIGURABLE}
        if keys and name == "":
            why = "Cannot update these configs at default cluster level, broker id must be specified"
            return ErrorCode.invalid_request, f"{why}: {scala_set(sorted(keys))}"
        touched = {w[0] for w in keys.values()} | {w[0] for w in self.config.dynamic_listener}
        if name == "" or not touched:
            return TlsUpdate(frozenset(keys), {})
        after = self.config.with_own_layer(new)
        reload_now: dict[str, ListenerTls] = {}
        for lower in sorted(touched):
            listener = self.tls.by_lower_name(lower) if self.tls is not None else None
            if listener is None or self.tls is None:
                bad = sorted(k for k, w in keys.items() if w[0] == lower)  # Kafka keeps them, unused
                return ErrorCode.invalid_config, f"{', '.join(bad)}: broker {self.node_id} has no TLS listener {lower}"
            try:
                built = self.tls.check(after, listener)
            except TlsUpdateRefused as e:
                return ErrorCode.invalid_request, f"Invalid value {e} for configuration Invalid dynamic configuration"
            if all(self.config.for_listener(listener, n) == after.for_listener(listener, n) for n in SSL_NAMES):
                reload_now[listener] = built
        secrets = frozenset(k for k, w in keys.items() if BY_NAME[w[2]].type == "password")
        if secrets and self.config.password_encoder is None:  # kept in clear by nobody, as in Kafka
            resource = f"ConfigResource(type=BROKER, name='{name}')"  # Kafka 3.9's ZkAdminManager words
            return (
                ErrorCode.invalid_config,
                f"Invalid config value for resource {resource}: Password encoder secret not configured",
            )
        return TlsUpdate(frozenset(keys), reload_now, secrets)


class TlsUpdate(NamedTuple):
    keys: frozenset[str]  # the listener-scoped TLS store names of the new layer (checked)
    reload_now: dict[str, ListenerTls]  # listener -> its context built again, to use at once
    secrets: frozenset[str] = frozenset()  # those of password type: kept encrypted
