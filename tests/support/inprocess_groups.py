"""The group coordinator in an in-process broker (support/inprocess.py): a broker set up for
group tests, the topic they commit offsets for, and waiting for the coordinator to load
(tests/inprocess/groups, tests/inprocess/txn)."""

from __future__ import annotations

import datetime

from support.inprocess import InProcessBroker

from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode as E

CONFIG = {
    "node.id": "7",
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "10",
}


def broker(tmp_path, **overrides: str) -> InProcessBroker:
    return InProcessBroker(tmp_path / "data", {**CONFIG, **overrides})


async def create_topic_t(b: InProcessBroker) -> None:
    """The topic "t" (2 partitions) the tests commit offsets for: OffsetCommit refuses unknown topics."""
    mod = messages.module_of(messages.request_class(19, 7))
    t = mod.CreatableTopic(name="t", num_partitions=2, replication_factor=-1, assignments=(), configs=())
    r = await b.call(19, 7, topics=(t,), timeout=datetime.timedelta(seconds=10), validate_only=False)
    assert r.topics[0].error_code == 0, r.topics[0].error_message


async def find_coordinator(b: InProcessBroker, group: str = "g") -> None:
    r = await b.call(10, 4, key_type=0, coordinator_keys=(group,))
    assert r.coordinators[0].error_code == E.none
    await loaded(b)


async def loaded(b: InProcessBroker) -> None:
    runtime = b.services.group_coordinator.runtime
    await runtime.wait_loaded()
    assert not runtime.loading
