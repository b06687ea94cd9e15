"""The ACL APIs (k29 DescribeAcls, k30 CreateAcls, k31 DeleteAcls) on one broker in this process:
SECURITY_DISABLED without an authorizer; with one, ACLs created, described by filter, deleted,
kept across a restart (odradek-acls.json), and the ACL APIs themselves authorized on the cluster
(DESCRIBE for DescribeAcls, ALTER for the others)."""

from __future__ import annotations

import asyncio

from support.inprocess import InProcessBroker

from odradek.broker.connection_state import ConnectionState
from odradek.broker.security.acl import AclOperation as Op
from odradek.broker.security.acl import AclPermissionType as Perm
from odradek.broker.security.acl import PatternType as Pat
from odradek.broker.security.acl import ResourceType as Res
from odradek.protocol import messages

V = 3
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}


def admin(b: InProcessBroker) -> ConnectionState:
    c = b.connection()
    c.principal = "User:admin"
    return c


def creation(rt: Res, name: str, pat: Pat, principal: str, op: Op, perm: Perm = Perm.ALLOW, host: str = "*"):
    cls = messages.module_of(messages.request_class(30, V)).AclCreation
    return cls(
        resource_type=rt,
        resource_name=name,
        resource_pattern_type=pat,
        principal=principal,
        host=host,
        operation=op,
        permission_type=perm,
    )


def acl_filter(rt: Res = Res.ANY, name: str | None = None, pat: Pat = Pat.ANY, principal: str | None = None) -> dict:
    return {
        "resource_type_filter": rt,
        "resource_name_filter": name,
        "pattern_type_filter": pat,
        "principal_filter": principal,
        "host_filter": None,
        "operation": Op.ANY,
        "permission_type": Perm.ANY,
    }


async def describe(b: InProcessBroker, conn: ConnectionState, **f) -> list[tuple]:
    r = await b.call(29, V, connection=conn, **acl_filter(**f))
    assert int(r.error_code) == 0, r
    return sorted(
        (int(res.resource_type), res.resource_name, int(res.pattern_type), a.principal, int(a.operation))
        for res in r.resources
        for a in res.acls
    )


def test_without_an_authorizer_every_acl_api_answers_security_disabled(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path) as b:
            d = await b.call(29, V, **acl_filter())
            assert (int(d.error_code), d.error_message) == (54, "No Authorizer is configured on the broker")
            c = await b.call(30, V, creations=(creation(Res.TOPIC, "t", Pat.LITERAL, "User:a", Op.READ),))
            assert [(int(r.error_code), r.error_message) for r in c.results] == [(54, "No Authorizer is configured.")]
            filt = messages.module_of(messages.request_class(31, V)).DeleteAclsFilter(**acl_filter())
            x = await b.call(31, V, filters=(filt, filt))
            assert [(int(r.error_code), r.error_message, r.matching_acls) for r in x.filter_results] == [
                (54, "No Authorizer is configured.", ())
            ] * 2

    asyncio.run(main())


def test_create_describe_delete_and_restart(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path, AUTHORIZER) as b:
            a = admin(b)
            r = await b.call(
                30,
                V,
                connection=a,
                creations=(
                    creation(Res.TOPIC, "orders", Pat.LITERAL, "User:alice", Op.READ),
                    creation(Res.TOPIC, "ord", Pat.PREFIXED, "User:bob", Op.WRITE),
                    creation(Res.GROUP, "*", Pat.LITERAL, "User:alice", Op.ALL, Perm.DENY),
                    creation(Res.CLUSTER, "not-the-cluster", Pat.LITERAL, "User:alice", Op.ALTER),
                    creation(Res.TOPIC, "", Pat.LITERAL, "User:alice", Op.READ),
                    creation(Res.TOPIC, "x", Pat.LITERAL, "alice", Op.READ),
                    creation(Res.TOPIC, "x", Pat.MATCH, "User:alice", Op.READ),
                    creation(Res.TOPIC, "x", Pat.LITERAL, "User:alice", Op.ANY),
                ),
            )
            assert [int(x.error_code) for x in r.results] == [0, 0, 0, 42, 42, 42, 42, 42]
            everything = [
                (2, "ord", 4, "User:bob", 4),
                (2, "orders", 3, "User:alice", 3),
                (3, "*", 3, "User:alice", 2),
            ]
            assert await describe(b, a) == sorted(everything)
            # MATCH: every pattern that applies to the topic "orders"
            assert await describe(b, a, rt=Res.TOPIC, name="orders", pat=Pat.MATCH) == [
                (2, "ord", 4, "User:bob", 4),
                (2, "orders", 3, "User:alice", 3),
            ]
            assert await describe(b, a, principal="User:alice") == [
                (2, "orders", 3, "User:alice", 3),
                (3, "*", 3, "User:alice", 2),
            ]
            # the ACL APIs need DESCRIBE / ALTER on the cluster: anonymous has neither
            anon = b.connection()
            d = await b.call(29, V, connection=anon, **acl_filter())
            assert int(d.error_code) == 31 and d.resources == ()
            one = creation(Res.TOPIC, "t", Pat.LITERAL, "User:x", Op.READ)
            c = await b.call(30, V, connection=anon, creations=(one,))
            assert [int(x.error_code) for x in c.results] == [31]
            delete_filter = messages.module_of(messages.request_class(31, V)).DeleteAclsFilter
            x = await b.call(31, V, connection=anon, filters=(delete_filter(**acl_filter()),))
            assert [int(f.error_code) for f in x.filter_results] == [31]
            assert len(await describe(b, a)) == 3
            prefixed_topics = delete_filter(**acl_filter(rt=Res.TOPIC, pat=Pat.PREFIXED))
            x = await b.call(31, V, connection=a, filters=(prefixed_topics,))
            assert [(int(f.error_code), [m.resource_name for m in f.matching_acls]) for f in x.filter_results] == [
                (0, ["ord"])
            ]
        async with InProcessBroker(tmp_path, AUTHORIZER) as b:
            assert await describe(b, admin(b)) == [(2, "orders", 3, "User:alice", 3), (3, "*", 3, "User:alice", 2)]

    asyncio.run(main())
