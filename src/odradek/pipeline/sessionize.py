"""`sessionize`: per-user sessions of the activity stream, exactly once (consume-transform-produce).

Reads raw events (pipeline/events.py, keyed by user id) and writes one summary per finished
session to the output topic. A session is a user's run of events with no gap longer than
``gap_ms`` of event time; it is finished when the next event of the user comes later than that,
or when the partition's watermark (the largest event time seen in it, less ``lateness_ms``)
passes its last event plus the gap.

Exactly once, across a kill -9 of the process or of the broker, with Kafka transactions:

* one transactional producer (``transactional.id = odradek-sessionize-<group>``): starting an
  instance fences the one before it, and the coordinator aborts its open transaction;
* each poll's records are processed in one transaction holding the session summaries they
  finish, the changed state, and the consumed offsets (`send_offsets_to_transaction` for the
  consumer group ``<group>``): all of it is committed, or none;
* the state (open sessions and each partition's largest event time) lives in a compacted
  topic ``<group>-state`` with the input's partitioning (key: user id, value: the open session
  as JSON, a tombstone when it ends; key ``\\x00max_ts`` for the event time). On start it is read
  back with read_committed up to the last stable offset, and the input resumes from the group's
  committed offsets: both are the state of the last committed transaction.

The processing is a pure function of each partition's records in offset order
(`PartitionSessions`), so a replay after a crash finishes the same sessions with the same
contents. Any error aborts the transaction and starts over from the committed state
(`run_until_idle`); a fenced producer (another instance took over) stops.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from dataclasses import asdict, dataclass

from . import ACTIVITY_TOPIC

log = logging.getLogger("odradek.pipeline.sessionize")

MAX_TS_KEY = b"\x00max_ts"


@dataclass
class Session:
    user_id: str
    start: int
    end: int
    events: int = 0
    page_views: int = 0
    searches: int = 0
    clicks: int = 0
    first_url: str = ""
    last_url: str = ""

    @property
    def session_id(self) -> str:
        return f"{self.user_id}@{self.start}"

    def add(self, ev: dict) -> None:
        ts = int(ev["ts"])
        self.start = min(self.start, ts)
        self.end = max(self.end, ts)
        self.events += 1
        kind = ev.get("event_type")
        if kind == "page_view":
            self.page_views += 1
        elif kind == "search":
            self.searches += 1
        elif kind == "click":
            self.clicks += 1
        url = ev.get("url", "")
        if not self.first_url:
            self.first_url = url
        self.last_url = url

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    def summary(self) -> bytes:
        d = asdict(self)
        d["session_id"] = self.session_id
        d["duration_ms"] = self.end - self.start
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Session:
        return cls(**json.loads(raw))


class PartitionSessions:
    """The open sessions of one input partition and its largest event time (pure, deterministic)."""

    def __init__(self, gap_ms: int, lateness_ms: int = 0) -> None:
        self.gap_ms = gap_ms
        self.lateness_ms = lateness_ms
        self.open: dict[str, Session] = {}
        self.max_ts = -1
        self._expiry: list[tuple[int, str]] = []  # (end + gap, user): lazily invalidated
        self.dirty: set[str] = set()  # users whose state changed since `take_changes`
        self.max_ts_dirty = False

    def add(self, ev: dict) -> list[Session]:
        """Apply one event; returns the sessions it finishes."""
        user, ts = str(ev["user_id"]), int(ev["ts"])
        finished: list[Session] = []
        s = self.open.get(user)
        if s is not None and (ts - s.end > self.gap_ms or s.start - ts > self.gap_ms):
            finished.append(self.open.pop(user))
            s = None
        if s is None:
            s = self.open[user] = Session(user, ts, ts)
        s.add(ev)
        heapq.heappush(self._expiry, (s.end + self.gap_ms, user))
        self.dirty.add(user)
        if ts > self.max_ts:
            self.max_ts = ts
            self.max_ts_dirty = True
            finished.extend(self._expire(ts - self.lateness_ms))
        return finished

    def _expire(self, watermark: int) -> list[Session]:
        out = []
        h = self._expiry
        while h and h[0][0] < watermark:
            exp, user = heapq.heappop(h)
            s = self.open.get(user)
            if s is not None and s.end + self.gap_ms == exp:
                out.append(self.open.pop(user))
                self.dirty.add(user)
        return out

    def take_changes(self) -> list[tuple[bytes, bytes | None]]:
        """The state records to write for what changed since the last call."""
        out: list[tuple[bytes, bytes | None]] = []
        for user in sorted(self.dirty):
            s = self.open.get(user)
            out.append((user.encode(), None if s is None else s.to_json()))
        if self.max_ts_dirty:
            out.append((MAX_TS_KEY, str(self.max_ts).encode()))
        self.dirty.clear()
        self.max_ts_dirty = False
        return out

    def restore(self, key: bytes, value: bytes | None) -> None:
        """Apply one state record (read back in offset order)."""
        if key == MAX_TS_KEY:
            self.max_ts = int(value) if value is not None else -1
            return
        user = key.decode()
        if value is None:
            self.open.pop(user, None)
        else:
            self.open[user] = Session.from_json(value)

    def restored(self) -> None:
        """Rebuild the expiry heap once every state record is applied."""
        self._expiry = [(s.end + self.gap_ms, u) for u, s in self.open.items()]
        heapq.heapify(self._expiry)
        self.dirty.clear()
        self.max_ts_dirty = False


def parse_event(raw: bytes | None) -> dict | None:
    try:
        ev = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(ev, dict) or "user_id" not in ev or not isinstance(ev.get("ts"), int):
        return None
    return ev


class Sessionizer:
    """One run: restore the committed state, then consume-transform-produce until idle."""

    def __init__(
        self,
        bootstrap: str,
        input_topic: str = ACTIVITY_TOPIC,
        output_topic: str = "sessions",
        group: str = "sessionize",
        gap_ms: int = 30 * 60 * 1000,
        lateness_ms: int = 0,
        max_records: int = 500,
        settings: dict | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.settings = dict(settings or {})  # client settings for a secured listener (--command-config)
        self.input_topic = input_topic
        self.output_topic = output_topic
        self.group = group
        self.state_topic = f"{group}-state"
        self.transactional_id = f"odradek-sessionize-{group}"
        self.gap_ms = gap_ms
        self.lateness_ms = lateness_ms
        self.max_records = max_records
        self.sessions_written = 0
        self.events_read = 0
        self.skipped = 0

    def _topics(self) -> list[int]:
        from odradek.client import Admin
        from odradek.client import errors as E

        with Admin(self.settings, bootstrap_servers=self.bootstrap) as a:
            md = a.describe_topics([self.input_topic])
            ti = md.get(self.input_topic)
            if ti is None or ti.error:
                raise E.UnknownTopicOrPartitionError(f"input topic {self.input_topic} does not exist")
            parts = sorted(ti.partitions)
            for name, n, cfg in (
                (self.output_topic, len(parts), {}),
                (self.state_topic, len(parts), {"cleanup.policy": "compact"}),
            ):
                try:
                    a.create_topic(name, n, -1, cfg)
                except E.TopicAlreadyExistsError:
                    pass
        return parts

    def _restore(self, parts: list[int]) -> dict[int, PartitionSessions]:
        from odradek.client import Consumer, TopicPartition

        state = {p: PartitionSessions(self.gap_ms, self.lateness_ms) for p in parts}
        tps = [TopicPartition(self.state_topic, p) for p in parts]
        with Consumer(
            config=self.settings,
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        ) as c:
            c.assign(tps)
            c.seek_to_beginning(*tps)
            end = c.end_offsets(tps)  # the last stable offset: the last committed transaction's state
            todo = {tp for tp in tps if end[tp] > 0}
            deadline = time.monotonic() + 120
            while todo:
                for r in c.poll(0.5):
                    state[r.partition].restore(r.key, r.value)
                for tp in list(todo):
                    if c.position(tp) >= end[tp]:
                        todo.discard(tp)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"state of {sorted(todo)} not read back within 120 s")
        for s in state.values():
            s.restored()
        return state

    def run(self, idle_exit_s: float | None = None, on_commit=None) -> None:
        from odradek.client import Consumer, Producer, TopicPartition

        parts = self._topics()
        producer = Producer(
            self.settings,
            bootstrap_servers=self.bootstrap,
            transactional_id=self.transactional_id,
            linger_ms=5,
            acks="all",
        )
        consumer = None
        try:
            producer.init_transactions()  # fences an earlier instance; its open transaction is aborted
            state = self._restore(parts)
            consumer = Consumer(
                config=self.settings,
                bootstrap_servers=self.bootstrap,
                group_id=self.group,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            tps = [TopicPartition(self.input_topic, p) for p in parts]
            consumer.assign(tps)
            committed = consumer.committed(tps)
            for tp in tps:
                om = committed.get(tp)
                if om is not None and om.offset >= 0:
                    consumer.seek(tp, om.offset)
                else:
                    consumer.seek_to_beginning(tp)
            idle_since = time.monotonic()
            while True:
                recs = consumer.poll(1.0, max_records=self.max_records)
                if not recs:
                    if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                        if self._caught_up(consumer, tps):
                            return
                        idle_since = time.monotonic()  # no input because the broker is away: not idle
                    continue
                idle_since = time.monotonic()
                self._transaction(producer, consumer, state, recs)
                if on_commit is not None:
                    on_commit(self)
        finally:
            if consumer is not None:
                consumer.close(autocommit=False)
            producer.close()

    @staticmethod
    def _caught_up(consumer, tps) -> bool:
        """Whether every input partition's position reached its end (the last stable offset:
        the consumer reads committed): idle means no input left, not no answer from the broker."""
        try:
            ends = consumer.end_offsets(tps, timeout=5)
            return all(consumer.position(tp, timeout=5) >= ends[tp] for tp in tps)
        except Exception as e:  # noqa: BLE001 - any failure to find out means "not known to be idle"
            log.info("sessionize: cannot tell whether the input is consumed (%r): not idle", e)
            return False

    def _transaction(self, producer, consumer, state: dict[int, PartitionSessions], recs) -> None:
        from odradek.client import TopicPartition

        producer.begin_transaction()
        try:
            offsets: dict = {}
            written = 0
            for r in recs:
                ev = parse_event(r.value)
                if ev is None:
                    self.skipped += 1
                else:
                    for s in state[r.partition].add(ev):
                        producer.send(self.output_topic, s.summary(), key=s.user_id.encode())
                        written += 1
                offsets[TopicPartition(self.input_topic, r.partition)] = r.offset + 1
            for tp in offsets:
                for key, value in state[tp.partition].take_changes():
                    producer.send(self.state_topic, value, key=key, partition=tp.partition)
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
        except BaseException:
            try:
                producer.abort_transaction()
            except Exception as e:  # noqa: BLE001 - fenced or fatal: the coordinator aborts it
                log.warning("abort failed: %r", e)
            raise
        self.events_read += len(recs)
        self.sessions_written += written


def run_until_idle(
    sessionizer_args: dict, idle_exit_s: float | None, retry_s: float = 1.0, on_commit=None, max_failures: int = 60
) -> None:
    """Run, and after an error start again from the committed state (new clients, the state read
    back, the input from the committed offsets). Being fenced, a missing input topic, a failed
    authentication, or `max_failures` runs in a row that commit nothing, end it with the error."""
    from odradek.client import errors as E

    names = (
        "ProducerFencedError",
        "TransactionalIdAuthorizationFailedError",
        "UnknownTopicOrPartitionError",
        "SaslAuthenticationFailedError",  # a wrong password stays wrong
    )
    fatal = tuple(c for c in (getattr(E, n, None) for n in names) if c is not None)
    failures = 0
    while True:
        s = Sessionizer(**sessionizer_args)
        try:
            s.run(idle_exit_s, on_commit)
            return
        except fatal:
            raise
        except (E.KafkaError, OSError, TimeoutError) as e:
            failures = 0 if s.events_read else failures + 1
            if failures >= max_failures:
                raise
            log.warning("sessionize: %r; starting again from the last committed transaction", e)
            time.sleep(retry_s)
