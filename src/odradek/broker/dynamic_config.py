"""Dynamic broker settings from the metadata, applied to this broker.

AlterConfigs and IncrementalAlterConfigs of a broker resource write the new settings to
the metadata (in a cluster ZooKeeper's /config/brokers/<default> and /config/brokers/<id>, as
Kafka keeps them; on a single node its metadata file), so they survive restarts and reach
every broker. This listener lays them over the static configuration whenever they change
(this broker's own over every broker's over the file) and passes the effect on: the log
manager's settings (the cleaner's), topic defaults for every log that does not override them,
and a TLS listener's keystore and truststore (this broker's own listener.name.<l>.ssl.*,
broker/security/tls_reload.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from odradek.broker.config import LISTENER_PREFIX
from odradek.cluster.metadata import DEFAULT_BROKER_ENTITY, MetadataDelta, TopicInfo
from odradek.storage.config import LogManagerConfig

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig
    from odradek.broker.security.tls_reload import TlsListeners
    from odradek.broker.topic_configs import TopicConfigs
    from odradek.storage import LogManager

log = logging.getLogger("odradek.broker.config")


class DynamicConfigListener:
    def __init__(
        self,
        node_id: int,
        config: BrokerConfig,
        topic_configs: TopicConfigs,
        log_manager: LogManager,
        reconfigure_topics: Callable[[Iterable[TopicInfo]], None],
        tls: TlsListeners | None = None,
    ) -> None:
        """`reconfigure_topics`: every hosted log of these topics takes its effective config again
        (`ReplicaManager.reconfigure_all`); `tls`: the TLS listeners, whose contexts are built again
        when their dynamic keystore or truststore settings change."""
        self.tls = tls
        self.node_id = node_id
        self.config = config
        self.topic_configs = topic_configs
        self.log_manager = log_manager
        self.reconfigure_topics = reconfigure_topics

    async def on_metadata(self, delta: MetadataDelta) -> None:
        me = str(self.node_id)
        before, after = delta.before.broker_configs, delta.after.broker_configs
        if before.get(DEFAULT_BROKER_ENTITY) == after.get(DEFAULT_BROKER_ENTITY) and before.get(me) == after.get(me):
            return
        config = self.config
        changed = config.apply_dynamic(after.get(DEFAULT_BROKER_ENTITY, {}), after.get(me, {}))
        if not changed:
            return
        log.info(
            "dynamic broker settings now in effect: %s",
            ", ".join(n if n.startswith(LISTENER_PREFIX) else f"{n}={config[n]}" for n in changed),
        )
        listeners = {n[len(LISTENER_PREFIX) :].partition(".")[0] for n in changed if n.startswith(LISTENER_PREFIX)}
        if listeners and self.tls is not None:
            self.tls.reload(config, [x for name in listeners if (x := self.tls.by_lower_name(name))])
            if len(listeners) == len(changed):
                return
        self.log_manager.reconfigure(LogManagerConfig.from_broker(config))  # read on its next pass
        self.topic_configs.refresh()  # topic defaults: every topic without an override takes the new value
        self.reconfigure_topics(delta.after.topics.values())
