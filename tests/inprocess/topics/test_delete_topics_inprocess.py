"""DeleteTopics on a single broker in this process (k20): the topics of one request deleted
together, each with its own answer; a topic deleted once is gone (a second deletion in the same
request or later is UNKNOWN_TOPIC_OR_PARTITION); by topic id (v6)."""

from __future__ import annotations

import asyncio
import datetime

from support.inprocess import InProcessBroker

from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode

MS = datetime.timedelta(milliseconds=1)


def nested(api_key: int, version: int, class_name: str, /, **fields):
    return getattr(messages.module_of(messages.request_class(api_key, version)), class_name)(**fields)


async def create(b: InProcessBroker, name: str) -> None:
    t = nested(19, 7, "CreatableTopic", name=name, num_partitions=2, replication_factor=-1, assignments=(), configs=())
    r = await b.call(19, 7, topics=(t,), timeout=1000 * MS, validate_only=False)
    assert r.topics[0].error_code == 0, r.topics[0].error_message


def test_delete_topics_answers_each_topic(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path) as b:
            for name in ("a", "b", "c"):
                await create(b, name)
            r = await b.call(20, 4, topic_names=("a", "b", "missing"), timeout=5000 * MS)
            assert {t.name: int(t.error_code) for t in r.responses} == {
                "a": 0,
                "b": 0,
                "missing": ErrorCode.unknown_topic_or_partition,
            }
            assert set(b.services.snapshot.topics) == {"c"}
            again = await b.call(20, 4, topic_names=("a",), timeout=5000 * MS)
            assert int(again.responses[0].error_code) == ErrorCode.unknown_topic_or_partition
            c_id = b.services.snapshot.topics["c"].topic_id
            by_id = await b.call(
                20, 6, topics=(nested(20, 6, "DeleteTopicState", name=None, topic_id=c_id),), timeout=0 * MS
            )
            assert [(t.name, int(t.error_code)) for t in by_id.responses] == [("c", 0)]  # one node: done at once
            assert b.services.snapshot.topics == {}

    asyncio.run(main())
