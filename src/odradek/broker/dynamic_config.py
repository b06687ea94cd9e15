"""Dynamic broker settings from the metadata, applied to this broker.

AlterConfigs and IncrementalAlterConfigs of a broker resource write the new settings to
the metadata (in a cluster ZooKeeper's /config/brokers/<default> and /config/brokers/<id>, as
Kafka keeps them; on a single node its metadata file), so they survive restarts and reach
every broker. This listener lays them over the static configuration whenever they change
(this broker's own over every broker's over the file) and passes the effect on: topic
defaults for every log that does not override them, the log cleaner's settings.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from odradek.cluster.metadata import DEFAULT_BROKER_ENTITY, MetadataDelta

if TYPE_CHECKING:
    from odradek.broker.services import BrokerServices

log = logging.getLogger("odradek.broker.config")


class DynamicConfigListener:
    def __init__(self, services: BrokerServices) -> None:
        self.services = services

    async def on_metadata(self, delta: MetadataDelta) -> None:
        me = str(self.services.node_id)
        before, after = delta.before.broker_configs, delta.after.broker_configs
        if before.get(DEFAULT_BROKER_ENTITY) == after.get(DEFAULT_BROKER_ENTITY) and before.get(me) == after.get(me):
            return
        s = self.services
        changed = s.config.apply_dynamic(after.get(DEFAULT_BROKER_ENTITY, {}), after.get(me, {}))
        if not changed:
            return
        log.info("dynamic broker settings now in effect: %s", ", ".join(f"{n}={s.config[n]}" for n in changed))
        apply_to_storage(s)
        s.topic_configs.refresh()  # topic defaults: every topic without an override takes the new value
        s.replica_manager.reconfigure_all(delta.after.topics.values())


#: dynamic broker settings the log manager reads at run time (its attribute for each)
_STORAGE_SETTINGS = {
    "log.cleaner.backoff.ms": "cleaner_backoff_ms",
    "log.cleaner.dedupe.buffer.size": "cleaner_dedupe_buffer_size",
    "log.cleaner.io.buffer.load.factor": "cleaner_io_buffer_load_factor",
}


def apply_to_storage(services: BrokerServices) -> None:
    """The cleaner's settings, as they now are, to the log manager (read on its next pass)."""
    logs = services.replica_manager.logs
    for name, attr in _STORAGE_SETTINGS.items():
        setattr(logs, attr, services.config[name])
