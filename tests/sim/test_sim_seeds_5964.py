"""Seed 5964 of the long run (issue 25): `internal-error`, faults reassign, three zk-cuts,
config, slow-link.

What happened: b3, cut from ZooKeeper for 6.1 s (past its 6 s session), was healed at
11.548 s; 14 ms later the fault runner's IncrementalAlterConfigs (max.message.bytes) reached
it, and the topic-config write in ZooKeeper failed under it with kazoo's SessionExpiredError
(the session's loss was being learnt that very moment). Nothing between the ZooKeeper store
and the handler turned it into an answer: the broker logged "incremental_alter_configs v1
handler failed" and closed the admin's connection. Kafka's ZkAdminManager answers each
resource of an AlterConfigs apart, a ZooKeeper error as UNKNOWN_SERVER_ERROR.

The fix: the ZooKeeper store's admin writes (topics, configs, producer id blocks) raise
`MetadataUnavailable` when the session or connection fails under them
(cluster/zookeeper.py), and `ConfigAdmin.apply` answers a failed metadata write with the
resource's error code (broker/config_admin.py). Scripted here: each broker's ZooKeeper client
fails the topic-config write once with SessionExpiredError, and an IncrementalAlterConfigs
goes to each broker in turn on one connection. The same hole in InitProducerId (an idempotent
producer's, when the broker claims a new block of producer ids): COORDINATOR_LOAD_IN_PROGRESS,
which clients retry, as Kafka 4 answers while no block is available (k22; Kafka 3.9 in
ZooKeeper mode answers UNKNOWN_SERVER_ERROR, fatal to the Java producer).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kazoo.exceptions import SessionExpiredError

from odradek.client.aio.admin import INCREMENTAL_ALTER_CONFIGS
from odradek.client.producer.sender import INIT_PRODUCER_ID
from odradek.cluster import zk_layout as L
from odradek.protocol.errors import ErrorCode
from odradek.testing.sim.faults import Fault
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed
from odradek.testing.sim.runner import FaultRunner

CI = PROFILES["ci"]
OPTS = dataclasses.replace(CI, duration=12.0)


def _request(topic: str, value: str) -> dict[str, Any]:
    change = {"name": "retention.ms", "config_operation": 0, "value": value}
    return {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [change]}], "validate_only": False}


async def session_expired_under_config_writes(r: FaultRunner, f: Fault) -> None:
    """Each broker's ZooKeeper client fails its next write of the topic's config znode with
    SessionExpiredError; an IncrementalAlterConfigs of the topic goes to each broker, then
    again: the answers (error code per resource), or the exception the admin got."""
    c = r.c
    path = L.topic_config_path(r.topic)
    failed: list[int] = []
    for b in (1, 2, 3):
        client: Any = c.host(b).broker.zk  # type: ignore[union-attr]

        def failing(p: str, *args: Any, _b: int = b, _set: Any = client.set, **kwargs: Any) -> Any:
            if p == path and _b not in failed:
                failed.append(_b)
                raise SessionExpiredError()
            return _set(p, *args, **kwargs)

        client.set = failing
    admin = await r.admin()
    answers: dict[str, Any] = {}
    for attempt in ("first", "again"):
        for b in (1, 2, 3):
            try:
                resp = await r._as_admin(admin.cluster.send(b, INCREMENTAL_ALTER_CONFIGS, _request(r.topic, "3600000")))
                answers[f"b{b} {attempt}"] = [x.error_code for x in resp.responses]
            except Exception as e:  # noqa: BLE001 - what the admin got is the result
                answers[f"b{b} {attempt}"] = repr(e)
    r.notes["failed"] = failed
    r.notes["answers"] = answers


def test_a_config_write_whose_zookeeper_session_expires_under_it_is_answered_with_an_error_code():
    r = run_seed(1, OPTS, faults=[Fault(3.0, "script", arg=session_expired_under_config_writes)])
    assert sorted(r.notes.get("failed", [])) == [1, 2, 3], r.notes
    answers = r.notes["answers"]
    for b in (1, 2, 3):
        assert answers[f"b{b} first"] == [ErrorCode.unknown_server_error], answers
        assert answers[f"b{b} again"] == [0], answers  # the connection goes on; the write is made
    assert [str(a) for a in r.anomalies if a.kind == "internal-error"] == []


async def session_expired_under_producer_id_claims(r: FaultRunner, f: Fault) -> None:
    """Each broker's block of producer ids used up, its ZooKeeper client failing its next read of
    the block znode with SessionExpiredError; an InitProducerId (no transactional id) to each
    broker, then again: the error codes, or the exception the admin got."""
    c = r.c
    failed: list[int] = []
    for b in (1, 2, 3):
        broker: Any = c.host(b).broker
        ids = broker.services.producer_ids
        ids._next = ids._end  # used up: the next id needs a new block
        client = broker.zk

        def failing(p: str, *args: Any, _b: int = b, _get: Any = client.get, **kwargs: Any) -> Any:
            if p == L.PRODUCER_ID_BLOCK and _b not in failed:
                failed.append(_b)
                raise SessionExpiredError()
            return _get(p, *args, **kwargs)

        client.get = failing
    admin = await r.admin()
    request = {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
    answers: dict[str, Any] = {}
    for attempt in ("first", "again"):
        for b in (1, 2, 3):
            try:
                resp = await r._as_admin(admin.cluster.send(b, INIT_PRODUCER_ID, request))
                answers[f"b{b} {attempt}"] = (resp.error_code, resp.producer_id >= 0)
            except Exception as e:  # noqa: BLE001 - what the admin got is the result
                answers[f"b{b} {attempt}"] = repr(e)
    r.notes["failed"] = failed
    r.notes["answers"] = answers


def test_a_producer_id_claim_whose_zookeeper_session_expires_under_it_is_answered_with_an_error_code():
    r = run_seed(1, OPTS, faults=[Fault(3.0, "script", arg=session_expired_under_producer_id_claims)])
    assert sorted(r.notes.get("failed", [])) == [1, 2, 3], r.notes
    answers = r.notes["answers"]
    for b in (1, 2, 3):
        assert answers[f"b{b} first"] == (ErrorCode.coordinator_load_in_progress, False), answers
        assert answers[f"b{b} again"] == (0, True), answers
    assert [str(a) for a in r.anomalies if a.kind == "internal-error"] == []


def test_seed_5964():
    r = run_seed(5964, CI)
    assert r.anomalies == [], [str(a) for a in r.anomalies]
