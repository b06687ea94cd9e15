"""Consumer groups end to end: a real broker process and real clients (kafka-python,
and confluent-kafka when installed) in one group on a 4-partition topic."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.interop

kafka = pytest.importorskip("kafka")

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "8"}


def _create_topic(bootstrap: str, name: str, partitions: int = 4) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 4) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap)
    for i, v in enumerate(values):
        p.send(topic, v, partition=i % partitions)
    p.flush()
    p.close()


class _Consumer(threading.Thread):
    @staticmethod
    def _commit(c) -> None:
        """A synchronous commit may legitimately fail while the group rebalances
        (kafka-python raises CommitFailedError without asking the broker); retry later."""
        from kafka.errors import CommitFailedError, KafkaError

        try:
            c.commit()
        except (CommitFailedError, KafkaError):
            pass

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.group, self.name_, self.stop = bootstrap, topic, group, name, stop
        self.values: list[bytes] = []
        self.assignment: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer

        try:
            c = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name_,
                              auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=500,
                              enable_auto_commit=False)
            while not self.stop.is_set():
                for _tp, recs in c.poll(200).items():
                    self.values.extend(r.value for r in recs)
                if self.values:
                    self._commit(c)
                self.assignment = {tp.partition for tp in c.assignment()}
            self._commit(c)
            c.close()
        except BaseException as e:  # surfaced by the test
            self.error = e


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_kafka_python_consumers_share_partitions(broker_factory):
    from kafka import KafkaAdminClient

    b = broker_factory(overrides=OVERRIDES)
    _create_topic(b.bootstrap, "t4")
    first = [f"a{i}".encode() for i in range(40)]
    _produce(b.bootstrap, "t4", first)
    stop = threading.Event()
    consumers = [_Consumer(b.bootstrap, "t4", "grp", n, stop) for n in ("c1", "c2")]
    for c in consumers:
        c.start()
    try:
        _wait(lambda: all(len(c.assignment) == 2 for c in consumers) or any(c.error for c in consumers), 30, "2 + 2 partitions")
        assert not any(c.error for c in consumers), [c.error for c in consumers]
        assert consumers[0].assignment.isdisjoint(consumers[1].assignment)
        second = [f"b{i}".encode() for i in range(40)]
        _produce(b.bootstrap, "t4", second)
        _wait(lambda: set(first + second) <= set(consumers[0].values + consumers[1].values), 30, "every record consumed")
        # after the rebalance, each consumer only got the second batch from its own partitions
        got_b = [{v for v in c.values if v.startswith(b"b")} for c in consumers]
        assert got_b[0].isdisjoint(got_b[1])
    finally:
        stop.set()
        for c in consumers:
            c.join(15)
    assert not any(c.error for c in consumers), [c.error for c in consumers]

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        offsets = _offsets_or_none(admin, "grp")
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 20, 1: 20, 2: 20, 3: 20}
        groups = admin.list_groups()
        assert "grp" in str(groups)
    finally:
        admin.close()

    # committed offsets survive a restart (rebuilt by replaying __consumer_offsets)
    b.restart()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        _wait(lambda: bool(_offsets_or_none(admin, "grp")), 30, "offsets after restart")
        offsets = _offsets_or_none(admin, "grp")
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 20, 1: 20, 2: 20, 3: 20}
        admin.delete_groups(["grp"])
        assert not _offsets_or_none(admin, "grp")
    finally:
        admin.close()


def _offsets_or_none(admin, group):
    try:
        return admin.list_group_offsets(group).get(group)
    except Exception:
        return None


def test_confluent_consumers_share_partitions(broker_factory):
    ck = pytest.importorskip("confluent_kafka")
    b = broker_factory(overrides=OVERRIDES)
    _create_topic(b.bootstrap, "c4")
    _produce(b.bootstrap, "c4", [f"v{i}".encode() for i in range(20)])
    conf = {"bootstrap.servers": b.bootstrap, "group.id": "cgrp", "auto.offset.reset": "earliest", "session.timeout.ms": 10000}
    cs = [ck.Consumer({**conf, "client.id": f"k{i}"}) for i in range(2)]
    for c in cs:
        c.subscribe(["c4"])
    seen: list[bytes] = []
    deadline = time.time() + 40
    while time.time() < deadline:
        for c in cs:
            m = c.poll(0.1)
            if m is not None and not m.error():
                seen.append(m.value())
        if len(set(seen)) == 20 and all(len(c.assignment()) == 2 for c in cs):
            break
    parts = [{tp.partition for tp in c.assignment()} for c in cs]
    for c in cs:
        c.close()
    assert len(set(seen)) == 20
    assert parts[0].isdisjoint(parts[1]) and parts[0] | parts[1] == {0, 1, 2, 3}
