"""After every seed: what the clients were told against what the logs hold.

The truth is the leader's log of each partition up to its high watermark once every fault is
healed (`Final.logs`), with each transactional record's fate from the markers after it. The
anomalies, by kind:
- `lost`: a record acknowledged (acks=all) is not in the log;
- `offset-changed`: it is, at another offset than the one acknowledged;
- `duplicate`: a record is in the log more than once;
- `reordered`: one producer's records in a partition out of the order it sent them;
- `phantom`: a record nobody sent;
- `torn-txn`: a committed transaction (or one whose outcome the client could not tell, but
  some of it committed) with records missing, aborted or left open;
- `aborted-committed`: a transaction the client aborted has committed records;
- `hanging-txn`: a transaction with no marker once everything is healed (the last stable
  offset is stuck);
- `aborted-visible`: a read_committed reader read a record of an aborted or open transaction;
- `consumed-then-lost`: a reader read a record at an offset that holds something else at
  the end (it read past what was committed, and that was truncated); not a record of an
  aborted transaction whose offset is a hole at the end, an ABORT marker of its producer
  after it: compaction removes aborted transactions' records, as Kafka's cleaner does
  (`removed_with_its_abort`);
- `final-read`: the clients' final reading differs from the log (read_uncommitted: every
  record below the high watermark; read_committed: the committed and plain ones below the
  last stable offset), or could not be made;
- `end-offset-backwards`: a ListOffsets(latest) answer lower than one received before it was
  asked, or than the high watermark at the end;
- `replica-divergence`: two replicas of a partition differ below the high watermark;
- `unavailable`: once every fault is healed, a broker is not back, a partition has no leader
  or its ISR lacks replicas (within the settle time);
- `internal-error` (from the logs, run.py): a request handler raised and the broker closed the
  client's connection instead of answering with an error code;
- `leader-without-acked`, `isr-without-acked`: a broker led, or was in the ISR, while its log
  lacked a record already acknowledged (checked at every partition state ZooKeeper records and
  every registration: the moment a loss begins);
- the consumer group (`check_group`): `commit-backwards` (a committed offset, acknowledged to a
  member or answered by OffsetFetch, lower than one acknowledged or answered before it was
  asked), `commit-beyond-consumed` (a committed offset past a record visible to read_committed
  that no member had been given yet: the group would skip it), `group-skipped` (a visible
  record below the furthest offset the group consumed that no member was ever given).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from odradek.testing.sim.history import History, Produced
from odradek.testing.sim.logs import ABORT, ABORTED, COMMITTED, OPEN, PLAIN, LogRecord


@dataclass(frozen=True)
class Anomaly:
    kind: str
    t: float  # when it showed (virtual seconds), to print the history around it
    detail: str
    partition: int = -1
    since: float = -1.0  # an earlier moment it relates to (the answer it went back from), or -1
    # the records it concerns, (partition, offset or -1, when acknowledged, sent or read), to
    # trace it to a loss (guarantee.py)
    records: tuple[tuple[int, int, float], ...] = ()
    txn: str = ""  # the transactional producer (its id) of a transaction's anomaly

    def __str__(self) -> str:
        where = f" p{self.partition}" if self.partition >= 0 else ""
        return f"{self.kind}{where} at {self.t:.3f}: {self.detail}"


@dataclass
class Final:
    """The end state a run is checked against."""

    end: float  # virtual time of the final reading
    healed: float = -1.0  # when every fault was healed (the settle time began)
    logs: dict[int, list[LogRecord]] = field(default_factory=dict)  # the leader's log below its HW
    high_watermarks: dict[int, int] = field(default_factory=dict)
    read_uncommitted: dict[int, list[tuple[int, str]]] | None = None
    read_committed: dict[int, list[tuple[int, str]]] | None = None
    read_errors: list[str] = field(default_factory=list)
    unhealthy: list[str] = field(default_factory=list)
    divergence: list[tuple[int, str]] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)  # the faults that happened, by kind
    notes: dict[str, Any] = field(default_factory=dict)  # what scripted faults recorded


def _order_key(rec: Produced) -> tuple[int, ...]:
    parts = rec.value.split(":")
    return tuple(int(x) for x in parts[1:])


def check(h: History, final: Final) -> list[Anomaly]:
    out: list[Anomaly] = []
    end = final.end
    produced = h.produced
    where: dict[str, list[tuple[int, int]]] = {}  # value -> [(partition, offset)]
    at: dict[tuple[int, int], str] = {}
    fate: dict[tuple[int, int], str] = {}
    from odradek.testing.sim.logs import fates

    for p, records in sorted(final.logs.items()):
        f = fates(records)
        for r in records:
            if r.value is None:
                continue
            where.setdefault(r.value, []).append((p, r.offset))
            at[(p, r.offset)] = r.value
            fate[(p, r.offset)] = f[r.offset]
        # order of each producer's records in this partition
        last: dict[str, tuple[tuple[int, ...], int]] = {}
        for r in records:
            rec = produced.get(r.value) if r.value is not None else None
            if rec is None:
                continue
            key = _order_key(rec)
            prev = last.get(rec.producer)
            if prev is not None and key <= prev[0]:
                out.append(
                    Anomaly(
                        "reordered",
                        rec.t_send,
                        f"{rec.value} at offset {r.offset} after {rec.producer}'s record at offset {prev[1]}",
                        p,
                    )
                )
            last[rec.producer] = (key, r.offset)

    for value, places in where.items():
        rec = produced.get(value)
        if rec is None:
            p, o = places[0]
            out.append(Anomaly("phantom", end, f"{value!r} at offset {o}: nobody sent it", p))
        elif len(places) > 1:
            out.append(Anomaly("duplicate", rec.t_send, f"{value} at {places}", places[0][0]))

    # acknowledged records of idempotent producers
    for rec in produced.values():
        if rec.txn is not None or not rec.acked:
            continue
        places = where.get(rec.value, [])
        if (rec.partition, rec.offset) in places:
            continue
        if places:
            out.append(
                Anomaly(
                    "offset-changed",
                    rec.t_done,
                    f"{rec.value} acknowledged at {rec.offset}, is at {places}",
                    rec.partition,
                    records=((rec.partition, rec.offset, rec.t_done),),
                )
            )
        else:
            hw = final.high_watermarks.get(rec.partition, -1)
            out.append(
                Anomaly(
                    "lost",
                    rec.t_done,
                    f"{rec.value} acknowledged at offset {rec.offset} (final HW {hw})",
                    rec.partition,
                    records=((rec.partition, rec.offset, rec.t_done),),
                )
            )

    # transactions
    for txn in h.txns:
        states = []
        for rec in txn.values:
            places = [pl for pl in where.get(rec.value, []) if pl[0] == rec.partition]
            states.append((rec, fate[places[0]] if places else "absent"))
        committed = [rec for rec, s in states if s == COMMITTED]
        if any(s == OPEN for _r, s in states):
            out.append(
                Anomaly(
                    "hanging-txn",
                    txn.t_begin,
                    f"{txn.name}: no marker after its records at the end",
                    txn.values[0].partition,
                    records=tuple((r.partition, r.offset, r.t_send) for r, s in states if s == OPEN),
                    txn=txn.producer,
                )
            )
        if txn.outcome == "committed" or (txn.outcome in ("unknown", "open") and committed):
            torn = [(rec, s) for rec, s in states if s != COMMITTED and (txn.outcome == "committed" or rec.acked)]
            bad = [f"{rec.value}: {s}" for rec, s in torn]
            if bad:
                out.append(
                    Anomaly(
                        "torn-txn",
                        txn.t_end if txn.t_end >= 0 else txn.t_begin,
                        f"{txn.name} ({txn.outcome}): {', '.join(bad)}",
                        txn.values[0].partition if txn.values else -1,
                        records=tuple((rec.partition, rec.offset, rec.t_send) for rec, _s in torn),
                        txn=txn.producer,
                    )
                )
        elif txn.outcome == "aborted" and committed:
            out.append(
                Anomaly(
                    "aborted-committed",
                    txn.t_end,
                    f"{txn.name}: {[r.value for r in committed]} committed",
                    committed[0].partition,
                )
            )

    # what readers read during the run
    seen_bad: set[tuple[str, str]] = set()
    for read in h.reads:
        key = (read.partition, read.offset)
        actual = at.get(key)
        # a record of an aborted transaction the cleaner removed: aborted, not lost
        removed = actual is None and removed_with_its_abort(
            final.logs, produced, read.partition, read.offset, read.value
        )
        if actual != read.value and not removed:
            if ("lost", read.value) not in seen_bad:
                seen_bad.add(("lost", read.value))
                out.append(
                    Anomaly(
                        "consumed-then-lost",
                        read.t,
                        f"{read.reader} read {read.value} at offset {read.offset}; the log has {actual!r} there",
                        read.partition,
                        records=((read.partition, read.offset, read.t),),
                    )
                )
            continue
        read_fate = ABORTED if removed else fate.get(key)
        if read.committed and read_fate in (ABORTED, OPEN) and ("rc", read.value) not in seen_bad:
            seen_bad.add(("rc", read.value))
            out.append(
                Anomaly(
                    "aborted-visible",
                    read.t,
                    f"{read.reader} read {read.value} ({read_fate}{', compacted away since' if removed else ''})",
                    read.partition,
                    records=((read.partition, read.offset, read.t),),
                    txn=read.value.split(":", 1)[0],
                )
            )

    # the clients' final reading
    for err in final.read_errors:
        out.append(Anomaly("final-read", end, err))
    for is_rc, view in ((False, final.read_uncommitted), (True, final.read_committed)):
        if view is None:
            continue
        for p, records in sorted(final.logs.items()):
            if is_rc:
                expect = _committed_prefix(records, fate, p)
            else:
                expect = [(r.offset, r.value) for r in records if r.value is not None]
            got = view.get(p, [])
            if got != expect:
                out.append(
                    Anomaly(
                        "final-read",
                        end,
                        f"{'read_committed' if is_rc else 'read_uncommitted'}: {_diff(expect, got)}",
                        p,
                    )
                )

    # ListOffsets(latest) never going backwards
    for p in sorted({e.partition for e in h.end_offsets}):
        answers = sorted((e for e in h.end_offsets if e.partition == p), key=lambda e: e.t_sent)
        received = sorted(answers, key=lambda e: e.t_recv)
        best, best_at, i = -1, None, 0
        for e in answers:
            while i < len(received) and received[i].t_recv < e.t_sent:
                if received[i].offset > best:
                    best, best_at = received[i].offset, received[i]
                i += 1
            if e.offset < best and best_at is not None:
                out.append(
                    Anomaly(
                        "end-offset-backwards",
                        e.t_recv,
                        f"{e.poller} got {e.offset}, after {best} at {best_at.t_recv:.3f}",
                        p,
                        best_at.t_recv,
                    )
                )
                break
        final_hw = final.high_watermarks.get(p)
        top = max(answers, key=lambda e: e.offset, default=None)
        if final_hw is not None and top is not None and top.offset > final_hw:
            out.append(
                Anomaly(
                    "end-offset-backwards",
                    end,
                    f"answered {top.offset} at {top.t_recv:.3f}, final HW {final_hw}",
                    p,
                    top.t_recv,
                )
            )

    out += check_group(h, final, fate)
    for t, p, kind, what in h.violations:
        out.append(Anomaly(kind, t, what, p))
    for p, detail in final.divergence:
        out.append(Anomaly("replica-divergence", end, detail, p))
    for problem in final.unhealthy:
        out.append(Anomaly("unavailable", final.healed if final.healed >= 0 else end, problem))
    return out


def removed_with_its_abort(
    logs: dict[int, list[LogRecord]], produced: dict[str, Produced], p: int, offset: int, value: str
) -> bool:
    """Whether the record `value`, read at `offset` of partition `p`, was removed by compaction
    as a record of an aborted transaction (Kafka's cleaner removes those: LogCleaner's
    CleanedTransactionMetadata; a read_uncommitted reader may have read it before). True only
    when the final log has no record at all at that offset (offsets are never reused: a hole
    is what the cleaner leaves; a truncated and rewritten offset holds another record), the
    record was sent in a transaction, and the first marker after it in that partition of its
    producer (the producer ids its surviving records carry) is an ABORT (the cleaner keeps the
    marker while it removes its transaction's records). A committed transaction's record
    removed is still a `torn-txn`."""
    rec = produced.get(value)
    records = logs.get(p)
    if rec is None or rec.txn is None or not records:
        return False
    i = bisect.bisect_left([r.offset for r in records], offset)
    if i == 0 or (i < len(records) and records[i].offset == offset):
        return False  # below the log's first record, or something is there
    pids = {
        r.producer_id
        for recs in logs.values()
        for r in recs
        if r.value is not None and (o := produced.get(r.value)) is not None and o.producer == rec.producer
    }
    marker = next((r for r in records[i:] if r.value is None and r.producer_id in pids), None)
    return marker is not None and marker.marker == ABORT


def _by(broker: int) -> str:
    """Which coordinator answered a group request (groups.py records it), for an anomaly's line."""
    return f" (answered by broker {broker})" if broker >= 0 else ""


def check_group(h: History, final: Final, fate: dict[tuple[int, int], str]) -> list[Anomaly]:
    """The consumer group's commits and offsets against what its members were given and the final log."""
    if not (h.group_reads or h.commits or h.committed_answers):
        return []
    out: list[Anomaly] = []
    first: dict[tuple[int, int], float] = {}  # (partition, offset) -> when a member was first given it
    top: dict[int, int] = {}
    for r in h.group_reads:
        first.setdefault((r.partition, r.offset), r.t)
        top[r.partition] = max(top.get(r.partition, -1), r.offset)
    # per partition, the visible records' offsets and the running latest "first given" time
    visible: dict[int, tuple[list[int], list[float]]] = {}
    for p, records in final.logs.items():
        offsets = [r.offset for r in records if r.value is not None and fate.get((p, r.offset)) in (PLAIN, COMMITTED)]
        latest, running = [], -1.0
        for o in offsets:
            running = max(running, first.get((p, o), float("inf")))
            latest.append(running)
        visible[p] = (offsets, latest)

    def unconsumed_below(p: int, x: int, by: float) -> int | None:
        """A visible offset below `x` no member had been given by `by`, or None."""
        offsets, latest = visible.get(p, ([], []))
        i = bisect.bisect_left(offsets, x)
        if i == 0 or latest[i - 1] <= by:
            return None
        return next(o for o in offsets[:i] if first.get((p, o), float("inf")) > by)

    # what says an offset is committed: (when it was asked, when it was known, who, partition, offset)
    claims: list[tuple[float, float, str, int, int]] = []
    for c in h.commits:
        if c.ok:
            claims += [(c.t_sent, c.t_done, f"{c.member}'s commit{_by(c.broker)}", p, o) for p, o in c.offsets.items()]
    for a in h.committed_answers:
        claims += [(a.t_sent, a.t_recv, f"OffsetFetch by {a.who}{_by(a.broker)}", p, o) for p, o in a.offsets.items()]
    claims.sort()
    # per partition, by when each claim was known: the highest offset known so far, and its claim
    known_at: dict[int, tuple[list[float], list[tuple[int, float, str]]]] = {}
    for _asked, known, who, p, x in sorted(claims, key=lambda c: c[1]):
        times, best = known_at.setdefault(p, ([], []))
        prev = best[-1] if best else (-1, -1.0, "")
        times.append(known)
        best.append((x, known, who) if x > prev[0] else prev)
    reported: set[tuple[str, int]] = set()
    for asked, known, who, p, x in claims:
        missed = unconsumed_below(p, x, known)
        if missed is not None and ("beyond", p) not in reported:
            reported.add(("beyond", p))
            out.append(
                Anomaly(
                    "commit-beyond-consumed",
                    known,
                    f"{who} says {x} is committed; no member had been given offset {missed} (read_committed sees it)",
                    p,
                    records=((p, missed, known),),
                )
            )
        times, best = known_at[p]
        i = bisect.bisect_left(times, asked)
        o2, k, w = best[i - 1] if i else (-1, -1.0, "")
        if o2 > x and ("backwards", p) not in reported:
            reported.add(("backwards", p))
            out.append(
                Anomaly("commit-backwards", known, f"{who} says {x} is committed, after {w} said {o2} at {k:.3f}", p, k)
            )
    for p, (offsets, _latest) in sorted(visible.items()):
        if p not in top:
            continue
        skipped = [o for o in offsets if o < top[p] and (p, o) not in first]
        if skipped:
            out.append(
                Anomaly(
                    "group-skipped",
                    final.end,
                    f"no member was ever given offset{'s' if len(skipped) > 1 else ''} {skipped[:5]}"
                    f"{'...' if len(skipped) > 5 else ''}, below offset {top[p]} which the group consumed",
                    p,
                    records=tuple((p, o, -1.0) for o in skipped),
                )
            )
    return out


def _committed_prefix(records: list[LogRecord], fate: dict[tuple[int, int], str], p: int) -> list[tuple[int, str]]:
    """What read_committed returns: plain and committed records below the first open one (the LSO)."""
    out = []
    for r in records:
        if r.value is None:
            continue
        f = fate[(p, r.offset)]
        if f == OPEN:
            break
        if f in (PLAIN, COMMITTED):
            out.append((r.offset, r.value))
    return out


def _diff(expect: list[tuple[int, str]], got: list[tuple[int, str]]) -> str:
    e, g = set(expect), set(got)
    missing, extra = sorted(e - g), sorted(g - e)
    parts = [f"{len(got)} records read, {len(expect)} expected"]
    if missing:
        parts.append(f"missing {missing[:3]}{'...' if len(missing) > 3 else ''}")
    if extra:
        parts.append(f"unexpected {extra[:3]}{'...' if len(extra) > 3 else ''}")
    if not missing and not extra:
        parts.append("in another order")
    return "; ".join(parts)
