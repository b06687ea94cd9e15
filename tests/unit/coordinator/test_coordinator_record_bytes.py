"""The batches the coordinators append stay byte for byte what they were (Kafka's tools read
`__consumer_offsets` and `__transaction_state`: tests/reference/test_txn_log_format.py,
tests/coordinator/test_txn_offsets_broker.py).

data/coordinator_batches.json was recorded from the coordinators as they were before the
shared runtime (b905108), driven through the same scenario with the same clock and member
ids: joins and syncs (a dynamic and a static member), plain, retained and transactional
offset commits, a leave, OffsetDelete and DeleteGroups; then InitProducerId, AddPartitions,
a commit, an epoch fence and its abort, and an expired transactional id."""

from __future__ import annotations

import asyncio
import itertools
import json
import pathlib
import uuid

from odradek.coordinator.group import GroupConfig, GroupCoordinator
from odradek.coordinator.group.requests import (
    JoinRequest,
    LeaveRequest,
    OffsetCommitRequest,
    OffsetEntry,
    SyncRequest,
)
from odradek.coordinator.txn import TransactionCoordinator, TxnConfig

GOLDEN = pathlib.Path(__file__).parent / "data" / "coordinator_batches.json"


class Log:
    """The partitions seam over lists of batches, every append committed at once."""

    def __init__(self) -> None:
        self.batches: dict[tuple[str, int], list[bytes]] = {}

    def append_as_leader(self, topic: str, partition: int, leader_epoch: int, batch: bytes) -> tuple[int, int]:
        log = self.batches.setdefault((topic, partition), [])
        log.append(batch)
        return len(log) - 1, len(log) - 1

    async def wait_for_commit(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None:
        pass

    def read_log_bytes(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        return b"", 0

    def log_start_offset(self, topic: str, partition: int) -> int:
        return 0

    def log_end_offset(self, topic: str, partition: int) -> int:
        return 0

    def high_watermark(self, topic: str, partition: int) -> int:
        return 0


class Markers:
    async def write_markers(self, *args: object) -> bool:
        return True


async def scenario(log: Log) -> None:
    now = [1_700_000_000_000]

    def clock() -> int:
        return now[0]

    def join(group: str, member: str, instance: str | None, meta: bytes, host: str) -> JoinRequest:
        return JoinRequest(group, member, instance, "cli", host, 10000, 20000, "consumer", (("range", meta),), True)

    config = GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0)
    gc = GroupCoordinator(config, log, lambda: asyncio.sleep(0), clock=clock)
    await gc.start()
    gc.on_elected("__consumer_offsets", 0, 3)
    mid = (await gc.join(join("g", "", None, b"\x00\x01meta", "/1.2.3.4"))).member_id
    r = await gc.join(join("g", mid, None, b"\x00\x01meta", "/1.2.3.4"))
    now[0] += 5
    await gc.sync(SyncRequest("g", r.generation, mid, None, None, None, {mid: b"assign"}))
    now[0] += 5
    offsets = (OffsetEntry("t", 0, 10, 3, "md"), OffsetEntry("t", 1, 11, -1, None))
    await gc.commit_offsets(OffsetCommitRequest("g", mid, None, 1, offsets))
    await gc.commit_offsets(
        OffsetCommitRequest("simple", offsets=(OffsetEntry("t", 0, 5, -1, ""),), retention_ms=60000)
    )
    now[0] += 5
    txn = OffsetCommitRequest(
        "g", mid, None, 1, (OffsetEntry("t", 0, 20, 4, "x"),), transactional=True, producer_id=1000, producer_epoch=2
    )
    await gc.commit_offsets(txn)
    gc.complete_transaction(0, 1000, 2, True)
    now[0] += 5
    await gc.leave(LeaveRequest("g", ((mid, None),)))
    now[0] += 5
    await gc.delete_offsets("g", [("t", [1])])
    await gc.delete_groups(["g", "simple"])
    r = await gc.join(join("st", "", "inst-1", b"m", "/h"))
    await gc.sync(SyncRequest("st", r.generation, r.member_id, "inst-1", "consumer", "range", {r.member_id: b"a"}))
    await gc.join(join("st", "", "inst-1", b"m", "/h"))  # the static member again: same subscription
    await gc.stop()

    pids = iter(range(5000, 6000))

    async def next_pid() -> int:
        return next(pids)

    async def settle() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    tc = TransactionCoordinator(
        TxnConfig(num_partitions=1, id_expiration_ms=100),
        log,
        lambda: asyncio.sleep(0),
        next_pid,
        Markers(),
        clock=clock,
    )
    await tc.start()
    tc.on_elected("__transaction_state", 0, 7)
    _, pid, epoch = await tc.init_producer_id("tx", 60000)
    now[0] += 5
    await tc.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1), ("u", 0)])
    now[0] += 5
    await tc.end_txn("tx", pid, epoch, True)
    await settle()
    now[0] += 5
    await tc.add_partitions("tx", pid, epoch, [("t", 2)])
    await tc.init_producer_id("tx", 60000)  # fences the open transaction: aborted with a bumped epoch
    await settle()
    await tc.init_producer_id("tx", 60000)
    now[0] += 1000
    tc.remove_expired()
    await settle()
    await tc.stop()


def test_the_coordinators_append_the_same_bytes_as_before(monkeypatch):
    ids = itertools.count()
    monkeypatch.setattr(uuid, "uuid4", lambda: f"00000000-0000-0000-0000-{next(ids):012d}")
    log = Log()
    asyncio.run(scenario(log))
    got = {f"{t}-{p}": [b.hex() for b in batches] for (t, p), batches in sorted(log.batches.items())}
    expected = json.loads(GOLDEN.read_text())
    assert {k: len(v) for k, v in got.items()} == {"__consumer_offsets-0": 10, "__transaction_state-0": 9}
    for key in expected:
        for i, (ours, theirs) in enumerate(zip(got[key], expected[key])):
            assert ours == theirs, f"{key} batch {i} differs"
    assert got == expected
