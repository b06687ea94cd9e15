"""What the clients did and saw during a run, for the checker and for a human reading a failure.

Every record a producer sends has a unique value (`<producer>:<seq>`, or
`<producer>:<txn>:<i>` in a transaction) and goes to a partition the producer chose, so the
checker can find it in the log. Records (`Produced`), transactions (`Txn`), what readers read
(`Read`; a consumer group's members too, also in `group_reads`), ListOffsets answers
(`EndOffset`), the group's offset commits (`GroupCommit`) and the committed offsets it was
told (`CommittedAnswer`) are kept whole; `events` is the readable
story (faults, acknowledgements, errors, outcomes), each line also fed to the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.testing.sim.trace import Trace


@dataclass(slots=True)
class Produced:
    value: str
    producer: str
    seq: int
    partition: int
    txn: Txn | None
    t_send: float
    t_done: float = -1.0
    offset: int = -1  # acknowledged offset
    error: str = ""

    @property
    def acked(self) -> bool:
        return self.offset >= 0


@dataclass(slots=True, eq=False)
class Txn:
    producer: str
    number: int
    t_begin: float
    values: list[Produced] = field(default_factory=list)
    t_end: float = -1.0
    outcome: str = "open"  # committed | aborted | unknown (the client could not tell) | open
    commit_tried: bool = False

    @property
    def name(self) -> str:
        return f"{self.producer}#{self.number}"


@dataclass(slots=True)
class Read:
    reader: str
    committed: bool  # read_committed
    t: float
    partition: int
    offset: int
    value: str


@dataclass(slots=True)
class GroupCommit:
    member: str
    t_sent: float
    offsets: dict[int, int]  # partition -> offset
    t_done: float = -1.0
    ok: bool = False
    error: str = ""


@dataclass(slots=True)
class CommittedAnswer:
    """An OffsetFetch answer: the group's committed offsets (a partition without one is absent)."""

    who: str
    t_sent: float
    t_recv: float
    offsets: dict[int, int]


@dataclass(slots=True)
class EndOffset:
    poller: str
    partition: int
    t_sent: float
    t_recv: float
    offset: int


class History:
    def __init__(self, trace: Trace, now) -> None:  # noqa: ANN001 - a clock: () -> virtual seconds
        self.trace = trace
        self.now = now
        self.produced: dict[str, Produced] = {}
        self.txns: list[Txn] = []
        self.reads: list[Read] = []
        self.end_offsets: list[EndOffset] = []
        self.group_reads: list[Read] = []
        self.commits: list[GroupCommit] = []
        self.committed_answers: list[CommittedAnswer] = []
        self.events: list[tuple[float, str, str]] = []
        self.acked_end: dict[int, int] = {}  # partition -> 1 + the highest offset acknowledged (acks=all)
        # moments a replica took a role it could not hold: (time, partition, kind, what)
        self.violations: list[tuple[float, int, str, str]] = []

    def note(self, actor: str, text: str) -> None:
        """A readable event that the trace already holds in another form."""
        self.events.append((self.now(), actor, text))

    def event(self, actor: str, text: str) -> None:
        t = self.now()
        self.events.append((t, actor, text))
        self.trace.add(f"{t:.6f} {actor}: {text}")

    # ------------------------------------------------------------------ producing
    def sent(self, producer: str, seq: int, partition: int, value: str, txn: Txn | None = None) -> Produced:
        rec = Produced(value, producer, seq, partition, txn, self.now())
        self.produced[value] = rec
        if txn is not None:
            txn.values.append(rec)
        return rec

    def done(self, rec: Produced, offset: int | None, error: BaseException | None) -> None:
        rec.t_done = self.now()
        if error is None and offset is not None:
            rec.offset = offset
            if rec.txn is None and offset + 1 > self.acked_end.get(rec.partition, 0):
                self.acked_end[rec.partition] = offset + 1
            self.trace.add(f"{rec.t_done:.6f} ack {rec.value} p{rec.partition}@{offset}")
        else:
            rec.error = type(error).__name__ if error is not None else "no offset"
            self.event(rec.producer, f"{rec.value} to p{rec.partition} failed: {rec.error}")

    def begin(self, producer: str, number: int) -> Txn:
        txn = Txn(producer, number, self.now())
        self.txns.append(txn)
        return txn

    def outcome(self, txn: Txn, outcome: str, why: str = "") -> None:
        txn.outcome = outcome
        txn.t_end = self.now()
        parts = sorted({r.partition for r in txn.values})
        self.event(
            txn.producer, f"transaction {txn.name} ({len(txn.values)} records, p{parts}) {outcome} {why}".rstrip()
        )

    def violation(self, partition: int, kind: str, what: str) -> None:
        self.violations.append((self.now(), partition, kind, what))
        self.event("check", f"p{partition}: {what}")

    # ------------------------------------------------------------------ reading
    def read(self, reader: str, committed: bool, partition: int, offset: int, value: str) -> None:
        t = self.now()
        self.reads.append(Read(reader, committed, t, partition, offset, value))
        self.trace.add(f"{t:.6f} {reader} read p{partition}@{offset} {value}")

    def consumed(self, member: str, partition: int, offset: int, value: str) -> None:
        """A record a member of the consumer group (read_committed) was given."""
        t = self.now()
        read = Read(member, True, t, partition, offset, value)
        self.reads.append(read)
        self.group_reads.append(read)
        self.trace.add(f"{t:.6f} {member} consumed p{partition}@{offset} {value}")

    def commit_sent(self, member: str, offsets: dict[int, int]) -> GroupCommit:
        c = GroupCommit(member, self.now(), offsets)
        self.commits.append(c)
        self.trace.add(f"{c.t_sent:.6f} {member} commits {sorted(offsets.items())}")
        return c

    def commit_done(self, c: GroupCommit, error: BaseException | None) -> None:
        c.t_done = self.now()
        c.ok = error is None
        if error is None:
            self.event(c.member, f"committed {sorted(c.offsets.items())}")
        else:
            c.error = type(error).__name__
            self.event(c.member, f"commit {sorted(c.offsets.items())} failed: {c.error}")

    def committed_answer(self, who: str, t_sent: float, offsets: dict[int, int]) -> None:
        t = self.now()
        self.committed_answers.append(CommittedAnswer(who, t_sent, t, offsets))
        self.event(who, f"committed offsets {sorted(offsets.items())} (asked at {t_sent:.3f})")

    def end_offset(self, poller: str, partition: int, t_sent: float, offset: int) -> None:
        t = self.now()
        self.end_offsets.append(EndOffset(poller, partition, t_sent, t, offset))
        self.event(poller, f"ListOffsets(latest) p{partition}: {offset} (asked at {t_sent:.3f})")

    # ------------------------------------------------------------------ summaries
    def around(self, t: float, before: float = 3.0, after: float = 3.0, limit: int = 60) -> list[str]:
        """The readable events near `t`."""
        lines = [f"{et:9.3f} {actor:>12}  {text}" for et, actor, text in self.events if t - before <= et <= t + after]
        if len(lines) > limit:
            lines = lines[: limit // 2] + [f"   ... {len(lines) - limit} more ..."] + lines[-limit // 2 :]
        return lines

    def stats(self) -> dict[str, int]:
        acked = sum(1 for r in self.produced.values() if r.acked and r.txn is None)
        return {
            "sent": len(self.produced),
            "acked": acked,
            "failed": sum(1 for r in self.produced.values() if r.error),
            "txns": len(self.txns),
            "committed": sum(1 for t in self.txns if t.outcome == "committed"),
            "aborted": sum(1 for t in self.txns if t.outcome == "aborted"),
            "reads": len(self.reads),
            "end_offsets": len(self.end_offsets),
            "group_reads": len(self.group_reads),
            "commits": sum(1 for c in self.commits if c.ok),
        }
