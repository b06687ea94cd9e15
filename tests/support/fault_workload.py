"""The workload of the cluster fault tests: idempotent acks=all writers, readers, and a tight
ListOffsets(latest) poller, all recording into one :class:`support.checker.History`.

    with Workload(cluster.bootstrap, "t", partitions=3, end_offsets=cluster.client_bootstraps) as w:
        ...                         # faults, while the writers write and the readers read
    report = w.check()              # final read of every partition from the start, then History.check()
    assert report.ok, report

- :class:`Writer`: a confluent-kafka (librdkafka) idempotent producer, acks=all, writing
  ``<name>-<seq>`` round-robin over the partitions;
- :class:`JavaWriter`: the same with Apache Kafka's Java producer (tests/clients/java/KafkaCli.java
  ``write-loop``), attempts, acknowledgements and errors coming back as JSON lines;
- :class:`Reader`: a consumer following every partition from the start, recording each record
  and the high watermark librdkafka reports;
- :class:`EndOffsetPoller`: ListOffsets(latest) sent straight to every broker for every partition,
  in a tight loop, each answer from a leader recorded (the reader only samples librdkafka's
  cached high watermark, which misses a new leader's first, lower answers);
- :func:`read_all`: every partition read from the start up to its high watermark at the end.

On a failing test, leaving the ``with`` block by an exception aborts the clients at once
(the Java process killed, librdkafka not flushed) rather than waiting for writes that a broken
cluster will never acknowledge.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from support.checker import History, Report, parse, value
from support.clients import JavaClient

#: ListOffsets version sent by the poller: v4+ answers the leader epoch; Kafka 3.9 and odradek serve v7
LIST_OFFSETS_VERSION = 7
LATEST = -1


class _IdempotenceLog(logging.Handler):
    """A librdkafka writer's log (its `logger`, with ``debug: eos``): the lines that say why it
    bumped its producer epoch (the drain's reason, the out-of-order or unknown-producer answer and
    the failed request before it) are kept for :meth:`Workload.check`; what librdkafka logs
    without debug (info and above) goes to stderr as before; the rest of the eos debug goes."""

    KEPT = ("ERRSEQ", "UNKPID", "ERRPID")
    LIMIT = 200  # the first ones: a duplicate comes from the first bump after a leader moved

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        fac, name, text = record.args if isinstance(record.args, tuple) and len(record.args) == 3 else ("", "", "")
        if record.levelno >= logging.INFO:  # librdkafka's own levels 0-6, printed without a logger
            level = {logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3}.get(record.levelno, 2)
            print(f"%{level}|{record.created:.3f}|{fac}|{name}| {text}", file=sys.stderr)
        elif fac in self.KEPT or (fac == "DRAIN" and "epoch" in str(text)):
            if len(self.lines) < self.LIMIT:
                self.lines.append(f"{time.strftime('%H:%M:%S')} {fac} {text}")
            else:
                self.dropped += 1


class Writer(threading.Thread):
    """An idempotent librdkafka producer writing <name>-<seq> round-robin over the partitions.
    `epoch_bumps` are its idempotence log's lines on each producer epoch bump."""

    def __init__(
        self,
        bootstrap: str,
        history: History,
        name: str,
        topic: str,
        partitions: int,
        *,
        message_timeout_ms: int = 60000,
    ) -> None:
        super().__init__(daemon=True, name=f"writer-{name}")
        self.history = history
        self.name_ = name
        self.topic = topic
        self.partitions = partitions
        self.stop = threading.Event()
        self.flush_timeout = 60.0
        self.errors: list[str] = []
        self._eos = _IdempotenceLog()
        logger = logging.getLogger(f"{__name__}.{name}.{id(self)}")
        logger.addHandler(self._eos)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": message_timeout_ms,
                "topic.metadata.refresh.interval.ms": 500,
                "debug": "eos",
                "logger": logger,
            }
        )

    def run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            v = value(self.name_, seq)
            self.history.attempt(v)
            try:
                self.producer.produce(self.topic, v, partition=seq % self.partitions, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.1)
                continue
            seq += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.producer.flush(self.flush_timeout)

    def _delivered(self, err, msg) -> None:  # noqa: ANN001 - confluent's callback
        if err is None:
            self.history.ack(msg.partition(), msg.offset(), msg.value())
        else:
            self.errors.append(str(err))

    def abort(self) -> None:
        self.flush_timeout = 1.0
        self.stop.set()

    @property
    def epoch_bumps(self) -> list[str]:
        more = [f"({self._eos.dropped} more)"] if self._eos.dropped else []
        return [*self._eos.lines, *more]


class JavaWriter(threading.Thread):
    """The same as :class:`Writer` with Apache Kafka's Java producer (KafkaCli write-loop in a JVM)."""

    def __init__(self, bootstrap: str, history: History, name: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True, name=f"writer-{name}")
        self.history = history
        self.name_ = name
        self.errors: list[str] = []
        self.done = False
        self.acks = 0
        cmd = [
            *JavaClient(bootstrap).base_cmd(),
            "write-loop",
            topic,
            "--bootstrap",
            bootstrap,
            "--name",
            name,
            "--partitions",
            str(partitions),
            "--interval-us",
            "2000",
            "--deadline-ms",
            "3600000",  # the harness's watchdog: it runs until stdin closes
        ]
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.last_lines: collections.deque[str] = collections.deque(maxlen=5)
        self.stop = self  # the same surface as Writer: stop.set()

    def set(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # the loop ends, flushes, prints done

    def abort(self) -> None:
        self.proc.kill()

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.last_lines.append(line.strip())
            m = json.loads(line)
            if "attempt" in m:
                self.history.attempt(m["attempt"].encode())
            elif "ack" in m:
                self.history.ack(m["partition"], m["offset"], m["ack"].encode())
                self.acks += 1
            elif "error" in m:
                self.errors.append(f"{m['error']}: {m['message']}")
            elif m.get("done"):
                self.done = True
        self.proc.wait()

    def state(self) -> str:
        """Why a writer did not finish: its exit code, last lines and the end of its stderr."""
        self.stderr.seek(0)
        err = self.stderr.read()[-2000:]
        return f"exit {self.proc.poll()}, last lines {list(self.last_lines)}, stderr: {err}"


class Reader(threading.Thread):
    """Follows the topic from the start, recording every record and each high watermark it sees."""

    def __init__(self, bootstrap: str, history: History, topic: str, partitions: int, name: str = "reader") -> None:
        super().__init__(daemon=True, name=name)
        self.history = history
        self.name_ = name
        self.topic = topic
        self.partitions = partitions
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"unused-{name}",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(500, 0.2):
                if m.error() is None:
                    self.history.read(m.partition(), m.offset(), m.value())
            for p in range(self.partitions):
                _low, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)
                if high >= 0:
                    self.history.high_watermark(self.name_, p, high)
        self.consumer.close()

    def abort(self) -> None:
        self.stop.set()


class EndOffsetPoller(threading.Thread):
    """ListOffsets(latest) for every partition, sent to every broker in turn and again, as fast
    as the brokers answer (``pause`` s between rounds): each answer without error is a leader's
    end offset for consumers (its high watermark) and goes into the history, which reports one
    lower than an earlier answer for the same partition. A broker that is down is retried each
    round; NOT_LEADER and OFFSET_NOT_AVAILABLE (KIP-207: a new leader not yet sure of its high
    watermark) answers are not end offsets and are counted only."""

    def __init__(
        self, brokers: Sequence[str], history: History, topic: str, partitions: int, pause: float = 0.002
    ) -> None:
        super().__init__(daemon=True, name="end-offset-poller")
        self.brokers = list(brokers)
        self.history = history
        self.topic = topic
        self.partitions = partitions
        self.pause = pause
        self.stop = threading.Event()
        self.answers = 0
        #: partition -> the leader epochs it was answered under (each leader's answers were seen)
        self.epochs: dict[int, set[int]] = collections.defaultdict(set)
        self.errors: collections.Counter[int] = collections.Counter()
        self._conns: dict[str, object] = {}

    def run(self) -> None:
        from support.raw import RawConnection, nested

        v = LIST_OFFSETS_VERSION
        parts = tuple(
            nested(2, v, "ListOffsetsPartition", partition_index=p, current_leader_epoch=-1, timestamp=LATEST)
            for p in range(self.partitions)
        )
        topics = (nested(2, v, "ListOffsetsTopic", name=self.topic, partitions=parts),)
        while not self.stop.is_set():
            for b in self.brokers:
                conn = self._conns.get(b)
                try:
                    if conn is None:
                        conn = self._conns[b] = RawConnection(b, timeout=2.0)
                    r = conn.call(2, v, replica_id=-1, isolation_level=0, topics=topics)  # type: ignore[attr-defined]
                except OSError:
                    if conn is not None:
                        conn.close()  # type: ignore[attr-defined]
                    self._conns.pop(b, None)
                    continue
                for t in r.topics:
                    for p in t.partitions:
                        code = int(p.error_code)
                        if code:
                            self.errors[code] += 1
                            continue
                        self.answers += 1
                        self.epochs[int(p.partition_index)].add(int(p.leader_epoch))
                        self.history.end_offset(b, int(p.partition_index), int(p.offset), int(p.leader_epoch))
            self.stop.wait(self.pause)
        for conn in self._conns.values():
            conn.close()  # type: ignore[attr-defined]

    def abort(self) -> None:
        self.stop.set()


#: rounds of each fault per test: ODRADEK_FAULT_ROUNDS (3 in CI; bench/cluster/soak.sh runs more)
ROUNDS = int(os.environ.get("ODRADEK_FAULT_ROUNDS", "3"))
#: Apache Kafka's cases (marked kafka_case: they show the expectation is what Kafka does) run
#: ODRADEK_REFERENCE_FAULT_ROUNDS rounds (1 in CI: Kafka's failovers take longer)
REFERENCE_ROUNDS = int(os.environ.get("ODRADEK_REFERENCE_FAULT_ROUNDS", "1"))


def rounds_of(kind: str) -> int:
    """Rounds for a test's case against `kind` ("odradek", or an Apache Kafka: "kafka39")."""
    return ROUNDS if kind == "odradek" else REFERENCE_ROUNDS


def read_all(bootstrap: str, history: History, topic: str, partitions: int, timeout: float = 60) -> None:
    """Read every partition from the start up to its high watermark, into the history."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "final-read", "enable.auto.commit": False})
    try:
        ends = {}
        for p in range(partitions):
            high = _high_watermark(c, topic, p, timeout=20)
            ends[p] = high
            history.final_high_watermark(p, high)
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        pos = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                part, off = m.partition(), m.offset()
                if m.error() is None and part is not None and off is not None:
                    history.read(part, off, m.value())
                    pos[part] = max(pos[part], off + 1)
        assert all(pos[p] >= ends[p] for p in ends), f"final read stopped at {pos}, high watermarks {ends}"
    finally:
        c.close()


#: librdkafka's answers for a leader that moved or is not reachable yet (a failover, a restart)
_LEADER_MOVED = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
}


def _high_watermark(c: Consumer, topic: str, partition: int, timeout: float) -> int:
    """The partition's high watermark, asked of its leader. librdkafka answers a leader it has
    cached that no longer leads (NOT_LEADER_OR_FOLLOWER, after a failover) with the error
    rather than refreshing its metadata: on such an error (`_LEADER_MOVED`) it is refreshed here
    and asked again, until `timeout`; any other error is raised at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            left = max(deadline - time.monotonic(), 1)
            _low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=left)
            return high
        except KafkaException as e:
            if time.monotonic() > deadline or e.args[0].code() not in _LEADER_MOVED:
                raise
            c.list_topics(topic, timeout=5)  # a fresh look at who leads
            time.sleep(0.5)


class Workload:
    """`writers` librdkafka and `java_writers` Java producers (none when the Java client is not
    built here), one reader, and with `end_offsets` (the brokers' client addresses) an
    :class:`EndOffsetPoller`; started on entering, stopped on leaving."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        writers: int = 2,
        java_writers: int = 1,
        end_offsets: Sequence[str] = (),
        history: History | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = history or History()
        self.writers: list[Writer | JavaWriter] = [
            Writer(bootstrap, self.history, f"w{i}", topic, partitions) for i in range(writers)
        ]
        if java_writers and JavaClient.unavailable_reason() is None:
            self.writers += [
                JavaWriter(bootstrap, self.history, f"java{i}", topic, partitions) for i in range(java_writers)
            ]
        self.reader = Reader(bootstrap, self.history, topic, partitions)
        self.poller = EndOffsetPoller(end_offsets, self.history, topic, partitions) if end_offsets else None
        self.stopped = False

    def __enter__(self) -> Workload:
        for t in self._threads():
            t.start()
        try:
            self._wait_writing_everywhere()
        except BaseException:
            self.abort()
            raise
        return self

    def _wait_writing_everywhere(self, timeout: float = 120) -> None:
        """Wait until every writer has a write acknowledged in every partition: each producer
        then has state on every leader and its in-sync followers before a test's first fault.
        (A Java producer whose first batches of a partition are in flight to a leader that
        fails sends its later ones to the new leader, which knows nothing of the producer and
        so takes any sequence, as Kafka's ProducerAppendInfo does: a record written before
        one sent before it, by Kafka as by odradek. A JVM starting slowly under load reached
        a fault so in CI.)"""
        names = {w.name_ for w in self.writers}
        deadline = time.monotonic() + timeout
        while True:
            missing = self.history.writers_missing(names, self.partitions)
            if not missing:
                return
            dead = [w for w in self.writers if not w.is_alive()]
            assert not dead and time.monotonic() < deadline, (
                f"writers with no acknowledged write in some partition after {timeout:.0f} s: {missing}; "
                f"errors {self.writer_errors[-5:]}; "
                + "; ".join(w.state() for w in self.writers if isinstance(w, JavaWriter) and w.name_ in missing)
            )
            time.sleep(0.1)

    def __exit__(self, exc_type, exc, tb) -> None:  # noqa: ANN001
        if exc_type is not None:
            self.abort()
        elif not self.stopped:
            self.stop()

    def _threads(self) -> list[threading.Thread]:
        return [*self.writers, self.reader, *([self.poller] if self.poller else [])]

    @property
    def writer_errors(self) -> list[str]:
        return [e for w in self.writers for e in w.errors]

    def stop(self) -> None:
        """Writers stop and flush (each acknowledgement or error comes back), then the readers."""
        self.stopped = True
        for w in self.writers:
            w.stop.set()
        for w in self.writers:
            w.join(90)
        for t in (self.reader, self.poller):
            if t is not None:
                t.stop.set()
                t.join(30)
        unfinished = [w for w in self.writers if isinstance(w, JavaWriter) and not w.done]
        assert not unfinished, "a Java writer did not flush and finish: " + "; ".join(w.state() for w in unfinished)
        assert all(w.acks for w in self.writers if isinstance(w, JavaWriter)), "a Java writer had no write acknowledged"

    def abort(self) -> None:
        self.stopped = True
        for t in self._threads():
            t.abort()  # type: ignore[attr-defined]
        for t in self._threads():
            t.join(10)

    def check(self, logs: str = "", *, min_acknowledged: int = 100, known: dict[str, str] | None = None) -> Report:
        """Stop (if not yet), read every partition from the start, check the history; assert it
        is clean and that enough was acknowledged for the test to mean anything. `known`: an
        anomaly of the report (e.g. "end_offset_backwards") that a known bug makes likely but
        not certain, with that bug: printed, not asserted (a test of its own must hold it strictly).

        Duplicates are traced to the batches that hold them (:func:`batch_origins`): the producer
        id, epoch and sequence of each copy are printed. A librdkafka writer's value written twice
        by one producer id under two producer epochs is librdkafka's epoch bump (it bumps its epoch
        on an error of a later in-flight batch and re-sends the earlier one under the new epoch,
        which no broker can tell from a new record: confluentinc/librdkafka#4953, seen against
        Kafka 3.9 too): printed, not asserted. Every other duplicate is asserted: two copies under
        one producer epoch are the broker's idempotence failing. Each librdkafka writer's epoch
        bumps are printed with librdkafka's reason (its eos log: `Writer.epoch_bumps`)."""
        if not self.stopped:
            self.stop()
        read_all(self.bootstrap, self.history, self.topic, self.partitions)
        report = self.history.check()
        print(report)
        if self.poller is not None:
            print(f"end-offset poller: {self.poller.answers} answers, errors by code {dict(self.poller.errors)}")
        assert report.acknowledged > min_acknowledged, f"too few writes acknowledged: {report}"
        for name, bug in (known or {}).items():
            if getattr(report, name):
                print(f"not asserted: {name} ({bug})")
                setattr(report, name, type(getattr(report, name))())
        for p, dups in list(report.duplicated.items()):
            origins = batch_origins(self.bootstrap, self.topic, p, sorted({o for _v, offs in dups for o in offs}))
            rest = []
            for v, offs in dups:
                copies = [origins.get(o) for o in offs]
                print(f"duplicate {v!r} in partition {p}: (producer id, epoch, sequence) at {dict(zip(offs, copies))}")
                if (parse(v) or ("",))[0].startswith("w") and epoch_bumped(copies):
                    print("  not asserted: written again under a bumped producer epoch (librdkafka#4953)")
                else:
                    rest.append((v, offs))
            if rest:
                report.duplicated[p] = rest
            else:
                del report.duplicated[p]
        for p, pairs in report.reordered.items():
            self._trace_reordered(p, pairs)
        for w in self.writers:
            if isinstance(w, Writer) and w.epoch_bumps:
                print(f"librdkafka writer {w.name_}, its producer epoch bumps (eos log):", *w.epoch_bumps, sep="\n  ")
        assert report.ok, f"{report}\n{logs}"
        return report

    def _trace_reordered(self, p: int, pairs: Sequence[tuple[str, int, int]]) -> None:
        """Print where each reordered pair of values sits: offset, (producer id, epoch, sequence)
        of its batch, the offset it was acknowledged at and the writer's errors for it."""
        with self.history._lock:
            offsets = {v: off for off, v in self.history.reads.get(p, [])}
            acked = {v: off for off, v in self.history.acked.get(p, {}).items()}
        values = [value(producer, s) for producer, a, b in pairs[:5] for s in (a, b)]
        origins = batch_origins(self.bootstrap, self.topic, p, sorted({offsets[v] for v in values if v in offsets}))
        errors = [e for w in self.writers for e in getattr(w, "errors", ())]
        for v in values:
            off = offsets.get(v)
            told = [e for e in errors if e.startswith(v.decode() + ":")]
            print(
                f"reordered {v!r} in partition {p}: read at {off}, batch (producer id, epoch, sequence)"
                f" {origins.get(off) if off is not None else None}, acknowledged at {acked.get(v)}, errors {told}"
            )


def epoch_bumped(copies: Sequence[tuple[int, int, int] | None]) -> bool:
    """Whether the copies of one value were written by one producer id, each under another,
    higher epoch (all found)."""
    if any(c is None for c in copies) or len({c[0] for c in copies if c}) != 1:
        return False
    epochs = [c[1] for c in copies if c]
    return all(a < b for a, b in zip(epochs, epochs[1:]))


def batch_origins(
    bootstrap: str, topic: str, partition: int, offsets: Sequence[int]
) -> dict[int, tuple[int, int, int]]:
    """For each offset, the (producer id, producer epoch, sequence) of the record there, read
    with Fetch straight from the partition's leader (offsets it no longer has are left out)."""
    from support import proto
    from support.raw import RawConnection

    from odradek.protocol.records import iter_batches

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "origins"})
    try:
        md = c.list_topics(topic, timeout=20)
        leader = md.topics[topic].partitions[partition].leader
        broker = md.brokers[leader]
    finally:
        c.close()
    found: dict[int, tuple[int, int, int]] = {}
    want = set(offsets)
    with RawConnection(f"{broker.host}:{broker.port}") as conn:
        while want:
            at = min(want)
            r = proto.fetch(conn, [(topic, partition, at, 1 << 20)], max_bytes=1 << 20)
            records = r.responses[0].partitions[0].records or b""
            end = at
            for h in iter_batches(records, validate=False):
                for o in [o for o in want if h.base_offset <= o <= h.last_offset]:
                    found[o] = (h.producer_id, h.producer_epoch, h.base_sequence + o - h.base_offset)
                    want.discard(o)
                end = max(end, h.last_offset + 1)
            if end == at:  # nothing more there
                break
            want = {o for o in want if o >= end}  # one not found below `end` is not there
    return found


# ---------------------------------------------------------------------------- set-up and probes
#: the cluster settings of every fault test: a follower not caught up for 2 s leaves the ISR
FAULT_SETTINGS = {"replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 200, "replica.fetch.backoff.ms": 200}


def create_topic(
    cluster, topic: str, assignment: Sequence[Sequence[int]], config: dict[str, str] | None = None
) -> None:  # noqa: ANN001 - OdradekCluster or KafkaZkCluster
    """Create `topic` with this replica assignment (partition p on assignment[p], its first
    broker the preferred leader) and min.insync.replicas=2; return once ZooKeeper shows every
    partition led with its whole ISR and every broker's Metadata names those leaders."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(
        topic,
        num_partitions=len(assignment),
        replication_factor=-1,
        replica_assignment=[list(r) for r in assignment],
        config={"min.insync.replicas": "2", **(config or {})},
    )
    for f in admin.create_topics([new], operation_timeout=30).values():
        f.result()
    snap = cluster.wait(
        lambda s: (
            topic in s.topics
            and all(p.leader >= 0 and len(p.isr) == len(p.replicas) for p in s.topics[topic].partitions)
        ),
        30,
        f"{topic} led, its ISR whole",
    )
    leaders = {p.partition: p.leader for p in snap.topics[topic].partitions}
    deadline = time.monotonic() + 20
    for b in cluster.client_bootstraps:
        one = AdminClient({"bootstrap.servers": b})
        while True:
            md = one.list_topics(topic, timeout=10).topics.get(topic)
            if md is not None and {p: m.leader for p, m in md.partitions.items()} == leaders:
                break
            assert time.monotonic() < deadline, f"broker {b} does not name the leaders {leaders} yet"
            time.sleep(0.05)


def produce_one(bootstrap: str, topic: str, partition: int, v: bytes, *, acks: int, timeout_ms: int) -> int:
    """One record written straight to one broker (no client library, no retries): its error code."""
    from support.raw import RawConnection, nested

    from odradek.protocol.records import Record, build_batch

    batch = build_batch([Record(-1, int(time.time() * 1000), None, v)])
    pd = nested(0, 9, "PartitionProduceData", index=partition, records=batch)
    td = nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    with RawConnection(bootstrap, timeout=timeout_ms / 1000 + 10) as conn:
        r = conn.call(0, 9, transactional_id=None, acks=acks, timeout=timeout_ms, topic_data=(td,))
    return int(r.responses[0].partition_responses[0].error_code)


def reassign(cluster, topic: str, partition: int, replicas: Sequence[int]) -> None:  # noqa: ANN001
    """AlterPartitionReassignments for one partition, sent to the controller (retried while the
    controller moves); asserts it was accepted."""
    from support.raw import RawConnection, nested

    deadline = time.monotonic() + 30
    while True:
        controller = cluster.snapshot().controller_id
        part = nested(45, 0, "ReassignablePartition", partition_index=partition, replicas=tuple(replicas))
        topics = (nested(45, 0, "ReassignableTopic", name=topic, partitions=(part,)),)
        try:
            with RawConnection(cluster.brokers[controller].bootstrap) as conn:
                r = conn.call(45, 0, timeout=30000, topics=topics)
        except (OSError, KeyError):
            code = -1
        else:
            code = int(r.error_code) or int(r.responses[0].partitions[0].error_code)
        if code == 0:
            return
        assert code in (-1, 41) and time.monotonic() < deadline, f"reassignment refused with error {code}"
        time.sleep(0.2)  # NOT_CONTROLLER (41) or unreachable: the controller is moving


def reassignments_in_progress(cluster) -> int:  # noqa: ANN001
    """How many partitions the controller lists as being reassigned (ListPartitionReassignments)."""
    from support.raw import RawConnection

    with RawConnection(cluster.brokers[cluster.snapshot().controller_id].bootstrap) as conn:
        r = conn.call(46, 0, timeout=30000, topics=None)
    assert int(r.error_code) == 0, f"ListPartitionReassignments: error {int(r.error_code)}"
    return sum(len(t.partitions) for t in r.topics)


def elect_preferred(cluster, topic: str, partitions: int) -> None:  # noqa: ANN001
    """ElectLeaders(PREFERRED) for every partition of `topic`, sent to the controller, until
    ZooKeeper shows each partition led by its first replica. A partition refused for now is asked
    again: PREFERRED_LEADER_NOT_AVAILABLE while the controller's watched copy has not yet seen
    the preferred replica back in the ISR (it decides from that copy, as Kafka's does, and it may
    lag what this test reads from ZooKeeper by a watch's delivery), or UNKNOWN_SERVER_ERROR for a
    state that changed meanwhile. Any other refusal fails at once."""
    from support.raw import RawConnection, nested

    again = {80, -1}  # PREFERRED_LEADER_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR
    done = {0, 84}  # NONE, ELECTION_NOT_NEEDED
    deadline = time.monotonic() + 30
    answers: list[str] = []  # each partition's last answer, for the message when the leaders do not move
    controller = -1
    while True:
        snap = cluster.snapshot()
        waiting = tuple(p.partition for p in snap.topics[topic].partitions if p.leader != p.replicas[0])
        if not waiting:
            return
        assert time.monotonic() < deadline, (
            f"{topic}'s preferred leaders: partitions {list(waiting)} not led by their first replica "
            f"(the controller {controller} answered {answers})\n{cluster.logs(40)}"
        )
        controller = snap.controller_id
        tp = (nested(43, 1, "TopicPartitions", topic=topic, partitions=waiting),)
        try:
            with RawConnection(cluster.brokers[controller].bootstrap) as conn:
                r = conn.call(43, 1, election_type=0, topic_partitions=tp, timeout=30000)
        except (OSError, KeyError):
            time.sleep(0.2)
            continue
        code = int(r.error_code)
        assert code in (0, 41), f"ElectLeaders refused with error {code}"  # (41: NOT_CONTROLLER, asked again)
        codes = {}
        for t in r.replica_election_results:
            for p in t.partition_result:
                codes[p.partition_id] = int(p.error_code)
                answers.append(f"{t.topic}-{p.partition_id}: {int(p.error_code)} {p.error_message or ''}".strip())
        answers = answers[-3 * partitions :]
        refused = {p: c for p, c in codes.items() if c not in done | again}
        assert not refused, f"ElectLeaders refused partitions of {topic}: {answers}"
        time.sleep(0.2 if code == 0 and set(codes.values()) <= done else 0.5)


class ClusterFactory:
    """`make(kind="odradek" | "kafka39", **options)` -> a started OdradekCluster (options as its
    own) or KafkaZkCluster (broker_env, overrides) with FAULT_SETTINGS (plus `overrides`),
    skipped when Kafka 3.9 is not installed; every cluster made is stopped on leaving.

        @pytest.fixture
        def make_cluster(tmp_path):
            with ClusterFactory(tmp_path) as make:
                yield make
    """

    def __init__(self, directory) -> None:  # noqa: ANN001
        from pathlib import Path

        self.directory = Path(directory)
        self.made: list = []

    def __enter__(self) -> ClusterFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        for c in self.made:
            c.stop()

    def __call__(self, kind: str = "odradek", *, overrides: dict | None = None, **options):  # noqa: ANN003
        import pytest
        from support.odradek_cluster import KafkaZkCluster, OdradekCluster

        settings = {**FAULT_SETTINGS, **(overrides or {})}
        c: KafkaZkCluster | OdradekCluster
        if kind == "kafka39":
            reason = KafkaZkCluster.unavailable_reason()
            if reason:
                pytest.skip(reason)
            c = KafkaZkCluster(self.directory / f"kafka{len(self.made)}", overrides=settings, **options)
        else:
            c = OdradekCluster(self.directory / f"odradek{len(self.made)}", overrides=settings, **options)
        self.made.append(c)
        c.start()
        return c


def list_latest(bootstrap: str, topic: str, partition: int) -> tuple[int, int, int]:
    """ListOffsets(latest) of one partition asked of one broker: (error code, offset, leader epoch)."""
    from support.raw import RawConnection, nested

    v = LIST_OFFSETS_VERSION
    part = nested(2, v, "ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1, timestamp=LATEST)
    topics = (nested(2, v, "ListOffsetsTopic", name=topic, partitions=(part,)),)
    with RawConnection(bootstrap, timeout=5) as conn:
        p = conn.call(2, v, replica_id=-1, isolation_level=0, topics=topics).topics[0].partitions[0]
    return int(p.error_code), int(p.offset), int(p.leader_epoch)


def partition_size(bootstrap: str, topic: str, partition: int) -> int:
    """DescribeLogDirs asked of one broker: the bytes of its copy of the partition (-1: none there)."""
    from support.raw import RawConnection, nested

    t = nested(35, 1, "DescribableLogDirTopic", topic=topic, partitions=(partition,))
    with RawConnection(bootstrap, timeout=5) as conn:
        r = conn.call(35, 1, topics=(t,))
    sizes = [
        int(p.partition_size)
        for d in r.results
        for tt in d.topics
        if tt.name == topic
        for p in tt.partitions
        if int(p.partition_index) == partition
    ]
    return max(sizes, default=-1)
