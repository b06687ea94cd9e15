"""Differential: the authorization matrix, odradek against Apache Kafka 4.x, both with an
authorizer (Kafka's StandardAuthorizer; odradek's with its semantics) and
allow.everyone.if.no.acl.found=true (Kafka's KRaft node authorizes its own broker-to-controller
requests, User:ANONYMOUS on PLAINTEXT, through the same authorizer: without ACLs on the cluster,
that setting lets them through, and super.users stays unset).

Every principal here is User:ANONYMOUS (PLAINTEXT). One set of ACLs per run, on resources of
unique names: a topic allowed everything, one allowed and denied everything (deny wins), one
allowed everything but WRITE, one with ACLs of another principal only, one under a prefixed
READ, one without any ACL (allowed: allow.everyone.if.no.acl.found), one that does not exist
with ACLs of another principal; groups and transactional ids alike. Then each API family asks
about all of them and the answers are compared field by field (where a field legitimately
differs, only the error codes: said where)."""

from __future__ import annotations

import time

import pytest
from support import apache_kafka
from support.broker import BrokerProcess
from support.diff import Pair, Target, unique
from support.proto import (
    alter_configs,
    batch,
    create_topic,
    create_topics,
    delete_records,
    describe_configs,
    fetch,
    incremental_alter,
    list_offsets,
    metadata,
    produce,
)
from support.raw import RawConnection, nested

from odradek.protocol.records import Record

pytestmark = pytest.mark.reference

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SETTINGS = {"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"}
ME, SOMEONE = "User:ANONYMOUS", "User:someone"

TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5  # resource types
LITERAL, PREFIXED, MATCH = 3, 4, 2  # pattern types
ALL, READ, WRITE = 2, 3, 4  # operations
DENY, ALLOW = 2, 3

#: the topics made before the ACLs (a topic with ACLs of someone else could not be created after)
TOPICS = ("allow", "deny", "nowrite", "other", "pre-x", "none")
ALL_TOPICS = (*TOPICS, "ghost", "pre-absent", "absent")
GROUPS = ("g-allow", "g-deny", "g-other", "g-pre-x", "g-none")
TXN_IDS = ("tx-allow", "tx-other", "tx-none")


def acls(u: str) -> list[tuple]:
    """(resource type, name, pattern type, principal, operation, permission)."""
    return [
        (TOPIC, f"{u}-allow", LITERAL, ME, ALL, ALLOW),
        (TOPIC, f"{u}-deny", LITERAL, ME, ALL, ALLOW),
        (TOPIC, f"{u}-deny", LITERAL, ME, ALL, DENY),
        (TOPIC, f"{u}-nowrite", LITERAL, ME, ALL, ALLOW),
        (TOPIC, f"{u}-nowrite", LITERAL, ME, WRITE, DENY),
        (TOPIC, f"{u}-other", LITERAL, SOMEONE, ALL, ALLOW),
        (TOPIC, f"{u}-pre-", PREFIXED, ME, READ, ALLOW),
        (TOPIC, f"{u}-ghost", LITERAL, SOMEONE, ALL, ALLOW),
        (GROUP, f"{u}-g-allow", LITERAL, ME, ALL, ALLOW),
        (GROUP, f"{u}-g-deny", LITERAL, ME, ALL, ALLOW),
        (GROUP, f"{u}-g-deny", LITERAL, ME, READ, DENY),
        (GROUP, f"{u}-g-other", LITERAL, SOMEONE, ALL, ALLOW),
        (GROUP, f"{u}-g-pre-", PREFIXED, ME, READ, ALLOW),
        (TXN, f"{u}-tx-allow", LITERAL, ME, ALL, ALLOW),
        (TXN, f"{u}-tx-other", LITERAL, SOMEONE, ALL, ALLOW),
    ]


@pytest.fixture(scope="module")
def acl_pair(tmp_path_factory):
    reason = apache_kafka.unavailable_reason("4")
    if reason:
        pytest.skip(reason)
    kafka = apache_kafka.ApacheKafka(tmp_path_factory.mktemp("kafka-acl"), line="4", overrides=SETTINGS).start()
    odradek_settings = {
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.replication.factor": "1",
        **SETTINGS,
    }
    try:
        odradek = BrokerProcess(tmp_path_factory.mktemp("odradek-acl"), odradek_settings).start(timeout=30)
    except Exception:
        kafka.stop()
        raise
    yield Pair(Target("kafka", kafka.bootstrap, kafka.version), Target("odradek", odradek.bootstrap, "odradek"))
    odradek.stop()
    kafka.stop()


def any_filter(**kw) -> dict:
    f = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    f.update(kw)
    return f


def described_acls(c: RawConnection, u: str) -> set[tuple]:
    r = c.call(29, 3, **any_filter())
    assert int(r.error_code) == 0, r
    return {
        (
            int(res.resource_type),
            res.resource_name,
            int(res.pattern_type),
            a.principal,
            int(a.operation),
            int(a.permission_type),
        )
        for res in r.resources
        for a in res.acls
        if res.resource_name.startswith(u)
    }


def set_up(c: RawConnection, u: str) -> None:
    for name in TOPICS:
        create_topic(c, f"{u}-{name}")
    creations = tuple(
        nested(
            30,
            3,
            "AclCreation",
            resource_type=rt,
            resource_name=name,
            resource_pattern_type=pt,
            principal=principal,
            host="*",
            operation=op,
            permission_type=perm,
        )
        for rt, name, pt, principal, op, perm in acls(u)
    )
    r = c.call(30, 3, creations=creations)
    assert [int(x.error_code) for x in r.results] == [0] * len(creations), r
    # Kafka's broker applies the ACLs a moment after its controller has them
    deadline = time.monotonic() + 15
    while described_acls(c, u) != set(acls(u)):
        assert time.monotonic() < deadline, "the ACLs were not applied within 15 s"
        time.sleep(0.1)
    # the group and transaction coordinators up (the first FindCoordinator creates their topic), on
    # ids the ACLs allow, so that the answers compare authorization, not a loading coordinator
    deadline = time.monotonic() + 30
    while True:
        found = codes(c.call(10, 4, key_type=0, coordinator_keys=(f"{u}-g-allow",)))
        fetched = codes(c.call(9, 8, groups=(_fetch_group(f"{u}-g-allow"),), require_stable=False))
        txn = codes(c.call(10, 4, key_type=1, coordinator_keys=(f"{u}-tx-allow",)))
        if found == [0] and fetched == [0] and txn == [0]:
            break
        assert time.monotonic() < deadline, f"no coordinators within 30 s: {found} {fetched} {txn}"
        time.sleep(0.2)


def codes(value) -> list[int]:
    """Every error code in a response, in order (for answers whose other fields legitimately differ)."""
    out: list[int] = []

    def walk(v):
        if isinstance(v, tuple | list):
            for x in v:
                walk(x)
        elif hasattr(v, "__dataclass_fields__"):
            for name in v.__dataclass_fields__:
                x = getattr(v, name)
                if name.endswith("error_code"):
                    out.append(int(x))
                else:
                    walk(x)

    walk(value)
    return out


def test_authorization_matrix(acl_pair):
    u = unique("acl")
    t = {name: f"{u}-{name}" for name in ALL_TOPICS}

    def scenario(target: Target):
        with target.raw() as c:
            set_up(c, u)
            out: dict = {}
            out["metadata"] = metadata(c, [t[n] for n in ALL_TOPICS], topic_ops=True).topics
            out["produce"] = {n: produce(c, t[n], [_batch()]) for n in ALL_TOPICS}
            out["fetch"] = {
                n: [
                    (int(p.error_code), p.high_watermark)
                    for r in fetch(c, [(t[n], 0, 0, 1 << 20)]).responses
                    for p in r.partitions
                ]
                for n in ALL_TOPICS
            }
            out["list_offsets"] = {n: list_offsets(c, t[n], [(0, -1)]) for n in ALL_TOPICS}
            # configs: their lists differ between the brokers (tests/reference/test_diff_admin.py): codes only
            out["describe_configs"] = {n: int(describe_configs(c, TOPIC, t[n]).error_code) for n in ALL_TOPICS}
            out["alter_configs"] = {
                n: int(incremental_alter(c, TOPIC, t[n], [("retention.ms", 0, "100000")], True).error_code)
                for n in ALL_TOPICS
            }
            out["alter_configs_v2"] = {
                n: int(alter_configs(c, TOPIC, t[n], {"retention.ms": "100000"}, True).error_code) for n in ALL_TOPICS
            }
            out["delete_records"] = {n: delete_records(c, t[n], [(0, 0)]) for n in ALL_TOPICS}
            created = create_topics(
                c, *({"name": f"{u}-{n}"} for n in ("pre-new", "ghost", "fresh")), validate_only=True
            )
            out["create_topics"] = [(x.name, int(x.error_code), int(x.topic_config_error_code)) for x in created.topics]
            out["groups"] = {g: _group_calls(c, f"{u}-{g}", t) for g in GROUPS}
            out["init_producer_id"] = {x: _init_producer_id(c, f"{u}-{x}") for x in TXN_IDS}
            out["describe_acls_match"] = c.call(
                29,
                3,
                **any_filter(resource_type_filter=TOPIC, resource_name_filter=t["pre-x"], pattern_type_filter=MATCH),
            ).resources
            deleted = c.call(
                20,
                6,
                topics=tuple(nested(20, 6, "DeleteTopicState", name=t[n], topic_id=None) for n in ALL_TOPICS),
                timeout=30000,
            )
            out["delete_topics"] = {x.name: int(x.error_code) for x in deleted.responses}
            return out

    kafka, odradek = acl_pair.run(scenario)
    got = acl_pair.compare(kafka, odradek)
    # the matrix means what it says: allowed, denied, deny over allow, prefixed, no ACL
    produced = {n: got["produce"][n]["error_code"] for n in ALL_TOPICS}
    assert produced == {
        "allow": 0,
        "deny": 29,
        "nowrite": 29,
        "other": 29,
        "pre-x": 29,
        "none": 0,
        "ghost": 29,
        "pre-absent": 29,
        "absent": 3,
    }
    assert {n: got["fetch"][n][0][0] for n in ("allow", "deny", "pre-x", "other", "none")} == {
        "allow": 0,
        "deny": 29,
        "pre-x": 0,
        "other": 29,
        "none": 0,
    }
    assert {g: got["groups"][g]["describe"][0]["error_code"] for g in GROUPS} == {
        "g-allow": 0,
        "g-deny": 0,  # a deny of READ does not deny DESCRIBE
        "g-other": 30,
        "g-pre-x": 0,
        "g-none": 0,
    }
    assert got["init_producer_id"] == {"tx-allow": 0, "tx-other": 53, "tx-none": 0}
    # DELETE on the cluster (no ACL on it: allow.everyone.if.no.acl.found) allows every topic
    assert got["delete_topics"][t["deny"]] == 0 and got["delete_topics"][t["ghost"]] == 3


def _batch() -> bytes:
    return batch(Record(timestamp=1_700_000_000_000, key=b"k", value=b"v"))


def _group_calls(c: RawConnection, group: str, t: dict[str, str]) -> dict:
    """FindCoordinator, OffsetCommit (of an allowed and a denied topic), OffsetFetch, DescribeGroups."""
    out: dict = {}
    fc = c.call(10, 4, key_type=0, coordinator_keys=(group,))
    out["find_coordinator"] = codes(fc)

    def topic(name):
        part = nested(8, 9, "OffsetCommitRequestPartition", partition_index=0, committed_offset=0,
                      committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
        return nested(8, 9, "OffsetCommitRequestTopic", name=name, partitions=(part,))

    out["offset_commit"] = c.call(
        8,
        9,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(topic(t["allow"]), topic(t["deny"]), topic(t["pre-x"])),
    ).topics
    out["offset_fetch"] = c.call(9, 8, groups=(_fetch_group(group),), require_stable=False).groups
    out["describe"] = c.call(15, 5, groups=(group,), include_authorized_operations=True).groups
    return out


def _fetch_group(group: str):
    return nested(9, 8, "OffsetFetchRequestGroup", group_id=group, topics=None)


def _init_producer_id(c: RawConnection, txn_id: str) -> int:
    """InitProducerId's error code, retried while the transaction coordinator is still loading
    (COORDINATOR_LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR: Kafka's takes a moment after
    its FindCoordinator answers)."""
    deadline = time.monotonic() + 30
    while True:
        code = int(
            c.call(
                22, 5, transactional_id=txn_id, transaction_timeout=60000, producer_id=-1, producer_epoch=-1
            ).error_code
        )
        if code not in (14, 15, 16) or time.monotonic() > deadline:
            return code
        time.sleep(0.2)
