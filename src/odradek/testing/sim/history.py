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

from collections.abc import Callable
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
    broker: int = -1  # the coordinator that answered it (-1: none did)


@dataclass(slots=True)
class CommittedAnswer:
    """An OffsetFetch answer: the group's committed offsets (a partition without one is absent)."""

    who: str
    t_sent: float
    t_recv: float
    offsets: dict[int, int]
    broker: int = -1  # the coordinator that answered


@dataclass(slots=True)
class GroupRequest:
    """A group request a client sent and the broker that answered it (JoinGroup, SyncGroup,
    Heartbeat, OffsetCommit, OffsetFetch): which coordinator each member was talking to."""

    t: float
    who: str
    api: str
    broker: int
    error: int  # the answer's first error code (0: none)


@dataclass(slots=True)
class EndOffset:
    poller: str
    partition: int
    t_sent: float
    t_recv: float
    offset: int


@dataclass(slots=True)
class ShortElection:
    """A broker leading the workload's partition with its log below the acknowledged end.

    `acked_end`: 1 + the highest offset acknowledged, transactional records too. `beyond`: a
    failure beyond Kafka's guarantee (acks=all with min.insync.replicas: an acknowledged record
    survives while one in-sync replica keeps its log and stays alive): every other member of
    the partition's last ISR (the state before this one) was down (`others`: not registered),
    and the leader lost what it lacks in a power cut (`power_cut`): its last one before this,
    when its log (its page cache) held everything committed now. Anything else is an anomaly
    (guarantee.py)."""

    t: float
    partition: int
    leader: int
    epoch: int
    log_end: int
    acked_end: int
    last_isr: tuple[int, ...]
    others: dict[int, str]  # each other member of the last ISR: how it was at the election
    power_cut: float  # when the leader's host lost power holding all it lacks (its page cache), or -1
    beyond: bool
    topic: str = ""  # an internal topic's (its committed end: the highest high watermark seen), or the workload's

    def __str__(self) -> str:
        others = ", ".join(f"b{b} {how}" for b, how in sorted(self.others.items())) or "no other member"
        cut = "no power cut took what it lacks"
        if self.power_cut >= 0:
            cut = f"its host lost power at {self.power_cut:.3f} holding it all"
        verdict = "beyond the guarantee" if self.beyond else "within the guarantee: an anomaly"
        where = f"{self.topic}-{self.partition}" if self.topic else f"p{self.partition}"
        return (
            f"{where} at {self.t:.3f}: b{self.leader} leads (epoch {self.epoch}) with its log ending at "
            f"{self.log_end}, below {self.acked_end} acknowledged; last ISR {list(self.last_isr)}: {others}; "
            f"{cut} ({verdict})"
        )


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
        self.group_requests: list[GroupRequest] = []
        self.events: list[tuple[float, str, str]] = []
        self.acked_end: dict[int, int] = {}  # partition -> 1 + the highest offset acknowledged (acks=all)
        self.written_end: dict[int, int] = {}  # the same, transactional records' acknowledgements too
        # 1 + the highest offset a client was told is committed (a ListOffsets(latest) answer, a record read)
        self.seen_end: dict[int, int] = {}
        # moments a replica took a role it could not hold: (time, partition, kind, what)
        self.violations: list[tuple[float, int, str, str]] = []
        # broker -> when its host lost power, and its log ends just before ((topic or "", partition) -> end)
        self.power_cuts: dict[int, list[tuple[float, dict[tuple[str, int], int]]]] = {}
        self._ends_down: dict[int, dict[tuple[str, int], int]] = {}  # its log ends when it last went down
        self.short_elections: list[ShortElection] = []
        self.txn_state_partitions = 1  # __transaction_state's partitions (run.py), to place a transactional id
        # called whenever a client learns a commit or an outcome (run.py samples the internal
        # topics' high watermarks then): () -> None
        self.on_client_ack: Callable[[], None] | None = None

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
            self.written_end[rec.partition] = max(self.written_end.get(rec.partition, 0), offset + 1)
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
        self._client_ack()
        parts = sorted({r.partition for r in txn.values})
        self.event(
            txn.producer, f"transaction {txn.name} ({len(txn.values)} records, p{parts}) {outcome} {why}".rstrip()
        )

    def _seen(self, partition: int, end: int) -> None:
        if end > self.seen_end.get(partition, 0):
            self.seen_end[partition] = end

    def committed_end(self, partition: int) -> int:
        """1 + the highest offset of the workload's partition known committed: acknowledged, or told to a client."""
        return max(self.written_end.get(partition, 0), self.seen_end.get(partition, 0))

    def _client_ack(self) -> None:
        if self.on_client_ack is not None:
            self.on_client_ack()

    def violation(self, partition: int, kind: str, what: str) -> None:
        self.violations.append((self.now(), partition, kind, what))
        self.event("check", f"p{partition}: {what}")

    def went_down(self, broker: int, ends: dict[tuple[str, int], int] | None) -> None:
        """Broker `broker` was killed with these log ends (its page cache keeps them)."""
        if ends is not None:
            self._ends_down[broker] = ends

    def power_cut(self, broker: int, ends: dict[tuple[str, int], int] | None) -> None:
        """Broker `broker`'s host lost power (its disk keeps only what was fsynced); `ends`: its
        log ends just before (None: it was down already, with the ends it had then)."""
        before = ends if ends is not None else self._ends_down.get(broker, {})
        self.power_cuts.setdefault(broker, []).append((self.now(), before))

    def short_election(
        self,
        partition: int,
        leader: int,
        epoch: int,
        log_end: int,
        last_isr: tuple[int, ...],
        others: dict[int, str],
        internal: tuple[str, int, float] | None = None,
    ) -> ShortElection:
        """`leader` leads `partition` with its log ending at `log_end`, below the acknowledged end;
        `others`: how each other member of the last ISR was (a string starting "down" if down).
        Beyond the guarantee, the loss is taken as the partition's new truth: `acked_end` drops
        to `log_end`, so a later broker lacking only what this loss took is not reported again.
        `internal`: (topic, its committed end, when it was seen) for an internal topic's partition."""
        t = self.now()
        if internal is not None:
            topic, acked, _seen = internal
        else:
            topic, acked = "", self.committed_end(partition)
        # its last power cut: did its log hold all that is committed now, just before?
        cuts = [(c, ends) for c, ends in self.power_cuts.get(leader, []) if c <= t]
        cut = cuts[-1][0] if cuts and cuts[-1][1].get((topic, partition), -1) >= acked else -1.0
        beyond = cut >= 0 and all(how.startswith("down") for how in others.values())
        e = ShortElection(t, partition, leader, epoch, log_end, acked, last_isr, others, cut, beyond, topic)
        self.short_elections.append(e)
        self.note("check", f"short election {e}")
        if beyond and internal is None:
            self.acked_end[partition] = min(log_end, self.acked_end.get(partition, 0))
            self.written_end[partition] = log_end
            self.seen_end[partition] = log_end
        return e

    # ------------------------------------------------------------------ reading
    def read(self, reader: str, committed: bool, partition: int, offset: int, value: str) -> None:
        t = self.now()
        self.reads.append(Read(reader, committed, t, partition, offset, value))
        self._seen(partition, offset + 1)
        self.trace.add(f"{t:.6f} {reader} read p{partition}@{offset} {value}")

    def consumed(self, member: str, partition: int, offset: int, value: str) -> None:
        """A record a member of the consumer group (read_committed) was given."""
        t = self.now()
        read = Read(member, True, t, partition, offset, value)
        self.reads.append(read)
        self.group_reads.append(read)
        self._seen(partition, offset + 1)
        self.trace.add(f"{t:.6f} {member} consumed p{partition}@{offset} {value}")

    def commit_sent(self, member: str, offsets: dict[int, int]) -> GroupCommit:
        c = GroupCommit(member, self.now(), offsets)
        self.commits.append(c)
        self.trace.add(f"{c.t_sent:.6f} {member} commits {sorted(offsets.items())}")
        return c

    def commit_done(self, c: GroupCommit, error: BaseException | None, broker: int = -1) -> None:
        c.t_done = self.now()
        c.ok = error is None
        c.broker = broker
        if error is None:
            self.event(c.member, f"committed {sorted(c.offsets.items())} (broker {broker})")
            self._client_ack()
        else:
            c.error = type(error).__name__
            self.event(c.member, f"commit {sorted(c.offsets.items())} failed: {c.error}")

    def committed_answer(self, who: str, t_sent: float, offsets: dict[int, int], broker: int = -1) -> None:
        t = self.now()
        self.committed_answers.append(CommittedAnswer(who, t_sent, t, offsets, broker))
        self.event(who, f"committed offsets {sorted(offsets.items())} from broker {broker} (asked at {t_sent:.3f})")

    def group_request(self, who: str, api: str, broker: int, error: int) -> None:
        """Kept apart from the events (a heartbeat a second per member): `answered_by` reads them."""
        self.group_requests.append(GroupRequest(self.now(), who, api, broker, error))

    def end_offset(self, poller: str, partition: int, t_sent: float, offset: int) -> None:
        t = self.now()
        self.end_offsets.append(EndOffset(poller, partition, t_sent, t, offset))
        self._seen(partition, offset)
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
