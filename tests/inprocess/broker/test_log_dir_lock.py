"""Two brokers in one process: one per log directory (storage/log_dir.py `LogDirLocks`).

A second broker started on the directory of a running one refuses to start, and the first
keeps serving; several brokers on distinct directories start side by side (the simulator and
these tests run them in one process); a broker stopped cleanly releases its directory, so one
restarted in the same process takes it."""

from __future__ import annotations

import asyncio
import re

import pytest
from support.inprocess import InProcessBroker
from support.proto import batch, create_topic, produce_ok
from support.raw import RawConnection

from odradek.storage import LogDirInUseError


def _produce(b: InProcessBroker, topic: str, n: int, *, create: bool = False) -> int:
    """Over TCP, from a worker thread (the broker runs on this event loop): the base offset."""
    with RawConnection(f"127.0.0.1:{b.broker.bound[0][1]}") as c:
        if create:
            create_topic(c, topic)
        return produce_ok(c, topic, [batch(*[(None, b"v")] * n)]).base_offset


def test_a_second_broker_on_the_same_directory_refuses_to_start_and_the_first_keeps_serving(tmp_path):
    data = tmp_path / "data"

    async def main():
        async with InProcessBroker(data) as first:
            assert await asyncio.to_thread(_produce, first, "t", 3, create=True) == 0
            second = InProcessBroker(data)
            with pytest.raises(LogDirInUseError, match=re.escape(f"Failed to acquire lock on file .lock in {data}:")):
                await second.start()
            await second.stop()  # as run_broker does after a refused start: the first's lock stays
            assert second.broker.log_manager is None  # it never opened the logs
            assert await asyncio.to_thread(_produce, first, "t", 2) == 3
            with pytest.raises(LogDirInUseError):
                await InProcessBroker(data).start()  # still held by the first
        async with InProcessBroker(data) as restarted:  # released at the first's clean stop
            assert await asyncio.to_thread(_produce, restarted, "t", 1) == 5

    asyncio.run(main())


def test_brokers_on_distinct_directories_run_side_by_side_in_one_process(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "a") as a, InProcessBroker(tmp_path / "b") as b:
            for broker in (a, b):
                assert await asyncio.to_thread(_produce, broker, "t", 2, create=True) == 0

    asyncio.run(main())
