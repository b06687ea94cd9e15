"""Consumer groups end to end: two kafka-python consumers (and two confluent-kafka ones) share
a 4-partition topic; committed offsets survive a broker restart; the group can be deleted.

Each consumer runs in its own process (tests/support/group_member.py). This test used to run the two
kafka-python consumers as threads of the test process and hung about one run in three: one
consumer thread stayed blocked in kafka-python 3.0.12's ``ensure_coordinator_ready`` ->
``NetworkSelector.run`` -> ``threading.Event.wait()`` while both consumers' I/O threads sat idle
in ``select()``, and the broker's request log showed that consumer sending nothing more (no
FindCoordinator, no OffsetFetch, no Heartbeat) after its SyncGroup was answered in under 1 ms,
so its session expired 10 s later. The cross-thread task handed to kafka-python's new I/O loop
was never run or never reported back: a client-side lost wake-up, not a broker problem (the
broker had answered every request). With one consumer per process it did not happen again.
"""

from __future__ import annotations

import time

import pytest
from support.group_member import OVERRIDES, Member, create_topic, produce, split_ok, wait_until

pytestmark = pytest.mark.interop

kafka = pytest.importorskip("kafka")


def _offsets(bootstrap: str, group: str) -> dict[int, int] | None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        res = admin.list_group_offsets(group).get(group)
        return {tp.partition: om.offset for tp, om in res.items()} if res else res
    except Exception:  # noqa: BLE001 - e.g. coordinator loading after a restart
        return None
    finally:
        admin.close()


@pytest.mark.parametrize("kind", ["kafka_python", "confluent"])
def test_two_consumers_share_partitions_offsets_survive_restart(broker_factory, tmp_path, kind):
    if kind == "confluent":
        pytest.importorskip("confluent_kafka")
    b = broker_factory(overrides=OVERRIDES)
    create_topic(b.bootstrap, "t4", 4)
    first = [f"a{i}" for i in range(40)]
    produce(b.bootstrap, "t4", first, 4)
    ms = [Member(kind, b.bootstrap, "t4", "grp", n, session_timeout_ms=10000, log_dir=tmp_path) for n in ("c1", "c2")]
    try:
        wait_until(lambda: split_ok(ms, 4) and all(len(m.assignment) == 2 for m in ms), 30, "2 + 2 partitions", ms)
        wait_until(lambda: set(first) <= set(ms[0].values + ms[1].values), 30, "the first 40 records", ms)
        second = [f"b{i}" for i in range(40)]
        produce(b.bootstrap, "t4", second, 4)
        wait_until(lambda: set(second) <= set(ms[0].values + ms[1].values), 30, "every record consumed", ms)
        # each consumer got the second batch only from its own partitions
        got_b = [{v for v in m.values if v.startswith("b")} for m in ms]
        assert got_b[0].isdisjoint(got_b[1])
        for m, got in zip(ms, got_b):
            assert got == {f"b{i}" for i in range(40) if i % 4 in m.assignment}
    finally:
        for m in ms:
            m.stop()
    for m in ms:
        assert m.closed_cleanly and not m.errors(), (m, m.errors(), m.stderr_tail())

    assert _offsets(b.bootstrap, "grp") == {0: 20, 1: 20, 2: 20, 3: 20}
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        assert "grp" in str(admin.list_groups())
    finally:
        admin.close()

    # committed offsets survive a restart (rebuilt by replaying __consumer_offsets)
    b.restart()
    wait_until(lambda: bool(_offsets(b.bootstrap, "grp")), 30, "offsets after restart")
    assert _offsets(b.bootstrap, "grp") == {0: 20, 1: 20, 2: 20, 3: 20}
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.delete_groups(["grp"])
    finally:
        admin.close()
    assert not _offsets(b.bootstrap, "grp")
    # a new member of the deleted group starts over from the beginning
    m = Member(kind, b.bootstrap, "t4", "grp", "c3", log_dir=tmp_path)
    try:
        wait_until(lambda: len(m.values) >= 80, 30, "all 80 records again", [m])
        time.sleep(0.3)
        assert sorted(m.values) == sorted(first + second)
    finally:
        m.stop()
