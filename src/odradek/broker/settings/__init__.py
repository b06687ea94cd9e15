"""Every broker setting, declared once, with Kafka's names and defaults.

A setting is a `Setting(name, type, default, doc, validate=..., topic_name=..., dynamic=...,
planned=...)` (`setting.py`), declared in the module of its area: the broker's own
(`server.py`), logs and Fetch (`log.py`), the coordinators (`coordinators.py`), TLS (`ssl.py`). The CLI's
`--override key=value`, the properties file, `odradek config` and the configuration reference
(docs/configuration.md) all derive from SETTINGS; `broker/config.py` turns them into the
effective `BrokerConfig`. Unknown or invalid settings stop startup with a message naming them.
"""

from __future__ import annotations

from odradek.broker.settings.authorizer import AUTHORIZER
from odradek.broker.settings.coordinators import GROUPS, TRANSACTIONS
from odradek.broker.settings.log import FETCH, LOG
from odradek.broker.settings.quotas import QUOTAS
from odradek.broker.settings.sasl import LISTENER_SCOPED, MECHANISM_SCOPED, SASL
from odradek.broker.settings.server import BASICS, INTERBROKER, OPERATIONS
from odradek.broker.settings.setting import INT_MAX, LONG_MAX, TYPES, ConfigError, Setting
from odradek.broker.settings.ssl import SSL, SSL_NAMES

# The reference (docs/configuration.md) lists them in this order.
SETTINGS: tuple[Setting, ...] = (
    BASICS + INTERBROKER + LOG + GROUPS + TRANSACTIONS + FETCH + OPERATIONS + SSL + SASL + AUTHORIZER + QUOTAS
)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_TOPIC_NAME: dict[str, Setting] = {s.topic_name: s for s in SETTINGS if s.topic_name}
# Settings that may also be given for one listener, as listener.name.<lower-case name>.<setting>
# (BrokerConfig.for_listener), and those also for one SASL mechanism on it,
# listener.name.<listener>.<mechanism>.<setting>.
PER_LISTENER: frozenset[str] = SSL_NAMES | LISTENER_SCOPED

__all__ = [
    "BY_NAME",
    "BY_TOPIC_NAME",
    "INT_MAX",
    "LONG_MAX",
    "MECHANISM_SCOPED",
    "PER_LISTENER",
    "SETTINGS",
    "TYPES",
    "ConfigError",
    "Setting",
]
