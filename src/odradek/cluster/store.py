"""The metadata store: where topics, partitions and brokers are kept, behind one protocol.

`LocalMetadataStore` (local.py) implements it for the single node, in a file of the data
directory; a ZooKeeper store implements it for a cluster. Callers change metadata only
through it, and every broker reacts to the changes it publishes: a listener gets a
`MetadataDelta` (the snapshot before and after) for each change, in order, and creates or
deletes logs, becomes leader or follower, loads or unloads coordinator shards from it.
Nothing creates a log as a side effect of writing metadata.

All methods run on the broker's event loop. A write returns once the new snapshot is in
place; whether the listeners have already run by then is the store's business: the local
store runs them before returning (so a topic's logs exist when CreateTopics answers, as a
single Kafka broker in KRaft mode would have them moments later), a ZooKeeper store runs
them when its watches fire.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

from odradek.cluster.metadata import BrokerInfo, ClusterSnapshot, MetadataDelta, TopicInfo


class MetadataError(Exception):
    """A metadata write that cannot be done as asked."""


class TopicExistsError(MetadataError):
    pass


class MetadataTimeout(MetadataError):
    """The write was made but this broker did not see its effect in time."""


class UnknownTopicError(MetadataError):
    pass


class MetadataUnavailable(MetadataError):
    """The store could not be reached for the write (ZooKeeper's session expired, or the
    connection was lost under the call): not made, or not known to be. A request handler
    answers it with an error code (Kafka's, for a ZooKeeper error: UNKNOWN_SERVER_ERROR)."""


class MetadataListener(Protocol):
    async def on_metadata(self, delta: MetadataDelta) -> None:
        """Apply one change. Called in the order changes happened, one at a time."""
        ...


class MetadataStore(Protocol):
    @property
    def snapshot(self) -> ClusterSnapshot:
        """The newest snapshot; replaced whole on every change, never mutated."""
        ...

    def add_listener(self, listener: MetadataListener) -> None: ...

    async def start(self) -> None:
        """Publish what is stored (as a delta from the empty snapshot) to the listeners."""
        ...

    async def stop(self) -> None: ...

    async def register_broker(self, broker: BrokerInfo) -> None:
        """Make this broker known (with the endpoint it serves clients on)."""
        ...

    async def create_topic(
        self,
        name: str,
        assignment: Sequence[Sequence[int]],
        configs: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        """A new topic with one replica list per partition (the first replica leads)."""
        ...

    async def delete_topic(self, name: str, timeout_s: float | None = None) -> TopicInfo:
        """Delete a topic; returns once every broker has dropped it from its metadata
        (`MetadataTimeout` after `timeout_s`, the store's own wait by default: the deletion
        goes on)."""
        ...

    async def create_partitions(self, name: str, new_assignment: Sequence[Sequence[int]]) -> TopicInfo:
        """Add partitions to a topic, one replica list per new partition."""
        ...

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace a topic's overrides."""
        ...

    async def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic settings of one broker (its id) or of every broker ("<default>"),
        kept across restarts; the snapshot's `broker_configs` carries them to every broker."""
        ...

    async def set_user_configs(self, user: str | None, configs: Mapping[str, str]) -> None:
        """Replace the settings of one user (its SCRAM credentials and quotas; empty removes the
        user; None: the default user's quotas), kept across restarts; the snapshot's
        `user_configs` carries them to every broker."""
        ...

    async def set_client_configs(self, client_id: str | None, configs: Mapping[str, str]) -> None:
        """Replace the settings (quotas) of one client id (None: the default entity)."""
        ...

    async def set_user_client_configs(
        self, user: str | None, client_id: str | None, configs: Mapping[str, str]
    ) -> None:
        """Replace the settings (quotas) of one user's client id (None for either: the default)."""
        ...
