"""Authorization in every API family on one broker in this process (authorizer on, super user
User:admin, allow.everyone.if.no.acl.found false): each request made by a principal the ACLs
allow and by one they do not (User:mallory, no ACL), with the codes Kafka answers; topics a
principal may not describe look absent; authorized-operations fields come from the ACLs."""

from __future__ import annotations

import asyncio

from support.inprocess import InProcessBroker
from support.raw import nested

from odradek.broker.connection_state import ConnectionState
from odradek.broker.security.acl import AclOperation as Op
from odradek.broker.security.acl import AclPermissionType as Perm
from odradek.broker.security.acl import PatternType as Pat
from odradek.broker.security.acl import ResourceType as Res
from odradek.broker.security.acl import operations_bits
from odradek.protocol.records import Record, build_batch

AUTHORIZER = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53


def who(b: InProcessBroker, principal: str) -> ConnectionState:
    c = b.connection()
    c.principal = principal
    return c


async def grant(b: InProcessBroker, *acls: tuple) -> None:
    """acls: (resource type, name, pattern type, principal, operation[, permission])."""
    creations = tuple(
        nested(
            30,
            3,
            "AclCreation",
            resource_type=a[0],
            resource_name=a[1],
            resource_pattern_type=a[2],
            principal=a[3],
            host="*",
            operation=a[4],
            permission_type=a[5] if len(a) > 5 else Perm.ALLOW,
        )
        for a in acls
    )
    r = await b.call(30, 3, connection=who(b, "User:admin"), creations=creations)
    assert [int(x.error_code) for x in r.results] == [0] * len(acls)


async def create_topic(b: InProcessBroker, name: str, as_: ConnectionState | None = None) -> object:
    t = nested(19, 7, "CreatableTopic", name=name, num_partitions=1, replication_factor=1, assignments=(), configs=())
    r = await b.call(19, 7, connection=as_ or who(b, "User:admin"), topics=(t,), timeout=30000, validate_only=False)
    return r.topics[0]


async def produce(b: InProcessBroker, conn: ConnectionState, topic: str, txn: str | None = None) -> int:
    pd = nested(0, 9, "PartitionProduceData", index=0, records=build_batch([Record(value=b"v")]))
    td = nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    r = await b.call(0, 9, connection=conn, transactional_id=txn, acks=1, timeout=30000, topic_data=(td,))
    return int(r.responses[0].partition_responses[0].error_code)


async def fetch(b: InProcessBroker, conn: ConnectionState, topic: str, replica_id: int = -1) -> int:
    fp = nested(
        1,
        12,
        "FetchPartition",
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    r = await b.call(
        1,
        12,
        connection=conn,
        replica_id=replica_id,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(nested(1, 12, "FetchTopic", topic=topic, partitions=(fp,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    return int(r.responses[0].partitions[0].error_code)


async def metadata(b: InProcessBroker, conn: ConnectionState, names: list[str] | None, auto: bool = False):
    topics = (
        None if names is None else tuple(nested(3, 12, "MetadataRequestTopic", topic_id=None, name=n) for n in names)
    )
    return await b.call(
        3,
        12,
        connection=conn,
        topics=topics,
        allow_auto_topic_creation=auto,
        include_topic_authorized_operations=True,
    )


def run(body) -> None:
    async def main(tmp):
        async with InProcessBroker(tmp, AUTHORIZER) as b:
            await body(b)

    return main


def test_produce_and_fetch(tmp_path):
    async def body(b):
        await create_topic(b, "orders")
        await create_topic(b, "other")
        await grant(
            b,
            (Res.TOPIC, "ord", Pat.PREFIXED, "User:alice", Op.WRITE),
            (Res.TOPIC, "orders", Pat.LITERAL, "User:alice", Op.READ),
            (Res.TOPIC, "orders", Pat.LITERAL, "User:eve", Op.ALL),
            (Res.TOPIC, "*", Pat.LITERAL, "User:eve", Op.READ, Perm.DENY),
        )
        alice, eve, mallory = who(b, "User:alice"), who(b, "User:eve"), who(b, "User:mallory")
        assert await produce(b, alice, "orders") == 0
        assert await produce(b, mallory, "orders") == TOPIC_AUTH
        assert await produce(b, alice, "other") == TOPIC_AUTH
        # an unknown topic the principal may not write: not told it is unknown
        assert await produce(b, mallory, "nope") == TOPIC_AUTH
        assert await produce(b, alice, "ord-nope") == 3  # may write there: UNKNOWN_TOPIC_OR_PARTITION
        assert await produce(b, alice, "orders", txn="tx") == TXN_AUTH
        assert await fetch(b, alice, "orders") == 0
        assert await fetch(b, mallory, "orders") == TOPIC_AUTH
        assert await fetch(b, eve, "orders") == TOPIC_AUTH  # deny over allow
        assert await produce(b, eve, "orders") == 0
        # a follower's fetch needs CLUSTER_ACTION on the cluster
        assert await fetch(b, alice, "orders", replica_id=2) == TOPIC_AUTH
        assert await fetch(b, who(b, "User:admin"), "orders") == 0

    asyncio.run(run(body)(tmp_path))


def test_metadata_hides_what_cannot_be_described_and_auto_creation_needs_create(tmp_path):
    async def body(b):
        for name in ("seen", "hidden"):
            await create_topic(b, name)
        await grant(
            b,
            (Res.TOPIC, "seen", Pat.LITERAL, "User:alice", Op.READ),
            (Res.TOPIC, "auto-", Pat.PREFIXED, "User:alice", Op.CREATE),
        )
        alice = who(b, "User:alice")
        every = await metadata(b, alice, None)
        assert [t.name for t in every.topics] == ["seen"]
        assert every.topics[0].topic_authorized_operations == operations_bits(Op.READ, Op.DESCRIBE)
        named = {t.name: t for t in (await metadata(b, alice, ["seen", "hidden", "absent"])).topics}
        for name in ("hidden", "absent"):  # the same answer whether the topic exists or not
            t = named[name]
            assert (int(t.error_code), t.partitions, t.topic_id, t.topic_authorized_operations) == (
                TOPIC_AUTH,
                (),
                None,  # no id (kio reads the zero id as None)
                -2147483648,
            )
        assert int(named["seen"].error_code) == 0 and len(named["seen"].partitions) == 1
        # auto-creation needs DESCRIBE and CREATE on the topic: CREATE does not imply DESCRIBE, so a
        # name the principal may only create is still not described
        r = await metadata(b, alice, ["auto-x"], auto=True)
        assert int(r.topics[0].error_code) == TOPIC_AUTH and "auto-x" not in b.services.snapshot.topics
        await grant(b, (Res.TOPIC, "auto-", Pat.PREFIXED, "User:alice", Op.DESCRIBE))
        r = await metadata(b, alice, ["auto-x"], auto=True)
        assert int(r.topics[0].error_code) == 0 and "auto-x" in b.services.snapshot.topics
        await grant(b, (Res.TOPIC, "*", Pat.LITERAL, "User:alice", Op.DESCRIBE))
        r = await metadata(b, alice, ["noauto"], auto=True)  # described, not creatable
        assert int(r.topics[0].error_code) == TOPIC_AUTH and "noauto" not in b.services.snapshot.topics
        cluster = await b.call(60, 0, connection=alice, include_cluster_authorized_operations=True)
        assert cluster.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
        admin = await b.call(60, 0, connection=who(b, "User:admin"), include_cluster_authorized_operations=True)
        assert admin.cluster_authorized_operations == operations_bits(
            Op.CREATE,
            Op.ALTER,
            Op.DESCRIBE,
            Op.CLUSTER_ACTION,
            Op.DESCRIBE_CONFIGS,
            Op.ALTER_CONFIGS,
            Op.IDEMPOTENT_WRITE,
        )

    asyncio.run(run(body)(tmp_path))


def test_topic_administration(tmp_path):
    async def body(b):
        await grant(
            b,
            (Res.TOPIC, "mine-", Pat.PREFIXED, "User:alice", Op.ALL),
            (Res.TOPIC, "mine-locked", Pat.LITERAL, "User:alice", Op.DELETE, Perm.DENY),
        )
        alice, mallory = who(b, "User:alice"), who(b, "User:mallory")
        t = await create_topic(b, "mine-1", alice)
        assert int(t.error_code) == 0 and int(t.topic_config_error_code) == 0 and t.configs
        t = await create_topic(b, "theirs", alice)
        assert (int(t.error_code), t.error_message) == (TOPIC_AUTH, "Authorization failed.")
        assert "theirs" not in b.services.snapshot.topics
        await create_topic(b, "mine-locked", alice)
        # configs
        res = nested(32, 4, "DescribeConfigsResource", resource_type=2, resource_name="mine-1", configuration_keys=None)
        r = await b.call(
            32, 4, connection=mallory, resources=(res,), include_synonyms=False, include_documentation=False
        )
        assert int(r.results[0].error_code) == TOPIC_AUTH and r.results[0].configs == ()
        r = await b.call(32, 4, connection=alice, resources=(res,), include_synonyms=False, include_documentation=False)
        assert int(r.results[0].error_code) == 0 and r.results[0].configs
        broker = nested(32, 4, "DescribeConfigsResource", resource_type=4, resource_name="1", configuration_keys=None)
        r = await b.call(
            32, 4, connection=alice, resources=(broker,), include_synonyms=False, include_documentation=False
        )
        assert int(r.results[0].error_code) == CLUSTER_AUTH
        # deletion: DELETE, deny over the prefixed ALL
        names = ("mine-1", "mine-locked", "theirs")
        r = await b.call(20, 5, connection=alice, topic_names=names, timeout=30000)
        assert {x.name: int(x.error_code) for x in r.responses} == {
            "mine-1": 0,
            "mine-locked": TOPIC_AUTH,
            "theirs": TOPIC_AUTH,
        }
        # the ACL APIs, the log dirs, reassignments: cluster operations
        r = await b.call(35, 4, connection=alice, topics=None)
        assert int(r.error_code) == CLUSTER_AUTH and r.results == ()

    asyncio.run(run(body)(tmp_path))


def test_groups_and_offsets(tmp_path):
    async def body(b):
        await create_topic(b, "events")
        await create_topic(b, "secret")
        await grant(
            b,
            (Res.GROUP, "app", Pat.LITERAL, "User:alice", Op.READ),
            (Res.TOPIC, "events", Pat.LITERAL, "User:alice", Op.READ),
        )
        alice, mallory = who(b, "User:alice"), who(b, "User:mallory")
        fc = await b.call(10, 3, connection=mallory, key="app", key_type=0)
        assert int(fc.error_code) == GROUP_AUTH
        fc = await b.call(10, 3, connection=alice, key="app", key_type=0)
        assert int(fc.error_code) == 0
        protocol = nested(11, 9, "JoinGroupRequestProtocol", name="range", metadata=b"")
        join = dict(
            group_id="app",
            session_timeout=10000,
            rebalance_timeout=10000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(protocol,),
            reason=None,
        )
        r = await b.call(11, 9, connection=mallory, **join)
        assert int(r.error_code) == GROUP_AUTH and r.member_id == ""

        def commit(topic):
            part = nested(8, 9, "OffsetCommitRequestPartition", partition_index=0, committed_offset=0,
                          committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
            return nested(8, 9, "OffsetCommitRequestTopic", name=topic, partitions=(part,))

        fields = dict(group_id="app", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None)
        r = await b.call(8, 9, connection=alice, topics=(commit("events"), commit("secret")), **fields)
        codes = {t.name: int(t.partitions[0].error_code) for t in r.topics}
        assert codes == {"events": 0, "secret": TOPIC_AUTH}
        r = await b.call(8, 9, connection=mallory, topics=(commit("events"),), **fields)
        assert int(r.topics[0].partitions[0].error_code) == GROUP_AUTH
        # OffsetFetch: the group's offsets of topics the principal may describe
        group = nested(9, 8, "OffsetFetchRequestGroup", group_id="app", topics=None)
        r = await b.call(9, 8, connection=alice, groups=(group,), require_stable=False)
        assert [t.name for t in r.groups[0].topics] == ["events"]
        r = await b.call(9, 8, connection=mallory, groups=(group,), require_stable=False)
        assert int(r.groups[0].error_code) == GROUP_AUTH
        # DescribeGroups, ListGroups, DeleteGroups
        r = await b.call(15, 5, connection=mallory, groups=("app",), include_authorized_operations=True)
        assert int(r.groups[0].error_code) == GROUP_AUTH
        r = await b.call(15, 5, connection=alice, groups=("app",), include_authorized_operations=True)
        assert int(r.groups[0].error_code) == 0
        assert r.groups[0].authorized_operations == operations_bits(Op.READ, Op.DESCRIBE)
        assert [g.group_id for g in (await b.call(16, 4, connection=alice, states_filter=())).groups] == ["app"]
        assert (await b.call(16, 4, connection=mallory, states_filter=())).groups == ()
        r = await b.call(42, 2, connection=alice, groups_names=("app",))
        assert int(r.results[0].error_code) == GROUP_AUTH  # READ does not allow DELETE

    asyncio.run(run(body)(tmp_path))


def test_producer_ids(tmp_path):
    async def body(b):
        alice, mallory = who(b, "User:alice"), who(b, "User:mallory")
        fields = dict(transaction_timeout=60000, producer_id=-1, producer_epoch=-1)
        r = await b.call(22, 4, connection=mallory, transactional_id=None, **fields)
        assert int(r.error_code) == CLUSTER_AUTH
        await grant(b, (Res.TOPIC, "any", Pat.LITERAL, "User:alice", Op.WRITE))  # KIP-679: WRITE on some topic
        r = await b.call(22, 4, connection=alice, transactional_id=None, **fields)
        assert int(r.error_code) == 0 and r.producer_id >= 0
        r = await b.call(22, 4, connection=alice, transactional_id="tx", **fields)
        assert int(r.error_code) == TXN_AUTH
        r = await b.call(
            26, 3, connection=alice, transactional_id="tx", producer_id=1, producer_epoch=0, committed=True
        )
        assert int(r.error_code) == TXN_AUTH

    asyncio.run(run(body)(tmp_path))
