"""File descriptors independent of the partition count, on a broker in this process (issue 28):
with ``log.open.segments.max=100``, 1,000 partitions are created, written round-robin twice and
read back while this process holds at most 100 segment files open (plus those of the one Fetch
being answered); a creation this process has no descriptors for is refused whole with
POLICY_VIOLATION. (tests/interop/storage/test_open_files.py: the same on a broker process under a
low open-file limit, at 2,000 partitions.)"""

from __future__ import annotations

import asyncio
import logging
import os
import resource

from support.inprocess import InProcessBroker
from support.raw import fetch_from_start, fetched_values, nested

from odradek.protocol.records import Record, build_batch

TOPICS, PER_TOPIC, BUDGET, PER_FETCH = 5, 200, 100, 50


def segment_files_open(root) -> int:
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        n += target.startswith(str(root)) and target.endswith(".log")
    return n


async def create(b: InProcessBroker, name: str, partitions: int, validate_only: bool = False):
    t = nested(
        19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()
    )
    return (await b.call(19, 7, topics=(t,), timeout=60000, validate_only=validate_only)).topics[0]


async def produce(b: InProcessBroker, topic: str, partitions: int, tag: bytes) -> list[int]:
    pds = tuple(
        nested(0, 9, "PartitionProduceData", index=p, records=build_batch([Record(value=tag + b"%d" % p)]))
        for p in range(partitions)
    )
    td = nested(0, 9, "TopicProduceData", name=topic, partition_data=pds)
    r = await b.call(0, 9, acks=-1, timeout=30000, topic_data=(td,))
    return [int(p.error_code) for p in r.responses[0].partition_responses]


async def fetch(b: InProcessBroker, topic: str, partitions: range) -> dict[int, list[bytes]]:
    return fetched_values(await b.call(1, 12, **fetch_from_start(topic, partitions)))


def test_segment_files_open_stay_under_the_budget_while_1000_partitions_are_written_round_robin(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path, {"log.open.segments.max": str(BUDGET)}) as b:
            peak = 0
            for t in range(TOPICS):
                r = await create(b, f"t{t}", PER_TOPIC)
                assert int(r.error_code) == 0, r.error_message
                peak = max(peak, segment_files_open(tmp_path))
            for rnd in range(2):
                for t in range(TOPICS):
                    assert await produce(b, f"t{t}", PER_TOPIC, b"r%d-" % rnd) == [0] * PER_TOPIC
                    peak = max(peak, segment_files_open(tmp_path))
            for t in range(TOPICS):  # most of these files were closed since they were written
                for lo in range(0, PER_TOPIC, PER_FETCH):
                    got = await fetch(b, f"t{t}", range(lo, lo + PER_FETCH))
                    assert all(v == [b"r0-%d" % p, b"r1-%d" % p] for p, v in got.items()), t
                    peak = max(peak, segment_files_open(tmp_path))
            assert peak <= BUDGET + PER_FETCH, peak
            assert b.broker.fs.file_cache.evictions > TOPICS * PER_TOPIC  # closed and reopened

    asyncio.run(main())


def test_a_creation_beyond_the_free_descriptors_is_refused_whole(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="odradek.broker.topics")

    async def main():
        async with InProcessBroker(tmp_path, {"log.open.segments.max": "1000"}) as b:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 200, hard))
            try:
                for validate_only in (True, False):
                    r = await create(b, "big", 400, validate_only)
                    assert int(r.error_code) == 44, r  # POLICY_VIOLATION
                    assert "file descriptors" in r.error_message
                assert "big" not in b.services.snapshot.topics
                assert not [d for d in os.listdir(tmp_path) if d.startswith("big-")]
                assert int((await create(b, "small", 20)).error_code) == 0
                assert await produce(b, "small", 20, b"v") == [0] * 20
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    asyncio.run(main())
    assert "refused to create partitions" in caplog.text
