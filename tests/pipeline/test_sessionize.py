"""`odradek pipeline sessionize`: per-user sessions exactly once across kill -9 of the pipeline
and of the broker; and the session logic itself (pure: splitting, watermark, restore).

The broker test runs on an Apache Kafka 4.4 of its own (it is killed), and on odradek once its
broker serves transactions; both need the odradek client's transactional producer.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import pytest

from odradek.pipeline.events import EventGenerator
from odradek.pipeline.sessionize import PartitionSessions, Session

GAP = 60_000
T0 = 1_700_000_000_000


# ---------------------------------------------------------------------- the pure part
def ev(user: str, ts: int, kind: str = "page_view", url: str = "/") -> dict:
    return {"user_id": user, "ts": ts, "event_type": kind, "url": url}


def test_sessions_split_on_the_gap_and_close_on_the_watermark():
    p = PartitionSessions(GAP)
    assert p.add(ev("a", 0, url="/x")) == []
    assert p.add(ev("a", 30_000, "search", "/s")) == []
    assert p.add(ev("b", 50_000)) == []
    done = p.add(ev("a", 100_000))  # 70 s after a's last event: a's first session ends
    assert [(s.user_id, s.start, s.end, s.events, s.searches, s.first_url, s.last_url) for s in done] == [
        ("a", 0, 30_000, 2, 1, "/x", "/s")
    ]
    done = p.add(ev("c", 111_000))  # the watermark passes b's 50 s + 60 s
    assert [(s.user_id, s.start) for s in done] == [("b", 50_000)]
    assert sorted(p.open) == ["a", "c"]


def _events(n: int, users: int, seed: int) -> list[dict]:
    g = EventGenerator(users=users, crawlers=1, seed=seed)
    return [json.loads(g.next(T0 + i * 700)[1]) for i in range(n)]


def _run(events, p: PartitionSessions) -> list[bytes]:
    return [s.summary() for e in events for s in p.add(e)]


def test_a_restored_state_finishes_the_same_sessions():
    """Processing stopped anywhere, state written and read back, then resumed: the same sessions
    as one uninterrupted run (what makes a replay after a crash produce the same output)."""
    events = _events(3000, users=60, seed=3)
    whole = _run(events, PartitionSessions(GAP))
    assert len(whole) > 100
    rng = random.Random(5)
    cuts = sorted(rng.sample(range(1, len(events)), 8))
    out: list[bytes] = []
    log: list[tuple[bytes, bytes | None]] = []
    p = PartitionSessions(GAP)
    for a, b in zip([0] + cuts, cuts + [len(events)]):
        out += _run(events[a:b], p)
        log += p.take_changes()
        p = PartitionSessions(GAP)  # a new process: the state only from the log
        for k, v in log:
            p.restore(k, v)
        p.restored()
    assert out == whole


def test_session_json_round_trip():
    s = Session("u", 1, 5, 3, 1, 1, 1, "/a", "/b")
    assert Session.from_json(s.to_json()) == s
    assert json.loads(s.summary())["session_id"] == "u@1"


# ---------------------------------------------------------------------- kill -9, end to end
class Killable:
    """A broker of this test's own that can be killed -9 and started again on the same port."""

    def __init__(self, bootstrap: str, kill, start) -> None:
        self.bootstrap, self.kill, self.start = bootstrap, kill, start


@pytest.fixture(params=[pytest.param("kafka4", marks=pytest.mark.kafka_case), "odradek"])
def killable_broker(request, kafka_factory, tmp_path):
    if request.param == "kafka4":
        k = kafka_factory("4")
        yield Killable(k.bootstrap, k.nodes[0].kill, lambda: k.nodes[0].start(timeout=120))
        return
    from support.broker import BrokerProcess

    b = BrokerProcess(tmp_path / "odradek", {"num.partitions": "3"})
    b.start()
    yield Killable(b.bootstrap, b.kill, lambda: b.start(timeout=120))
    b.stop()


def _expected(bootstrap: str, topic: str, partitions: int) -> list[dict]:
    """The sessions one uninterrupted pass finishes, per partition in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"x-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    out = []
    try:
        for part in range(partitions):
            _lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
            c.assign([TopicPartition(topic, part, 0)])
            p = PartitionSessions(GAP)
            seen = 0
            while seen < hi:
                for m in c.consume(500, 5):
                    assert m.error() is None, m.error()
                    seen = m.offset() + 1
                    out.extend(json.loads(s.summary()) for s in p.add(json.loads(m.value())))
    finally:
        c.close()
    return out


def _output(bootstrap: str, topic: str) -> list[dict]:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out, idle = [], time.monotonic()
    try:
        while time.monotonic() - idle < 8:
            for m in c.consume(500, 1):
                if m.error() is None:
                    out.append(json.loads(m.value()))
                    idle = time.monotonic()
    finally:
        c.close()
    return out


def _start(bootstrap: str, topic: str, out_topic: str, log_path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "odradek", "pipeline", "sessionize", "-b", bootstrap, "--topic", topic]
    cmd += ["--output", out_topic, "--group", f"g-{topic}", "--gap-ms", str(GAP), "--max-records", "20"]
    cmd += ["--idle-exit", "6"]
    return subprocess.Popen(cmd, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT, env=dict(os.environ))


def test_every_session_exactly_once_across_kill_9_of_pipeline_and_broker(killable_broker, tmp_path):
    from odradek.pipeline.events import generate

    k = killable_broker
    topic, out_topic = f"act-{uuid.uuid4().hex[:6]}", f"ses-{uuid.uuid4().hex[:6]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": k.bootstrap})  # event times of 2023: kept from retention
    for f in admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "-1"})]).values():
        f.result(30)
    generate(k.bootstrap, topic, count=20_000, partitions=3, seed=11, progress=False, start_ms=T0, spacing_ms=700)
    want = _expected(k.bootstrap, topic, 3)
    assert len(want) > 1000
    log = tmp_path / "sessionize.log"
    kills = 0
    rng = random.Random(7)
    proc = _start(k.bootstrap, topic, out_topic, log)
    deadline = time.monotonic() + 600
    # kill -9 the pipeline three times mid-run, and the broker once (the pipeline rides it out)
    plan = ["pipeline", "broker", "pipeline", "pipeline"]
    while time.monotonic() < deadline:
        if plan:
            time.sleep(rng.uniform(0.5, 1.5))  # odradek's broker serves the whole input in ~8 s
            if proc.poll() is not None:
                break  # finished before the plan did
            what = plan.pop(0)
            if what == "pipeline":
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                proc = _start(k.bootstrap, topic, out_topic, log)
            else:
                k.kill()
                time.sleep(2)
                k.start()
            kills += 1
            continue
        try:
            rc = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
        assert rc == 0, log.read_text()[-4000:]
        break
    else:
        proc.kill()
        pytest.fail("sessionize did not finish: " + log.read_text()[-4000:])
    assert not plan, (
        f"the pipeline finished after {kills} kills, before the plan's end: make the workload larger\n"
        + log.read_text()[-3000:]
    )
    got = _output(k.bootstrap, out_topic)
    ids = [s["session_id"] for s in got]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"{len(dupes)} sessions written more than once, e.g. {dupes[:5]}"
    key = lambda s: s["session_id"]  # noqa: E731
    missing = sorted(set(map(key, want)) - set(ids))
    assert not missing, f"{len(missing)} sessions missing, e.g. {missing[:5]}"
    assert sorted(got, key=key) == sorted(want, key=key)
