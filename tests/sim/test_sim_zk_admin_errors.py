"""CreateTopics and CreatePartitions whose ZooKeeper write fails under them (the session expired
as the request came in, as in seed 5964 for a config write): the topic's error code, as Kafka's
ZkAdminManager answers a ZooKeeper error (UNKNOWN_SERVER_ERROR), not KAFKA_STORAGE_ERROR (which
says a log directory failed) and not the connection's end; the next request on the same
connection is served."""

from __future__ import annotations

import dataclasses
from typing import Any

from kazoo.exceptions import SessionExpiredError

from odradek.client.aio.admin import CREATE_PARTITIONS, CREATE_TOPICS
from odradek.cluster import zk_layout as L
from odradek.cluster.store import MetadataTimeout
from odradek.protocol.errors import ErrorCode
from odradek.testing.sim.faults import Fault
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed
from odradek.testing.sim.runner import FaultRunner

OPTS = dataclasses.replace(PROFILES["ci"], duration=12.0)
TOPIC_PATHS = {L.topic_path(f"zk-fail-{b}") for b in (1, 2, 3)}


def _create(name: str) -> dict[str, Any]:
    topic = {"name": name, "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}
    return {"topics": [topic], "timeout": 10000, "validate_only": False}


def _add_partition(name: str, count: int) -> dict[str, Any]:
    return {"topics": [{"name": name, "count": count, "assignments": None}], "timeout": 10000, "validate_only": False}


async def session_expired_under_topic_writes(r: FaultRunner, f: Fault) -> None:
    """Each broker's ZooKeeper client fails its next create, then its next set, of a topic's
    znode with SessionExpiredError; a CreateTopics then a CreatePartitions goes to each broker,
    each twice: the error codes, or the exception the admin got."""
    c = r.c
    failed: list[tuple[str, int]] = []
    for b in (1, 2, 3):
        client: Any = c.host(b).broker.zk  # type: ignore[union-attr]

        def fail_once(kind: str, p: str, _b: int) -> None:
            if p in TOPIC_PATHS and (kind, _b) not in failed:  # (not the partitions' state znodes)
                failed.append((kind, _b))
                raise SessionExpiredError()

        def create(p: str, *args: Any, _b: int = b, _create: Any = client.create, **kwargs: Any) -> Any:
            fail_once("create", p, _b)
            return _create(p, *args, **kwargs)

        def set_(p: str, *args: Any, _b: int = b, _set: Any = client.set, **kwargs: Any) -> Any:
            fail_once("set", p, _b)
            return _set(p, *args, **kwargs)

        client.create, client.set = create, set_
    admin = await r.admin()
    answers: dict[str, Any] = {}
    for b in (1, 2, 3):
        name = f"zk-fail-{b}"
        for attempt in ("first", "again"):
            try:
                resp = await r._as_admin(admin.cluster.send(b, CREATE_TOPICS, _create(name)))
                answers[f"create b{b} {attempt}"] = [t.error_code for t in resp.topics]
            except Exception as e:  # noqa: BLE001 - what the admin got is the result
                answers[f"create b{b} {attempt}"] = repr(e)
        for attempt, count in (("first", 2), ("again", 2)):
            try:
                resp = await r._as_admin(admin.cluster.send(b, CREATE_PARTITIONS, _add_partition(name, count)))
                answers[f"partitions b{b} {attempt}"] = [t.error_code for t in resp.results]
            except Exception as e:  # noqa: BLE001
                answers[f"partitions b{b} {attempt}"] = repr(e)
    r.notes["failed"] = failed
    r.notes["answers"] = answers


def test_topic_writes_whose_zookeeper_session_expires_under_them_are_answered_unknown_server_error():
    r = run_seed(1, OPTS, faults=[Fault(3.0, "script", arg=session_expired_under_topic_writes)])
    assert sorted(r.notes.get("failed", [])) == [(k, b) for k in ("create", "set") for b in (1, 2, 3)], r.notes
    answers = r.notes["answers"]
    for b in (1, 2, 3):
        assert answers[f"create b{b} first"] == [ErrorCode.unknown_server_error], answers
        assert answers[f"create b{b} again"] == [0], answers  # the connection goes on; the topic is made
        assert answers[f"partitions b{b} first"] == [ErrorCode.unknown_server_error], answers
        assert answers[f"partitions b{b} again"] == [0], answers
    assert [str(a) for a in r.anomalies if a.kind == "internal-error"] == []


async def leaders_not_seen_in_time(r: FaultRunner, f: Fault) -> None:
    """Broker 1's store does not see the new topic's leaders in time (its wait raises
    MetadataTimeout: in the simulator the controller elects them before any wait would end):
    CreateTopics answers REQUEST_TIMED_OUT, Kafka's answer when the topic's metadata does not
    arrive within the request's timeout."""
    store: Any = r.c.host(1).broker.services.topics.store  # type: ignore[union-attr]

    async def not_in_time(condition: Any, what: str, timeout_s: float | None = None) -> None:
        raise MetadataTimeout(f"timed out waiting for {what}")

    store.wait_for = not_in_time
    admin = await r.admin()
    resp = await r._as_admin(admin.cluster.send(1, CREATE_TOPICS, _create("zk-slow")))
    r.notes["answer"] = [t.error_code for t in resp.topics]


def test_a_topic_whose_leaders_are_not_seen_in_time_is_answered_request_timed_out():
    r = run_seed(1, OPTS, faults=[Fault(3.0, "script", arg=leaders_not_seen_in_time)])
    assert r.notes.get("answer") == [ErrorCode.request_timed_out], r.notes
