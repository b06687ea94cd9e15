"""A replica fetcher lets go of each Fetch answer before it sends the next (issue 26).

A Fetch answer's records are views of the receive buffer the connection's frame reader filled
(protocol/framing.py); the reader reuses that buffer for a later large frame only once no view
of it is left, else it allocates a new one (zeroed, faulted in: for every answer of a busy
follower). Here the leader's side is a stand-in endpoint that answers each Fetch with the
leader's next batch as a view of a buffer of its own, and notes, when the next Fetch comes,
whether the previous buffer can grow again (a bytearray cannot while a view of it exists).
The follower's partition and log are real (tmp_path).
"""

from __future__ import annotations

import asyncio

from support.batches import batch

from odradek.broker.partition import Partition
from odradek.broker.replication.fetcher import FetcherConfig, ReplicaFetcher
from odradek.broker.replication.fetcher_state import FetcherState, PartitionData
from odradek.cluster.metadata import BrokerInfo, PartitionInfo
from odradek.storage import LogConfig, LogManager

NOW = 1_700_000_000_000


class BufferedLeader:
    """Answers Fetch with `answers` in turn (records in a buffer per answer), then waits."""

    def __init__(self, answers: list[bytes], high_watermark: int) -> None:
        self.answers = list(answers)
        self.high_watermark = high_watermark
        self.previous: bytearray | None = None
        self.released: list[bool] = []  # per Fetch after the first: was the last answer's buffer free
        self.drained = asyncio.Event()

    async def fetch(self, state: FetcherState) -> dict[tuple[str, int], PartitionData]:
        state.take_changes()
        reqs = state.requests()
        if self.previous is not None:
            try:
                self.previous.append(0)
            except BufferError:
                self.released.append(False)
            else:
                del self.previous[-1]
                self.released.append(True)
            self.previous = None
        if not self.answers:
            self.drained.set()
            await asyncio.Event().wait()  # a leader with nothing new: the fetch waits
        buf = bytearray(self.answers.pop(0))
        self.previous = buf
        return {r.key: PartitionData(0, self.high_watermark, 0, memoryview(buf)) for r in reqs}

    def close(self) -> None:
        pass


def test_the_previous_answers_buffer_is_free_when_the_next_fetch_is_sent(tmp_path):
    logs = LogManager([str(tmp_path / "logs")], LogConfig())
    logs.load()
    try:
        leader_log = logs.create_log("leader", 0, LogConfig())
        leader = Partition("leader", 0, leader_log, 1, lambda p, n: None)
        leader.update(PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=4), NOW)
        for _ in range(3):
            leader.append_as_leader(batch(2, size=4000), NOW, 1)
        answers = [leader.log.read_bytes(o, 1 << 20, max_offset=o + 2) for o in (0, 2, 4)]

        part = Partition("t", 0, logs.create_log("t", 0, LogConfig()), 2, lambda p, n: None)
        part.update(PartitionInfo(0, 1, (1, 2), (1, 2), leader_epoch=4), NOW)

        async def main() -> BufferedLeader:
            fetcher = ReplicaFetcher(2, BrokerInfo(1, "127.0.0.1", 1), 0, FetcherConfig(), None, lambda: 7)  # type: ignore[arg-type]
            endpoint = BufferedLeader(answers, high_watermark=6)
            fetcher.endpoint = endpoint  # type: ignore[assignment]
            fetcher.add(part)
            await asyncio.wait_for(endpoint.drained.wait(), 10)
            await fetcher.stop()
            return endpoint

        endpoint = asyncio.run(main())
        assert part.log_end_offset == 6  # every answer was applied
        assert endpoint.released == [True, True, True]
    finally:
        logs.shutdown()
