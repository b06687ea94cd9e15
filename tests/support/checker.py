"""A consistency checker for fault tests: what was acknowledged against what was read.

Producers record every write they attempt and every acknowledgement (partition, offset);
readers record every record they read (partition, offset, value) and the high watermark
each fetch reported. Values are `<producer>-<sequence>`, so order is checkable per producer.
`History.check()` reports, per partition:
- lost: acknowledged, but not read at its acknowledged offset by a reader that read past it
  (acknowledged at an unknown offset: not read at all);
- duplicated: one value read at two different offsets;
- reordered: a producer's values read in an order other than the one it sent them in (the
  first copy of each value: a later copy is reported as duplicated, not again as reordered);
- phantom: a value read that no producer ever attempted;
- moved: a value read at another offset than the one acknowledged for it;
- changed: one offset read with two different values (what a reader saw below the high
  watermark was replaced);
- high watermark backwards: a high watermark a reader saw above the partition's final one
  (`final_high_watermark()`, from the final read): committed offsets gone. A new leader's high
  watermark lagging the old one's for a moment is not one: Kafka's Fetch answers so (only
  ListOffsets waits for it, KIP-207, checked below); such dips are counted in `hw_dips`;
- end offset going backwards: a ListOffsets(latest) answer for a partition lower than an
  earlier one, from any broker (`end_offset()`, fed by a poller asking every leader directly:
  a consumer seeking to the end, or a lag monitor, must never see the log shrink).
A test asserts `check().ok` and prints the report on failure. Acknowledgements keep their
time (`acks_since()`), so a test can also ask whether writes went on after some moment.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field


def value(producer: str, seq: int) -> bytes:
    return f"{producer}-{seq}".encode()


def parse(v: bytes) -> tuple[str, int] | None:
    try:
        producer, _, seq = v.decode().rpartition("-")
        return producer, int(seq)
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass
class Report:
    lost: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    duplicated: dict[int, list[tuple[bytes, list[int]]]] = field(default_factory=dict)
    reordered: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    phantom: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    moved: dict[int, list[tuple[bytes, int, int]]] = field(default_factory=dict)
    changed: dict[int, list[tuple[int, list[bytes]]]] = field(default_factory=dict)
    hw_backwards: list[tuple[str, int, int, int]] = field(default_factory=list)
    hw_dips: int = 0
    end_offset_backwards: list[tuple[str, int, int, int, int, int]] = field(default_factory=list)
    acknowledged: int = 0
    read: int = 0

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.reordered
            or self.phantom
            or self.moved
            or self.changed
            or self.hw_backwards
            or self.end_offset_backwards
        )

    def __str__(self) -> str:
        lines = [f"acknowledged {self.acknowledged}, read {self.read}"]
        for name in ("lost", "duplicated", "reordered", "phantom", "moved", "changed"):
            per = getattr(self, name)
            for p, items in sorted(per.items()):
                lines.append(f"  {name} in partition {p}: {len(items)}, e.g. {items[:5]}")
        for r in self.hw_backwards[:5]:
            lines.append(f"  high watermark backwards: reader {r[0]} partition {r[1]}: saw {r[2]}, final {r[3]}")
        if self.hw_dips:
            lines.append(f"  (a reader's high watermark dipped below an earlier one {self.hw_dips} times: allowed)")
        if self.end_offset_backwards:
            lines.append(f"  end offset backwards: {len(self.end_offset_backwards)} ListOffsets(latest) answers")
        for b in self.end_offset_backwards[:5]:
            lines.append(
                f"  end offset backwards: partition {b[1]}: {b[2]} (leader epoch {b[4]}) -> {b[3]} "
                f"(leader epoch {b[5]}) from {b[0]}"
            )
        return "\n".join(lines)


class History:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempted: set[bytes] = set()
        self.acked: dict[int, dict[int, bytes]] = defaultdict(dict)  # partition -> offset -> value
        self.acked_unplaced: dict[int, set[bytes]] = defaultdict(set)  # acknowledged at an unknown offset
        self.reads: dict[int, list[tuple[int, bytes]]] = defaultdict(list)  # partition -> [(offset, value)]
        self.hw: dict[tuple[str, int], int] = {}
        self.hw_dips = 0  # a reader's high watermark below one it saw before (allowed, counted)
        self.final_hw: dict[int, int] = {}  # partition -> high watermark at the final read
        self.ack_times: list[tuple[float, int]] = []  # (time.monotonic(), partition) of each ack
        self.end_offsets: dict[int, tuple[int, int]] = {}  # partition -> (highest answer, its leader epoch)
        self.end_offset_backwards: list[tuple[str, int, int, int, int, int]] = []

    def attempt(self, v: bytes) -> None:
        with self._lock:
            self.attempted.add(v)

    def ack(self, partition: int, offset: int | None, v: bytes) -> None:
        """An acknowledgement; `offset` None or negative when the client knows the write is
        stored but not where (librdkafka's answer to DUPLICATE_SEQUENCE_NUMBER): such a value
        must then be read somewhere in the partition."""
        with self._lock:
            if offset is None or offset < 0:
                self.acked_unplaced[partition].add(v)
            else:
                self.acked[partition][offset] = v
            self.ack_times.append((time.monotonic(), partition))

    def writers_missing(self, producers: set[str], partitions: int) -> dict[str, list[int]]:
        """For each of `producers` with no acknowledged write in some partition, those partitions."""
        with self._lock:
            by_partition: dict[int, set[str]] = defaultdict(set)
            for p, acks in self.acked.items():
                by_partition[p] |= {x[0] for x in map(parse, acks.values()) if x is not None}
            for p, vs in self.acked_unplaced.items():
                by_partition[p] |= {x[0] for x in map(parse, vs) if x is not None}
        missing = {name: [p for p in range(partitions) if name not in by_partition[p]] for name in sorted(producers)}
        return {name: ps for name, ps in missing.items() if ps}

    def read(self, partition: int, offset: int, v: bytes) -> None:
        with self._lock:
            self.reads[partition].append((offset, v))

    def high_watermark(self, reader: str, partition: int, hw: int) -> None:
        with self._lock:
            before = self.hw.get((reader, partition), -1)
            if hw < before:
                self.hw_dips += 1
            self.hw[(reader, partition)] = max(before, hw)

    def final_high_watermark(self, partition: int, hw: int) -> None:
        """The partition's high watermark once the fault is over (the final read's): every high
        watermark a reader saw must be at most this."""
        with self._lock:
            self.final_hw[partition] = hw

    def end_offset(self, source: str, partition: int, offset: int, leader_epoch: int = -1) -> None:
        """A ListOffsets(latest) answer for `partition` from broker `source`: never lower than an
        earlier answer for that partition, from whichever broker."""
        with self._lock:
            before, before_epoch = self.end_offsets.get(partition, (-1, -1))
            if offset < before:
                self.end_offset_backwards.append((source, partition, before, offset, before_epoch, leader_epoch))
            else:
                self.end_offsets[partition] = (offset, leader_epoch)

    def acks_since(self, since: float, partitions: set[int] | None = None) -> int:
        """How many writes were acknowledged after `since` (a time.monotonic()), in `partitions` (all: None)."""
        with self._lock:
            return sum(1 for t, p in self.ack_times if t > since and (partitions is None or p in partitions))

    def check(self) -> Report:
        with self._lock:
            r = Report(
                acknowledged=sum(len(a) for a in self.acked.values())
                + sum(len(a) for a in self.acked_unplaced.values()),
                hw_backwards=[
                    (reader, p, seen, self.final_hw[p])
                    for (reader, p), seen in sorted(self.hw.items())
                    if p in self.final_hw and seen > self.final_hw[p]
                ],
                hw_dips=self.hw_dips,
                end_offset_backwards=list(self.end_offset_backwards),
            )
            r.read = sum(len(x) for x in self.reads.values())
            for p in set(self.acked) | set(self.reads) | set(self.acked_unplaced):
                reads = sorted(set(self.reads.get(p, [])))
                at: dict[int, bytes] = {}
                where: dict[bytes, set[int]] = defaultdict(set)
                values_at: dict[int, set[bytes]] = defaultdict(set)
                for off, v in reads:
                    at[off] = v
                    where[v].add(off)
                    values_at[off].add(v)
                changed = [(off, sorted(vs)) for off, vs in sorted(values_at.items()) if len(vs) > 1]
                furthest = max(at, default=-1)
                lost = [
                    (off, v) for off, v in sorted(self.acked.get(p, {}).items()) if off <= furthest and v not in where
                ]
                lost += [(-1, v) for v in sorted(self.acked_unplaced.get(p, ())) if v not in where]
                moved = [
                    (v, off, min(where[v]))
                    for off, v in sorted(self.acked.get(p, {}).items())
                    if v in where and off not in where[v]
                ]
                dups = [(v, sorted(offs)) for v, offs in where.items() if len(offs) > 1]
                phantom = [(off, v) for off, v in reads if v not in self.attempted]
                last: dict[str, int] = {}
                reordered = []
                for off in sorted(at):
                    parsed = parse(at[off])
                    if parsed is None or min(where[at[off]]) < off:
                        continue  # a later copy of a value read before: a duplicate, reported as one
                    producer, seq = parsed
                    prev = last.get(producer)
                    if prev is not None and seq <= prev:
                        reordered.append((producer, prev, seq))
                    last[producer] = seq
                for name, items in (
                    ("lost", lost),
                    ("moved", moved),
                    ("changed", changed),
                    ("duplicated", dups),
                    ("phantom", phantom),
                    ("reordered", reordered),
                ):
                    if items:
                        getattr(r, name)[p] = items
            return r

    def unread_acknowledged(self) -> int:
        """Acknowledged values no reader has seen (to know when a reader has caught up)."""
        with self._lock:
            seen = {v for reads in self.reads.values() for _, v in reads}
            return sum(1 for acks in self.acked.values() for v in acks.values() if v not in seen)
