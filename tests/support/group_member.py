"""A consumer-group member as a child process, for the group interop tests (not a test module:
run it as ``python tests/support/group_member.py CLIENT ...``).

Every group member the tests start is its own process, whatever the client, so that a member
can be killed with SIGKILL and so that no two consumers share a process: kafka-python 3.0.12's
new I/O loop was seen to leave one of two in-process consumers waiting forever (see
tests/interop/groups/test_groups.py).

The same contract is implemented for the Java client by tests/clients/java/GroupCli.java and
for kafkajs by tests/clients/node/kafkajs_group.js:

  args   --bootstrap B --topic T --group G --client-id C [--instance-id I]
         [--assignor range|roundrobin|cooperative-sticky] [--session-timeout-ms 6000]
         [--heartbeat-ms 1000]
  stdout JSON lines, flushed:
         {"ev": "assigned", "partitions": [added...], "all": [current...], "gen": N|-1}
         {"ev": "revoked",  "partitions": [removed...], "all": [current...], "gen": N|-1}
         {"ev": "records", "records": [[partition, offset, value-as-text], ...]}
             written after those records' offsets were committed (synchronously)
         {"ev": "error", "message": "..."}   (a commit failure during a rebalance is not one)
         {"ev": "closed"}                    after a clean close (LeaveGroup for dynamic members)
  stdin  a line "stop" (or EOF): commit, close, print {"ev": "closed"}, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time

STUCK_S = 12
_out_lock = threading.Lock()


def emit(**kw) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()


def _watch_stdin(stop: threading.Event) -> None:
    def run():
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=run, daemon=True).start()


class _Assignment:
    def __init__(self):
        self.all: set[int] = set()
        self.gen = -1

    def add(self, parts) -> None:
        parts = sorted(parts)
        self.all |= set(parts)
        emit(ev="assigned", partitions=parts, all=sorted(self.all), gen=self.gen)

    def remove(self, parts) -> None:
        parts = sorted(parts)
        self.all -= set(parts)
        emit(ev="revoked", partitions=parts, all=sorted(self.all), gen=self.gen)


# --------------------------------------------------------------------------- confluent-kafka


def first_offsets(recs, part_offset) -> dict[int, int]:
    """The first offset of `recs` per partition: where to rewind after a failed commit.

    A member that keeps a partition through a rebalance (cooperative-sticky, or eager with the
    same assignment) keeps its fetch position, so records whose commit failed would be skipped
    without a seek back to them."""
    first: dict[int, int] = {}
    for r in recs:
        p, o = part_offset(r)
        first.setdefault(p, o)
    return first


def run_confluent(a, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "client.id": a.client_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": a.session_timeout_ms,
        "heartbeat.interval.ms": a.heartbeat_ms,
        "partition.assignment.strategy": a.assignor,
    }
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    asg = _Assignment()
    c = Consumer(conf)
    c.subscribe(
        [a.topic],
        on_assign=lambda _c, ps: asg.add(p.partition for p in ps),
        on_revoke=lambda _c, ps: asg.remove(p.partition for p in ps),
        on_lost=lambda _c, ps: asg.remove(p.partition for p in ps),
    )
    while not stop.is_set():
        msgs = c.consume(100, 0.2)
        recs = [m for m in msgs if m.error() is None]
        for m in msgs:
            if m.error() is not None:
                emit(ev="error", message=str(m.error()))
        if recs:
            last = {}
            for m in recs:
                last[m.partition()] = m.offset() + 1
            try:
                c.commit(offsets=[TopicPartition(a.topic, p, o) for p, o in last.items()], asynchronous=False)
            except KafkaException as e:  # the group moved on; these records are re-read
                emit(ev="commit_failed", message=str(e))
                for p, o in first_offsets(recs, lambda m: (m.partition(), m.offset())).items():
                    try:  # a partition kept across a cooperative rebalance: rewind it
                        c.seek(TopicPartition(a.topic, p, o))
                    except KafkaException:
                        pass  # revoked: its next owner starts from the committed offset
                continue
            emit(ev="records", records=[[m.partition(), m.offset(), m.value().decode()] for m in recs])
    c.close()


# --------------------------------------------------------------------------- kafka-python


def run_kafka_python(a, stop: threading.Event) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import CommitFailedError, KafkaError

    assignor = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }[a.assignor]
    asg = _Assignment()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            asg.remove(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned):
            asg.add(tp.partition for tp in assigned)

    kw = dict(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        client_id=a.client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=a.session_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_ms,
        max_poll_interval_ms=max(a.session_timeout_ms, 10000),
        partition_assignment_strategy=[assignor],
    )
    if a.instance_id:
        kw["group_instance_id"] = a.instance_id

    def start():
        c = KafkaConsumer(**kw)
        c.subscribe([a.topic], listener=Listener())
        return c

    # kafka-python 3.0.12 sometimes never finishes a rebalance: its I/O thread logs "Received
    # SyncGroup response" (with the right assignment), then neither applies the assignment nor
    # heartbeats again, while poll() spins (seen in 1 of ~6 runs under load, in a process of its
    # own too; the broker had answered every request). A member stuck like that for
    # STUCK_S seconds replaces its consumer and says so ({"ev": "client_restart"}).
    c = start()
    rebalancing_since = [None]
    orig_remove, orig_add = asg.remove, asg.add

    def on_remove(parts):
        rebalancing_since[0] = time.monotonic()
        orig_remove(parts)

    def on_add(parts):
        rebalancing_since[0] = None
        orig_add(parts)

    asg.remove, asg.add = on_remove, on_add
    while not stop.is_set():
        since = rebalancing_since[0]
        if since is not None and time.monotonic() - since > STUCK_S:
            emit(ev="client_restart", message=f"kafka-python rebalance unfinished after {STUCK_S}s")
            try:
                c.close(autocommit=False, timeout_ms=3000)
            except Exception:  # noqa: BLE001
                pass
            rebalancing_since[0] = None
            c = start()
        batch = c.poll(200)
        recs = [r for rs in batch.values() for r in rs]
        if recs:
            last = {}
            for r in recs:
                last[r.partition] = r.offset + 1
            try:
                c.commit({TopicPartition(a.topic, p): OffsetAndMetadata(o, "", -1) for p, o in last.items()})
            except (CommitFailedError, KafkaError) as e:
                emit(ev="commit_failed", message=repr(e))
                for p, o in first_offsets(recs, lambda r: (r.partition, r.offset)).items():
                    tp = TopicPartition(a.topic, p)
                    if tp in c.assignment():  # kept across a cooperative rebalance: rewind it
                        c.seek(tp, o)
                continue
            emit(ev="records", records=[[r.partition, r.offset, r.value.decode()] for r in recs])
    c.close()


# --------------------------------------------------------------------------- aiokafka


def run_aiokafka(a, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import CommitFailedError, KafkaError

    if a.assignor == "cooperative-sticky":
        raise SystemExit("aiokafka has no cooperative rebalancing")
    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[a.assignor]
    asg = _Assignment()

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            asg.remove(tp.partition for tp in revoked)

        async def on_partitions_assigned(self, assigned):
            asg.add(tp.partition for tp in assigned)

    async def go():
        kw = dict(
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            client_id=a.client_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=a.session_timeout_ms,
            heartbeat_interval_ms=a.heartbeat_ms,
            rebalance_timeout_ms=a.session_timeout_ms,
            max_poll_interval_ms=max(a.session_timeout_ms, 10000),
            partition_assignment_strategy=(assignor,),
        )
        if a.instance_id:
            kw["group_instance_id"] = a.instance_id
        c = AIOKafkaConsumer(**kw)
        await c.start()
        c.subscribe([a.topic], listener=Listener())
        try:
            while not stop.is_set():
                batch = await c.getmany(timeout_ms=200)
                recs = [r for rs in batch.values() for r in rs]
                if recs:
                    last = {}
                    for r in recs:
                        last[r.partition] = r.offset + 1
                    try:
                        await c.commit({TopicPartition(a.topic, p): o for p, o in last.items()})
                    except (CommitFailedError, KafkaError) as e:
                        emit(ev="commit_failed", message=repr(e))
                        for p, o in first_offsets(recs, lambda r: (r.partition, r.offset)).items():
                            tp = TopicPartition(a.topic, p)
                            if tp in c.assignment():  # still ours: rewind, or they are skipped
                                c.seek(tp, o)
                        continue
                    emit(ev="records", records=[[r.partition, r.offset, r.value.decode()] for r in recs])
        finally:
            await c.stop()

    asyncio.run(go())


RUNNERS = {"confluent": run_confluent, "kafka_python": run_kafka_python, "aiokafka": run_aiokafka}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("client", choices=sorted(RUNNERS))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--client-id", default="member")
    ap.add_argument("--instance-id")
    ap.add_argument("--assignor", default="range")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-ms", type=int, default=1000)
    a = ap.parse_args(argv)
    import faulthandler
    import logging
    import os
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the tests ask for stacks when a wait times out
    logging.basicConfig(
        level=os.environ.get("ODRADEK_MEMBER_LOG_LEVEL", "WARNING"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    stop = threading.Event()
    _watch_stdin(stop)
    try:
        RUNNERS[a.client](a, stop)
    except BaseException as e:  # noqa: BLE001 - reported to the test
        emit(ev="error", message=f"{type(e).__name__}: {e}")
        return 1
    emit(ev="closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------- the tests' side


class Member:
    """A member process started by a test: its events, current assignment and records."""

    def __init__(
        self,
        kind: str,
        bootstrap: str,
        topic: str,
        group: str,
        client_id: str,
        *,
        instance_id: str | None = None,
        assignor: str = "range",
        session_timeout_ms: int = 6000,
        heartbeat_ms: int = 1000,
        log_dir=None,
    ):
        import os
        import subprocess
        import time
        from pathlib import Path

        here = Path(__file__).resolve().parent
        repo = here.parents[1]
        args = [
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--client-id",
            client_id,
            "--assignor",
            assignor,
            "--session-timeout-ms",
            str(session_timeout_ms),
            "--heartbeat-ms",
            str(heartbeat_ms),
        ]
        if instance_id:
            args += ["--instance-id", instance_id]
        if kind == "java":
            java = repo / ".deps" / "java"
            cmd = [
                "java",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Xshare:auto",
                "-cp",
                f"{java}/*:{java}/classes",
                "GroupCli",
            ] + args
        elif kind == "kafkajs":
            cmd = ["node", str(repo / "tests" / "clients" / "node" / "kafkajs_group.js")] + args
        else:
            cmd = [sys.executable, str(Path(__file__).resolve()), kind] + args
        self.kind, self.client_id, self.instance_id = kind, client_id, instance_id
        self.events: list[tuple[float, dict]] = []
        self.assignment: set[int] = set()
        self.values: list[str] = []
        self.records: list[tuple[int, int, str]] = []
        self.gen = -1
        self._cond = threading.Condition()
        log_dir = Path(log_dir or ".")
        self.stderr_path = log_dir / f"member-{kind}-{client_id}-{os.getpid()}-{time.monotonic_ns()}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            cwd=str(log_dir),
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __repr__(self):
        return f"<{self.kind} member {self.client_id} {sorted(self.assignment)}>"

    def _read(self) -> None:
        import time

        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append((time.monotonic(), ev))
                if ev["ev"] in ("assigned", "revoked"):
                    self.assignment = set(ev["all"])
                    if ev.get("gen", -1) >= 0:
                        self.gen = ev["gen"]
                elif ev["ev"] == "gen":
                    self.gen = ev["gen"]
                elif ev["ev"] == "records":
                    for p, o, v in ev["records"]:
                        self.records.append((p, o, v))
                        self.values.append(v)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def errors(self) -> list[str]:
        return [ev["message"] for _, ev in self.events if ev["ev"] == "error"]

    def rebalance_events(self, since: float = 0.0) -> list[dict]:
        return [ev for t, ev in self.events if t >= since and ev["ev"] in ("assigned", "revoked")]

    def dump_stacks(self) -> None:
        """Python members print every thread's stack to stderr on SIGUSR1."""
        import signal
        import time

        if self.kind not in ("java", "kafkajs") and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.3)

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.stderr_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        """Graceful: commit, close (LeaveGroup for a dynamic member), exit."""
        import subprocess

        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(
                    f"{self!r} did not close within {timeout}s; stderr:\n{self.stderr_tail()}"
                ) from None
        self._reader.join(5)
        self._stderr.close()

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        self._stderr.close()

    @property
    def closed_cleanly(self) -> bool:
        return any(ev["ev"] == "closed" for _, ev in self.events)


def wait_until(cond, timeout: float, what, members=()) -> float:
    """Poll ``cond`` until true; returns the seconds it took. ``what`` may be a callable for the message."""
    import time

    t0 = time.monotonic()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.monotonic() - t0
        for m in members:
            if m.proc.poll() is not None and not m.closed_cleanly and m.errors():
                raise AssertionError(f"{m!r} failed: {m.errors()}\nstderr:\n{m.stderr_tail()}")
        time.sleep(0.05)
    msg = what() if callable(what) else what
    for m in members:
        m.dump_stacks()
    detail = "\n".join(
        f"{m!r} events={[ev for _, ev in m.events if ev['ev'] != 'records'][-6:]} stderr:\n{m.stderr_tail(6000)}"
        for m in members
    )
    raise AssertionError(f"timed out after {timeout}s waiting for {msg}\n{detail}")


def split_ok(members, partitions: int) -> bool:
    """Every partition owned by exactly one of ``members``, each owning at least one."""
    owned = [p for m in members for p in m.assignment]
    return sorted(owned) == list(range(partitions)) and all(m.assignment for m in members)


# --- helpers of the group tests (tests/interop/groups, tests/reference/test_diff_groups.py)

#: broker settings of the group tests: no initial rebalance delay, a few offsets partitions
OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "8"}


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    for f in a.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(15) == 0
