"""Metadata's auto-creation on a single broker in this process (k03): the topic is created with
num.partitions; with default.replication.factor above the live brokers Kafka (ZooKeeper mode,
AutoTopicCreationManager) answers INVALID_REPLICATION_FACTOR and creates nothing, and so does
odradek, without logging an error."""

from __future__ import annotations

import asyncio
import logging

from support.inprocess import InProcessBroker

from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode


async def metadata(b: InProcessBroker, *names: str):
    topic = messages.module_of(messages.request_class(3, 12)).MetadataRequestTopic
    r = await b.call(
        3,
        12,
        topics=tuple(topic(topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    return {t.name: t for t in r.topics}


def test_an_unknown_topic_is_created(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path, {"num.partitions": "3"}) as b:
            t = (await metadata(b, "fresh"))["fresh"]
            assert int(t.error_code) == 0 and len(t.partitions) == 3
            assert "fresh" in b.services.snapshot.topics

    asyncio.run(main())


def test_a_replication_factor_above_the_live_brokers_is_invalid_replication_factor(tmp_path, caplog):
    async def main():
        async with InProcessBroker(tmp_path, {"default.replication.factor": "3"}) as b:
            with caplog.at_level(logging.INFO, logger="odradek"):
                t = (await metadata(b, "wide"))["wide"]
            assert int(t.error_code) == ErrorCode.invalid_replication_factor
            assert "wide" not in b.services.snapshot.topics

    asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info], caplog.text
    assert "replication factor 3 larger than available brokers: 1" in caplog.text
