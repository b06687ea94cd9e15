"""Differential: the authorization matrix with SASL-authenticated principals, odradek against
Apache Kafka 4.x (StandardAuthorizer), answers compared field by field.

Both brokers: a PLAINTEXT listener (Kafka's own broker-to-controller requests, as
User:ANONYMOUS) and a SASL_PLAINTEXT listener with PLAIN users alice, bob and admin;
`super.users=User:admin;User:ANONYMOUS` and `allow.everyone.if.no.acl.found=false` (unlike
test_diff_acl_matrix.py, which runs as ANONYMOUS with the opposite default). admin creates the
topics and these ACLs (over SASL, as a super user):

- topic `u-t`: ALLOW User:alice ALL, DENY User:bob ALL; topic prefix `u-pre-`: ALLOW User:alice READ;
- topic `u-none`: no ACL at all (nobody but the super user, with allow.everyone false);
- group `u-g`: ALLOW User:alice ALL, DENY User:bob ALL; transactional id `u-tx`: ALLOW User:alice ALL.

Then alice, bob and admin each log in and ask the same questions: Metadata (with authorized
operations), Produce, Fetch, ListOffsets, DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs (validate only; topics, and the brokers' default resource: ALTER_CONFIGS
on the cluster), DeleteRecords, CreateTopics (validate only), the group calls (OffsetCommit of
every topic included), InitProducerId, DescribeAcls (needs DESCRIBE on the cluster). Last,
DeleteTopics: bob, then alice, then admin, each of every topic still there (and of the absent one)."""

from __future__ import annotations

import time

import pytest
from support import apache_kafka
from support.broker import BrokerProcess, free_port
from support.diff import Pair, Target, unique
from support.proto import (
    BROKER,
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
from odradek.protocol.sasl import plain

pytestmark = pytest.mark.reference

PASSWORDS = {"admin": "admin-Secret-0", "alice": "alice-Secret-1", "bob": "bob-Secret-2"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    + ";"
)
SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
    "super.users": "User:admin;User:ANONYMOUS",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
}
TOPIC, GROUP, TXN = 2, 3, 5
LITERAL, PREFIXED = 3, 4
ALL, READ = 2, 3
DENY, ALLOW = 2, 3
USERS = ("alice", "bob", "admin")
TOPICS = ("t", "pre-x", "none")
ALL_TOPICS = (*TOPICS, "absent")


def acls(u: str) -> list[tuple]:
    return [
        (TOPIC, f"{u}-t", LITERAL, "User:alice", ALL, ALLOW),
        (TOPIC, f"{u}-t", LITERAL, "User:bob", ALL, DENY),
        (TOPIC, f"{u}-pre-", PREFIXED, "User:alice", READ, ALLOW),
        (GROUP, f"{u}-g", LITERAL, "User:alice", ALL, ALLOW),
        (GROUP, f"{u}-g", LITERAL, "User:bob", ALL, DENY),
        (TXN, f"{u}-tx", LITERAL, "User:alice", ALL, ALLOW),
    ]


class SaslTarget(Target):
    def __init__(self, name: str, sasl_bootstrap: str, version: str) -> None:
        super().__init__(name, sasl_bootstrap, version)

    def login(self, user: str) -> RawConnection:
        c = RawConnection(self.bootstrap)
        r = c.call(17, 1, mechanism="PLAIN")
        assert int(r.error_code) == 0, r
        r = c.call(36, 2, auth_bytes=plain(user, PASSWORDS[user]))
        assert int(r.error_code) == 0, r
        return c


@pytest.fixture(scope="module")
def principal_pair(tmp_path_factory):
    reason = apache_kafka.unavailable_reason("4")
    if reason:
        pytest.skip(reason)
    kafka = apache_kafka.ApacheKafka(tmp_path_factory.mktemp("kafka-acl-sasl"), line="4", overrides=SETTINGS)
    node = kafka.nodes[0]
    kafka_sasl = free_port()
    node.configure(
        {
            **node.properties,
            "listeners": node.properties["listeners"] + f",SASL_PLAINTEXT://127.0.0.1:{kafka_sasl}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{kafka_sasl}",
            "listener.security.protocol.map": node.properties["listener.security.protocol.map"]
            + ",SASL_PLAINTEXT:SASL_PLAINTEXT",
        }
    )
    kafka.start()
    plain_port, sasl_port = free_port(), free_port()
    odradek_settings = {
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.replication.factor": "1",
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        **SETTINGS,
    }
    try:
        odradek = BrokerProcess(tmp_path_factory.mktemp("odradek-acl-sasl"), odradek_settings, port=plain_port)
        odradek.start(timeout=30)
    except Exception:
        kafka.stop()
        raise
    yield Pair(
        SaslTarget("kafka", f"127.0.0.1:{kafka_sasl}", kafka.version),
        SaslTarget("odradek", f"127.0.0.1:{sasl_port}", "odradek"),
    )
    odradek.stop()
    kafka.stop()


def set_up(target: SaslTarget, u: str) -> None:
    with target.login("admin") as c:
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
            )  # fmt: skip
            for rt, name, pt, principal, op, perm in acls(u)
        )
        r = c.call(30, 3, creations=creations)
        assert [int(x.error_code) for x in r.results] == [0] * len(creations), r
        deadline = time.monotonic() + 15
        while len(described(c, u)) != len(acls(u)):
            assert time.monotonic() < deadline, "the ACLs were not applied within 15 s"
            time.sleep(0.1)
        # the coordinators up (as the super user), so the answers compare authorization, not loading
        deadline = time.monotonic() + 30
        while True:
            found = [int(x.error_code) for x in c.call(10, 4, key_type=0, coordinator_keys=(f"{u}-g",)).coordinators]
            txn = [int(x.error_code) for x in c.call(10, 4, key_type=1, coordinator_keys=(f"{u}-tx",)).coordinators]
            if found == [0] and txn == [0]:
                break
            assert time.monotonic() < deadline, f"no coordinators within 30 s: {found} {txn}"
            time.sleep(0.2)


def described(c: RawConnection, u: str) -> list:
    r = c.call(29, 3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
               principal_filter=None, host_filter=None, operation=1, permission_type=1)  # fmt: skip
    return [
        (res.resource_name, a.principal) for res in r.resources for a in res.acls if res.resource_name.startswith(u)
    ]


def questions(c: RawConnection, u: str, user: str) -> dict:
    t = {n: f"{u}-{n}" for n in ALL_TOPICS}
    out: dict = {}
    out["metadata"] = metadata(c, [t[n] for n in ALL_TOPICS], topic_ops=True).topics
    out["produce"] = {n: produce(c, t[n], [batch(Record(timestamp=1_700_000_000_000, value=b"v"))]) for n in ALL_TOPICS}
    out["fetch"] = {
        n: [int(p.error_code) for r in fetch(c, [(t[n], 0, 0, 1 << 20)]).responses for p in r.partitions]
        for n in ALL_TOPICS
    }
    out["list_offsets"] = {n: list_offsets(c, t[n], [(0, -1)]) for n in ALL_TOPICS}
    out["describe_configs"] = {n: int(describe_configs(c, TOPIC, t[n]).error_code) for n in ALL_TOPICS}
    out["alter_configs"] = {
        n: _config_answer(alter_configs(c, TOPIC, t[n], {"retention.ms": "100000"}, True)) for n in ALL_TOPICS
    }
    out["incremental_alter_configs"] = {
        n: _config_answer(incremental_alter(c, TOPIC, t[n], [("retention.ms", 0, "100000")], True)) for n in ALL_TOPICS
    }
    out["alter_broker_configs"] = [
        _config_answer(incremental_alter(c, BROKER, "", [("message.max.bytes", 0, "1048600")], True)),
    ]
    if user != "admin":  # (allowed, the whole set replaced: Kafka 4's KRaft refuses to drop min.insync.replicas)
        out["alter_broker_configs"].append(
            _config_answer(alter_configs(c, BROKER, "", {"message.max.bytes": "1048600"}, True))
        )
    out["delete_records"] = {n: delete_records(c, t[n], [(0, 0)]).partitions for n in ALL_TOPICS}
    created = create_topics(c, *({"name": f"{u}-{n}"} for n in ("pre-new", "fresh")), validate_only=True)
    # (Kafka answers the topics in its own order: by name here)
    out["create_topics"] = sorted((x.name, int(x.error_code)) for x in created.topics)
    group = f"{u}-g"
    out["find_coordinator"] = [
        int(x.error_code) for x in c.call(10, 4, key_type=0, coordinator_keys=(group,)).coordinators
    ]
    out["offset_commit"] = c.call(
        8,
        9,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=tuple(_commit_topic(t[n]) for n in ALL_TOPICS),
    ).topics
    out["offset_fetch"] = c.call(
        9, 8, groups=(nested(9, 8, "OffsetFetchRequestGroup", group_id=group, topics=None),), require_stable=False
    ).groups
    out["describe_group"] = [
        (int(g.error_code), g.authorized_operations)
        for g in c.call(15, 5, groups=(group,), include_authorized_operations=True).groups
    ]
    out["init_producer_id"] = init_producer_id(c, f"{u}-tx")
    r = c.call(29, 3, resource_type_filter=TOPIC, resource_name_filter=t["t"], pattern_type_filter=3,
               principal_filter=None, host_filter=None, operation=1, permission_type=1)  # fmt: skip
    out["describe_acls"] = (
        int(r.error_code),
        sorted((a.principal, int(a.permission_type)) for x in r.resources for a in x.acls),
    )
    return out


def _config_answer(r) -> tuple:
    return int(r.error_code), r.error_message


def _commit_topic(name: str):
    part = nested(8, 9, "OffsetCommitRequestPartition", partition_index=0, committed_offset=0,
                  committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
    return nested(8, 9, "OffsetCommitRequestTopic", name=name, partitions=(part,))


def delete_topics(c: RawConnection, names: list[str]) -> list[tuple]:
    """DeleteTopics v6 by name: (name, error code, message) per topic, by name (ids differ)."""
    topics = tuple(nested(20, 6, "DeleteTopicState", name=n, topic_id=None) for n in names)
    r = c.call(20, 6, topics=topics, timeout=30000)
    return sorted((x.name, int(x.error_code), x.error_message) for x in r.responses)


def init_producer_id(c: RawConnection, txn_id: str) -> int:
    """InitProducerId's error code, retried while the transaction coordinator is still loading
    (COORDINATOR_LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR: Kafka's takes a moment after
    its FindCoordinator answers)."""
    deadline = time.monotonic() + 30
    while True:
        r = c.call(22, 5, transactional_id=txn_id, transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        if int(r.error_code) not in (14, 15, 16) or time.monotonic() > deadline:
            return int(r.error_code)
        time.sleep(0.2)


def test_authorization_matrix_with_sasl_principals(principal_pair):
    # Error messages as Kafka 4's: TOPIC_AUTHORIZATION_FAILED of AlterConfigs,
    # IncrementalAlterConfigs and DeleteTopics says "Topic authorization failed." (its controller
    # answers them; Kafka 3.9's ZooKeeper-mode broker leaves the message null)
    u = unique("aclp")

    def scenario(target: SaslTarget) -> dict:
        set_up(target, u)
        out = {}
        for user in USERS:
            with target.login(user) as c:
                out[user] = questions(c, u, user)
        names = [f"{u}-{n}" for n in ALL_TOPICS]
        out["delete_topics"] = {}
        for user, asked in (("bob", names), ("alice", names), ("admin", [f"{u}-{n}" for n in ("none", "absent")])):
            with target.login(user) as c:
                out["delete_topics"][user] = delete_topics(c, asked)
        return out

    kafka, odradek = principal_pair.run(scenario)
    got = principal_pair.compare(kafka, odradek)
    # the matrix means what it says
    produced = {user: {n: got[user]["produce"][n]["error_code"] for n in ALL_TOPICS} for user in USERS}
    assert produced["alice"] == {"t": 0, "pre-x": 29, "none": 29, "absent": 29}
    assert produced["bob"] == {"t": 29, "pre-x": 29, "none": 29, "absent": 29}
    assert produced["admin"] == {"t": 0, "pre-x": 0, "none": 0, "absent": 3}
    assert {user: got[user]["fetch"]["pre-x"] for user in USERS} == {"alice": [0], "bob": [29], "admin": [0]}
    assert {user: got[user]["init_producer_id"] for user in USERS} == {"alice": 0, "bob": 53, "admin": 0}
    assert {user: got[user]["describe_acls"][0] for user in USERS} == {"alice": 31, "bob": 31, "admin": 0}
    assert {user: got[user]["describe_group"][0][0] for user in USERS} == {"alice": 0, "bob": 30, "admin": 0}
    committed = {
        user: {x["name"].removeprefix(f"{u}-"): x["partitions"][0]["error_code"] for x in got[user]["offset_commit"]}
        for user in USERS
    }
    assert committed["alice"] == {"t": 0, "pre-x": 0, "none": 29, "absent": 29}
    assert set(committed["bob"].values()) == {30}  # the group is denied to bob
    assert committed["admin"] == {"t": 0, "pre-x": 0, "none": 0, "absent": 3}
    assert {user: got[user]["alter_configs"]["t"][0] for user in USERS} == {"alice": 0, "bob": 29, "admin": 0}
    assert {user: got[user]["alter_configs"]["pre-x"][0] for user in USERS} == {"alice": 29, "bob": 29, "admin": 0}
    assert {user: [x[0] for x in got[user]["alter_broker_configs"]] for user in USERS} == {
        "alice": [31, 31],
        "bob": [31, 31],
        "admin": [0],
    }
    deleted = {user: {n.removeprefix(f"{u}-"): code for n, code, _m in got["delete_topics"][user]} for user in USERS}
    assert deleted["bob"] == {"t": 29, "pre-x": 29, "none": 29, "absent": 29}
    assert deleted["alice"] == {"t": 0, "pre-x": 29, "none": 29, "absent": 29}
    assert deleted["admin"] == {"none": 0, "absent": 3}
