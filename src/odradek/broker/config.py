"""The effective broker configuration: the settings' defaults (`broker/settings/`), then the
properties file, then `--override`s; and the configuration reference drawn from them.
Unknown or invalid settings stop startup with a message naming them.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from odradek.broker.password_encoder import PasswordDecodeError, PasswordEncoder, check_settings
from odradek.broker.settings import BY_NAME, MECHANISM_SCOPED, PER_LISTENER, SETTINGS, ConfigError
from odradek.broker.settings.ssl import RECONFIGURABLE

LISTENER_PREFIX = "listener.name."
log = logging.getLogger("odradek.broker.config")


def listener_scoped(key: str) -> tuple[str, str | None, str] | None:
    """(listener, mechanism or None, setting) of a listener-scoped name, Kafka's
    `listener.name.<listener>.[<mechanism>.]<setting>` (listener and mechanism lower case), or None."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    listener, dot, name = key[len(LISTENER_PREFIX) :].partition(".")
    if not dot or not listener:
        return None
    if name in PER_LISTENER:
        return listener.lower(), None, name
    mechanism, dot, name = name.partition(".")
    if dot and mechanism and name in MECHANISM_SCOPED:
        return listener.lower(), mechanism.lower(), name
    return None


def dynamic_listener_settings(
    layer: Mapping[str, str], decode: Callable[[str, str], str | None] | None = None
) -> dict[tuple[str, str | None, str], Any]:
    """The listener-scoped names of a dynamic layer that are dynamic (the TLS stores), parsed;
    others, and values that do not parse, skipped (another broker's version may know them).
    `decode`: password-type values are kept encoded in the metadata: (name, encoded) -> the
    password, or None to skip it (`BrokerConfig.decode_password`); without it they are in clear
    (AlterConfigs' new values, before they are kept)."""
    out: dict[tuple[str, str | None, str], Any] = {}
    for key, raw in layer.items():
        where = listener_scoped(key)
        if where is None or where[1] is not None or where[2] not in RECONFIGURABLE:
            continue
        setting = BY_NAME[where[2]]
        value: str | None = raw if decode is None or setting.type != "password" else decode(key, raw)
        if value is None:
            continue
        try:
            out[where] = setting.parse(value)
        except ConfigError:
            continue
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments, line continuations."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            out[line] = ""
            continue
        out[m.group(1)] = m.group(2)
    return out


class BrokerConfig:
    """The effective configuration: defaults, then the file, then overrides."""

    def __init__(self, raw: dict[str, str] | None = None, *, sources: dict[str, str] | None = None) -> None:
        raw = dict(raw or {})
        scoped = {k: where for k in raw if k not in BY_NAME and (where := listener_scoped(k)) is not None}
        unknown = sorted(k for k in raw if k not in BY_NAME and k not in scoped)
        if unknown:
            raise ConfigError(f"unknown setting{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
        self._values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
        self.sources: dict[str, str] = {s.name: "default" for s in SETTINGS}
        # (listener, mechanism or None, setting) -> value of the listener-scoped names (`for_listener`)
        self.listener_scoped: dict[tuple[str, str | None, str], Any] = {}
        for k, where in scoped.items():
            self.listener_scoped[where] = BY_NAME[where[2]].parse(raw.pop(k))
        for k, v in raw.items():
            self._values[k] = BY_NAME[k].parse(v)
            self.sources[k] = (sources or {}).get(k, "override")
        self._derive(raw)
        # What the file and overrides made, under the dynamic layers (kept in the metadata:
        # every broker's, then this broker's own; `apply_dynamic` lays them over this).
        self._static: dict[str, Any] = dict(self._values)
        self._static_sources: dict[str, str] = dict(self.sources)
        self.dynamic_default: dict[str, Any] = {}
        self.dynamic_own: dict[str, Any] = {}
        # This broker's own dynamic listener-scoped settings (the TLS stores, KIP-226), over the static ones.
        self._static_listener_scoped = dict(self.listener_scoped)
        self.dynamic_listener: dict[tuple[str, str | None, str], Any] = {}
        problem = check_settings(self._values)
        if problem:
            raise ConfigError(problem)
        # Dynamic password settings are kept encrypted with it (None: password.encoder.secret unset)
        self.password_encoder = PasswordEncoder.of(self._values)

    def _derive(self, raw: dict[str, str]) -> None:
        v = self._values
        if "log.dirs" not in raw and v["log.dir"]:
            v["log.dirs"] = [v["log.dir"]]
            self.sources["log.dirs"] = self.sources["log.dir"]
        if v["broker.id"] >= 0 and "node.id" not in raw:
            v["node.id"] = v["broker.id"]
        if "log.roll.ms" not in raw and "log.roll.hours" in raw:
            v["log.roll.ms"] = v["log.roll.hours"] * 3600000
        if v["log.retention.ms"] == -1 and "log.retention.ms" not in raw:
            if v["log.retention.minutes"] != -1:
                v["log.retention.ms"] = v["log.retention.minutes"] * 60000
            else:
                v["log.retention.ms"] = v["log.retention.hours"] * 3600000
        if not v["advertised.listeners"]:
            v["advertised.listeners"] = list(v["listeners"])
        if v["log.flush.interval.ms"] == -1:
            v["log.flush.interval.ms"] = v["log.flush.scheduler.interval.ms"]

    @classmethod
    def load(cls, path: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> BrokerConfig:
        raw: dict[str, str] = {}
        sources: dict[str, str] = {}
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    props = parse_properties(f.read())
            except OSError as e:
                raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
            raw.update(props)
            sources.update({k: f"file {path}" for k in props})
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} is not of the form key=value")
            k, _, v = item.partition("=")
            raw[k.strip()] = v
            sources[k.strip()] = "--override"
        return cls(raw, sources=sources)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def items(self):
        return self._values.items()

    def decode_password(self, name: str, encoded: str) -> str | None:
        """A dynamic password setting as kept in the metadata, decoded; None (with an error
        naming the setting, never its value) when it cannot be, and Kafka ignores it too."""
        if self.password_encoder is None:
            log.error("Dynamic password config %s could not be decoded: password.encoder.secret is not set", name)
            return None
        try:
            return self.password_encoder.decode(encoded)
        except PasswordDecodeError as e:
            log.error("Dynamic password config %s could not be decoded, ignoring: %s", name, e)
            return None

    def encode_password(self, password: str) -> str:
        """A dynamic password setting's value as it is kept in the metadata (ValueError without
        password.encoder.secret)."""
        if self.password_encoder is None:
            raise ValueError("Password encoder secret not configured")
        return self.password_encoder.encode(password)

    def apply_dynamic(self, default: Mapping[str, str], own: Mapping[str, str]) -> list[str]:
        """Lay the dynamic settings kept in the metadata over the static ones: this broker's own
        (source "dynamic"), else every broker's (source "dynamic-default"), else the static
        value again. Names that are not dynamic settings or values that do not parse are
        skipped (another broker's version may know them). Returns the names that changed."""

        def parsed(layer: Mapping[str, str]) -> dict[str, Any]:
            out = {}
            for name, raw in layer.items():
                setting = BY_NAME.get(name)
                if setting is None or not setting.dynamic:
                    continue
                value = self.decode_password(name, raw) if setting.type == "password" else raw
                if value is None:
                    continue
                try:
                    out[name] = setting.parse(value)
                except ConfigError:
                    continue
            return out

        new_default, new_own = parsed(default), parsed(own)
        changed = []
        for name in set(self.dynamic_default) | set(self.dynamic_own) | set(new_default) | set(new_own):
            if name in new_own:
                value, source = new_own[name], "dynamic"
            elif name in new_default:
                value, source = new_default[name], "dynamic-default"
            else:
                value, source = self._static[name], self._static_sources[name]
            if self._values[name] != value or self.sources[name] != source:
                changed.append(name)
            self._values[name], self.sources[name] = value, source
        self.dynamic_default, self.dynamic_own = new_default, new_own
        new_listener = dynamic_listener_settings(own, self.decode_password)
        for where in set(self.dynamic_listener) | set(new_listener):
            if self.dynamic_listener.get(where) != new_listener.get(where):
                changed.append(f"{LISTENER_PREFIX}{where[0]}.{where[2]}")
        self.dynamic_listener = new_listener
        self.listener_scoped = {**self._static_listener_scoped, **new_listener}
        return sorted(changed)

    def with_own_layer(self, own: Mapping[str, str]) -> BrokerConfig:
        """A copy whose listener-scoped settings are as `own` (this broker's dynamic settings)
        would make them: what a dynamic TLS store update is validated with."""
        out = copy.copy(self)
        out.dynamic_listener = dynamic_listener_settings(own)
        out.listener_scoped = {**self._static_listener_scoped, **out.dynamic_listener}
        return out

    def layers(self, name: str) -> list[tuple[Any, str]]:
        """The values a setting has in each layer that holds one, most specific first: this
        broker's dynamic, every broker's dynamic, static (file or override), default."""
        out: list[tuple[Any, str]] = []
        if name in self.dynamic_own:
            out.append((self.dynamic_own[name], "dynamic"))
        if name in self.dynamic_default:
            out.append((self.dynamic_default[name], "dynamic-default"))
        if self._static_sources[name] != "default":
            out.append((self._static[name], self._static_sources[name]))
        out.append((BY_NAME[name].default, "default"))
        return out

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level values of every topic-level setting, as topic config strings."""
        out = {}
        for s in SETTINGS:
            if s.topic_name:
                v = self._values[s.name]
                out[s.topic_name] = (
                    ",".join(v) if isinstance(v, list) else (str(v).lower() if isinstance(v, bool) else str(v))
                )
        return out

    def for_listener(self, listener: str, name: str, mechanism: str | None = None, *, fallback: bool = True) -> Any:
        """A setting as a listener (and a SASL mechanism on it) sees it: Kafka's
        `listener.name.<listener>.<mechanism>.<name>`, then `listener.name.<listener>.<name>`,
        then (with `fallback`) the broker-wide value; None when nothing applies."""
        lower = listener.lower()
        if mechanism is not None and (lower, mechanism.lower(), name) in self.listener_scoped:
            return self.listener_scoped[(lower, mechanism.lower(), name)]
        if (lower, None, name) in self.listener_scoped:
            return self.listener_scoped[(lower, None, name)]
        return self._values[name] if fallback else None

    def security_protocol(self, listener: str) -> str:
        """A listener's security protocol (listener.security.protocol.map)."""
        for item in self._values["listener.security.protocol.map"]:
            name, _, protocol = item.partition(":")
            if name.strip() == listener:
                return protocol.strip()
        raise ConfigError(f"listener {listener} has no entry in listener.security.protocol.map")

    @property
    def inter_broker_listener(self) -> str:
        """inter.broker.listener.name; else the listener named by security.inter.broker.protocol
        (Kafka's older setting, default PLAINTEXT: with `listeners=SSL://...,PLAINTEXT://...`
        brokers talk over PLAINTEXT, as Kafka's do). When that was set explicitly and names no
        listener, the start is refused. Where Kafka refuses a start whose listeners include no
        PLAINTEXT listener and name no inter-broker listener, odradek takes the first listener."""
        if self._values["inter.broker.listener.name"]:
            return str(self._values["inter.broker.listener.name"])
        by_protocol = str(self._values["security.inter.broker.protocol"])
        if self.sources["security.inter.broker.protocol"] != "default" or any(
            name == by_protocol for name, _h, _p in self.listeners
        ):
            return by_protocol
        return self.listeners[0][0]

    @property
    def listeners(self) -> list[tuple[str, str, int]]:
        return [_split_listener(x) for x in self._values["listeners"]]

    @property
    def advertised(self) -> list[tuple[str, str, int]]:
        return [_split_listener(x) for x in self._values["advertised.listeners"]]


def _split_listener(item: str) -> tuple[str, str, int]:
    name, _, rest = item.partition("://")
    host, _, port = rest.rpartition(":")
    return name, host, int(port)


def reference_markdown() -> str:
    """docs/configuration.md, generated from SETTINGS (see scripts/gen-docs.py)."""
    lines = [
        "# Broker configuration reference",
        "",
        "Generated from `src/odradek/broker/settings/` by `python scripts/gen-docs.py`; do not edit by hand.",
        "",
        "Settings use Apache Kafka's names and defaults. Give them in a `server.properties` file",
        "(`odradek broker --config FILE`) or one by one (`--override key=value`, repeatable; overrides win).",
        "An unknown or invalid setting stops startup with a message naming it. Settings marked *dynamic* can",
        "be changed at runtime with IncrementalAlterConfigs on the broker resource; a *topic override* is the",
        "per-topic name for CreateTopics / AlterConfigs.",
        "",
        "A setting whose status is *planned* is declared with Kafka's name and default (DescribeConfigs",
        "shows it) but not implemented yet: setting it explicitly (file, `--override`, AlterConfigs, a topic",
        "config) is refused with a message naming the setting and what it waits for.",
        "",
        "| setting | type | default | topic override | dynamic | status | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        default = (
            ",".join(s.default)
            if isinstance(s.default, list)
            else str(s.default).lower()
            if isinstance(s.default, bool)
            else str(s.default)
        )
        lines.append(
            f"| `{s.name}` | {s.type} | `{default}` | {('`' + s.topic_name + '`') if s.topic_name else ''} "
            f"| {'yes' if s.dynamic else ''} | {('planned: ' + s.planned) if s.planned else ''} | {s.doc} |"
        )
    return "\n".join(lines) + "\n"
