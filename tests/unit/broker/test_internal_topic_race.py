"""Two brokers of a cluster answer FindCoordinator at once and both create `__consumer_offsets`:
the one that loses the race gets TopicExistsError from the metadata store. Kafka's auto-creation
takes TOPIC_ALREADY_EXISTS as done; before, odradek logged a WARNING and the FindCoordinator's
answer said the creation had failed (seen in the simulator: `cannot create __consumer_offsets:
Topic '__consumer_offsets' already exists.`)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from odradek.broker.config import BrokerConfig
from odradek.broker.topic_admin import TopicAdmin
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.store import TopicExistsError


class LosingStore:
    """A metadata store in which another broker has just created every topic asked for."""

    def __init__(self) -> None:
        self.snapshot = SimpleNamespace(topics={}, brokers=[SimpleNamespace(node_id=1, rack=None)])

    async def create_topic(self, name, assignment, configs, topic_id):  # noqa: ANN001, ANN201
        raise TopicExistsError(f"Topic '{name}' already exists.")


def test_an_internal_topic_another_broker_created_first_is_not_an_error(caplog):
    config = BrokerConfig({})
    admin = TopicAdmin(LosingStore(), TopicConfigs(config), config, node_id=1)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="odradek"):
        info = asyncio.run(admin.ensure_internal_topic("__consumer_offsets", 3, 1, {"cleanup.policy": "compact"}))
    assert info is None  # not in this broker's metadata yet: FindCoordinator answers "not available"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
