"""Every broker setting, declared once, with Kafka's names and defaults.

A setting is a `Setting(name, type, default, doc, validate=..., topic_name=..., dynamic=...,
planned=...)` (`setting.py`), declared in the module of its area: the broker's own
(`server.py`), logs and Fetch (`log.py`), the coordinators (`coordinators.py`). The CLI's
`--override key=value`, the properties file, `odradek config` and the configuration reference
(docs/configuration.md) all derive from SETTINGS; `broker/config.py` turns them into the
effective `BrokerConfig`. Unknown or invalid settings stop startup with a message naming them.
"""

from __future__ import annotations

from odradek.broker.settings.coordinators import GROUPS, TRANSACTIONS
from odradek.broker.settings.log import FETCH, LOG
from odradek.broker.settings.sasl import SASL
from odradek.broker.settings.server import BASICS, INTERBROKER, OPERATIONS
from odradek.broker.settings.setting import INT_MAX, LONG_MAX, TYPES, ConfigError, Setting

# The reference (docs/configuration.md) lists them in this order.
SETTINGS: tuple[Setting, ...] = BASICS + INTERBROKER + LOG + GROUPS + TRANSACTIONS + FETCH + OPERATIONS + SASL
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_TOPIC_NAME: dict[str, Setting] = {s.topic_name: s for s in SETTINGS if s.topic_name}

__all__ = ["BY_NAME", "BY_TOPIC_NAME", "INT_MAX", "LONG_MAX", "SETTINGS", "TYPES", "ConfigError", "Setting"]
