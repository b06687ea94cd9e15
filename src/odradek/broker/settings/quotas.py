"""Client quota settings (Kafka's QuotaConfig): the rate windows of the quota sensors
(broker/quotas/). The quotas themselves are per user and client id, set with
AlterClientQuotas (kafka-configs --entity-type users|clients, `odradek quotas`)."""

from __future__ import annotations

from odradek.broker.settings.setting import Setting, at_least

QUOTAS: tuple[Setting, ...] = (
    Setting(
        "quota.window.num",
        "int",
        11,
        "Number of samples kept by each client quota's rate (produce, fetch, request).",
        validate=at_least(1),
    ),
    Setting(
        "quota.window.size.seconds",
        "int",
        1,
        "Length of each sample of a client quota's rate (produce, fetch, request), in seconds.",
        validate=at_least(1),
    ),
    Setting(
        "controller.quota.window.num",
        "int",
        11,
        "Number of samples kept by each controller mutation quota's rate.",
        validate=at_least(1),
    ),
    Setting(
        "controller.quota.window.size.seconds",
        "int",
        1,
        "Length of each sample of a controller mutation quota's rate, in seconds.",
        validate=at_least(1),
    ),
)
