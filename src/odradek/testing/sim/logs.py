"""What the logs hold at the end of a run, read straight from the brokers' storage.

`read_log` decodes a partition's log from its start up to an offset: data records (value,
producer id, transactional or not) and transaction markers. `fates` says what happened to
each transactional record (committed, aborted, or still open: no marker after it), so the
checker knows, independently of the broker's read_committed path, what a read_committed
reader must and must not see. `final_read` is the clients' view: a fresh consumer reading
every partition from the beginning to its end offset (the high watermark, or for
read_committed the last stable offset).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.client.aio import AIOConsumer
from odradek.client.consumer.subscription import TopicPartition
from odradek.protocol.records import decode_control_record, decode_records, iter_batches

if TYPE_CHECKING:
    from odradek.storage import Log
    from odradek.testing.sim.cluster import SimCluster

ABORT, COMMIT = 0, 1
PLAIN, COMMITTED, ABORTED, OPEN = "plain", "committed", "aborted", "open"


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    value: str | None  # None: a transaction marker
    producer_id: int
    transactional: bool
    marker: int = -1  # ABORT or COMMIT for a marker


def read_log(lg: Log, upto: int) -> list[LogRecord]:
    """Every record of `lg` from its start to `upto` (exclusive)."""
    out: list[LogRecord] = []
    offset = lg.log_start_offset
    while offset < upto:
        data = lg.read_bytes(offset, 1 << 20, max_offset=upto)
        if not data:
            break
        next_offset = offset
        for h in iter_batches(data, validate=False):
            next_offset = h.next_offset
            if h.is_control:
                ctl = decode_control_record(data, h.position)
                out.append(LogRecord(h.base_offset, None, h.producer_id, True, ctl[1] if ctl else -1))
                continue
            for r in decode_records(data, h.position):
                if r.offset < upto:
                    value = r.value.decode() if r.value is not None else ""
                    out.append(LogRecord(r.offset, value, h.producer_id, h.is_transactional))
        if next_offset <= offset:
            break
        offset = next_offset
    return out


def fates(records: list[LogRecord]) -> dict[int, str]:
    """offset -> PLAIN (not transactional), COMMITTED, ABORTED or OPEN, for every data record."""
    out: dict[int, str] = {}
    pending: dict[int, list[int]] = {}
    for r in records:
        if r.value is None:
            fate = COMMITTED if r.marker == COMMIT else ABORTED
            for o in pending.pop(r.producer_id, []):
                out[o] = fate
        elif r.transactional:
            pending.setdefault(r.producer_id, []).append(r.offset)
            out[r.offset] = OPEN
        else:
            out[r.offset] = PLAIN
    return out


async def final_read(
    cluster: SimCluster, topic: str, partitions: int, committed: bool, timeout: float
) -> dict[int, list[tuple[int, str]]]:
    """Every record a fresh consumer reads, per partition, up to the end offsets it is told."""
    from odradek.testing.sim.workload import client_config

    name = "final-rc" if committed else "final-ru"
    c = AIOConsumer(
        config=client_config(
            cluster,
            name,
            isolation_level="read_committed" if committed else "read_uncommitted",
            auto_offset_reset="earliest",
        )
    )
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = await c.end_offsets(tps, timeout)
        out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        deadline = cluster.loop.time() + timeout
        while True:
            done = True
            for tp in tps:
                if await c.position(tp, timeout) < ends[tp]:
                    done = False
            if done:
                return out
            if cluster.loop.time() > deadline:
                raise TimeoutError(f"{name}: not at the end offsets {dict(ends)} after {timeout:.0f} s")
            for r in await c.poll(0.5):
                if r.offset < ends[TopicPartition(topic, r.partition)]:
                    out[r.partition].append((r.offset, r.value.decode() if r.value is not None else ""))
    finally:
        try:
            await asyncio.wait_for(c.close(), 5)
        except Exception:  # noqa: BLE001 - the reading is what matters
            pass
