"""The authorizer's decisions (broker/security/authorizer.py) against Kafka's StandardAuthorizer
semantics: patterns (literal, the `*` wildcard, prefixed), principals (`User:*`), hosts, deny over
allow, the operations an ALLOW implies (and a DENY does not), super users, and what happens to a
resource with no ACL at all; authorized-operations bits; authorizeByResourceType (KIP-679)."""

from __future__ import annotations

import pytest

from odradek.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    ResourcePattern,
    camel,
    creation_problem,
    from_camel,
    operations_bits,
)
from odradek.broker.security.acl import AclOperation as Op
from odradek.broker.security.acl import AclPermissionType as Perm
from odradek.broker.security.acl import PatternType as Pat
from odradek.broker.security.acl import ResourceType as Res
from odradek.broker.security.authorizer import Authorizer, host_of, parse_super_users

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(rt, name, pat, principal, op, perm=Perm.ALLOW, host="*") -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pat), AccessControlEntry(principal, host, op, perm))


def authorizer(*bindings: AclBinding, supers=(), allow_if_none=False) -> Authorizer:
    a = Authorizer(supers, allow_if_none)
    a.replace(bindings)
    return a


def may(a: Authorizer, op, name="orders", rt=Res.TOPIC, principal=ALICE, host=HOST) -> bool:
    return a.authorize(principal, host, op, rt, name)


def test_no_acls_denies_unless_allow_everyone_if_no_acl_found():
    assert not may(authorizer(), Op.READ)
    assert may(authorizer(allow_if_none=True), Op.READ)


def test_an_acl_of_someone_else_on_the_resource_denies_even_with_allow_everyone():
    a = authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, BOB, Op.READ), allow_if_none=True)
    assert not may(a, Op.READ)
    assert may(a, Op.READ, principal=BOB)
    assert may(a, Op.READ, name="other")  # no ACL on that topic at all


@pytest.mark.parametrize(
    ("name", "pat", "applies"),
    [
        ("orders", Pat.LITERAL, True),
        ("order", Pat.LITERAL, False),  # a literal is not a prefix
        ("*", Pat.LITERAL, True),  # the wildcard
        ("ord", Pat.PREFIXED, True),
        ("orders", Pat.PREFIXED, True),
        ("orders-", Pat.PREFIXED, False),
        ("x", Pat.PREFIXED, False),
        ("*", Pat.PREFIXED, False),  # a prefix "*" is the character, not a wildcard
    ],
)
def test_patterns(name, pat, applies):
    assert may(authorizer(acl(Res.TOPIC, name, pat, ALICE, Op.READ)), Op.READ) is applies


def test_the_resource_type_must_match():
    assert not may(authorizer(acl(Res.GROUP, "orders", Pat.LITERAL, ALICE, Op.READ)), Op.READ)


def test_principals_and_hosts():
    assert may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, "User:*", Op.READ)), Op.READ)
    assert not may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, "User:alicia", Op.READ)), Op.READ)
    assert may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.READ, host=HOST)), Op.READ)
    assert not may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.READ, host="10.0.0.2")), Op.READ)


@pytest.mark.parametrize(
    ("deny", "denied"),
    [
        (acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.READ, Perm.DENY), True),
        (acl(Res.TOPIC, "*", Pat.LITERAL, ALICE, Op.READ, Perm.DENY), True),
        (acl(Res.TOPIC, "or", Pat.PREFIXED, ALICE, Op.ALL, Perm.DENY), True),
        (acl(Res.TOPIC, "orders", Pat.LITERAL, "User:*", Op.READ, Perm.DENY), True),
        (acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.READ, Perm.DENY, host=HOST), True),
        (acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.READ, Perm.DENY, host="10.9.9.9"), False),
        (acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.WRITE, Perm.DENY), False),
        (acl(Res.TOPIC, "orders", Pat.LITERAL, BOB, Op.READ, Perm.DENY), False),
    ],
)
def test_deny_wins_over_allow(deny, denied):
    allow = acl(Res.TOPIC, "*", Pat.LITERAL, ALICE, Op.ALL)
    assert may(authorizer(allow, deny), Op.READ) is not denied


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_read_write_delete_alter_allow_describe(op):
    assert may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, op)), Op.DESCRIBE)


@pytest.mark.parametrize("op", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.CLUSTER_ACTION])
def test_other_operations_do_not_allow_describe(op):
    assert not may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, op)), Op.DESCRIBE)


def test_alter_configs_allows_describe_configs_and_implications_go_one_way():
    assert may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS)
    assert not may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.DESCRIBE)), Op.READ)
    assert not may(authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS)


def test_a_deny_of_read_does_not_deny_describe():
    a = authorizer(
        acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.WRITE),
        acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.READ, Perm.DENY),
    )
    assert may(a, Op.DESCRIBE) and may(a, Op.WRITE) and not may(a, Op.READ)


def test_all_allows_everything_and_a_deny_of_all_denies_everything():
    a = authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.ALL))
    assert all(may(a, op) for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DELETE))
    a = authorizer(
        acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.ALL),
        acl(Res.TOPIC, "o", Pat.PREFIXED, ALICE, Op.ALL, Perm.DENY),
    )
    assert not any(may(a, op) for op in (Op.READ, Op.DESCRIBE))


def test_super_users_may_do_anything_whatever_the_acls():
    deny = acl(Res.TOPIC, "*", Pat.LITERAL, "User:*", Op.ALL, Perm.DENY)
    a = authorizer(deny, supers=parse_super_users(" User:admin ; User:ops;"))
    assert a.super_users == {"User:admin", "User:ops"}
    assert may(a, Op.DELETE, principal="User:ops") and not may(a, Op.DELETE)


def test_authorized_operations_bits():
    a = authorizer(acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.WRITE))
    assert a.authorized_operations(ALICE, HOST, Res.TOPIC, "orders") == operations_bits(Op.WRITE, Op.DESCRIBE)
    assert authorizer(allow_if_none=True).authorized_operations(ALICE, HOST, Res.GROUP, "g") == operations_bits(
        Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS
    )


@pytest.mark.parametrize(
    ("bindings", "allowed"),
    [
        ((), False),
        ((acl(Res.TOPIC, "t1", Pat.LITERAL, ALICE, Op.WRITE),), True),
        ((acl(Res.TOPIC, "t1", Pat.LITERAL, ALICE, Op.READ),), False),
        ((acl(Res.TOPIC, "t1", Pat.LITERAL, BOB, Op.WRITE),), False),
        ((acl(Res.TOPIC, "*", Pat.LITERAL, ALICE, Op.ALL),), True),
        (
            (
                acl(Res.TOPIC, "t1", Pat.LITERAL, ALICE, Op.WRITE),
                acl(Res.TOPIC, "t1", Pat.LITERAL, ALICE, Op.WRITE, Perm.DENY),
            ),
            False,
        ),
        (
            (
                acl(Res.TOPIC, "app-1", Pat.LITERAL, ALICE, Op.WRITE),
                acl(Res.TOPIC, "app", Pat.PREFIXED, ALICE, Op.WRITE, Perm.DENY),
            ),
            False,
        ),
        (
            (
                acl(Res.TOPIC, "app", Pat.PREFIXED, ALICE, Op.WRITE),
                acl(Res.TOPIC, "app-1", Pat.PREFIXED, ALICE, Op.WRITE, Perm.DENY),
            ),
            True,
        ),
        (
            (
                acl(Res.TOPIC, "t1", Pat.LITERAL, ALICE, Op.WRITE),
                acl(Res.TOPIC, "*", Pat.LITERAL, ALICE, Op.WRITE, Perm.DENY),
            ),
            False,
        ),
    ],
)
def test_authorize_by_resource_type(bindings, allowed):
    assert authorizer(*bindings).authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC) is allowed


def test_filters():
    lit = acl(Res.TOPIC, "orders", Pat.LITERAL, ALICE, Op.READ)
    star = acl(Res.TOPIC, "*", Pat.LITERAL, BOB, Op.WRITE, Perm.DENY)
    pre = acl(Res.TOPIC, "ord", Pat.PREFIXED, ALICE, Op.READ)
    group = acl(Res.GROUP, "orders", Pat.LITERAL, ALICE, Op.READ)
    a = authorizer(lit, star, pre, group)
    assert a.acls(AclBindingFilter()) == sorted([lit, star, pre, group])
    assert a.acls(AclBindingFilter(Res.TOPIC, "orders", Pat.MATCH)) == sorted([lit, star, pre])
    assert a.acls(AclBindingFilter(Res.ANY, "orders", Pat.ANY)) == sorted([lit, group])
    assert a.acls(AclBindingFilter(Res.TOPIC, None, Pat.PREFIXED)) == [pre]
    assert a.acls(AclBindingFilter(principal=BOB)) == [star]
    assert a.acls(AclBindingFilter(permission=Perm.DENY, operation=Op.WRITE)) == [star]
    assert a.acls(AclBindingFilter(host="10.0.0.1")) == []
    assert AclBindingFilter(Res.UNKNOWN).unknown_element()


def test_creation_problems_and_names():
    assert creation_problem(acl(Res.TOPIC, "t", Pat.LITERAL, ALICE, Op.READ)) is None
    assert creation_problem(acl(Res.CLUSTER, "kafka-cluster", Pat.LITERAL, ALICE, Op.ALTER)) is None
    assert creation_problem(acl(Res.CLUSTER, "c", Pat.LITERAL, ALICE, Op.ALTER)) is not None
    assert creation_problem(acl(Res.TOPIC, "", Pat.LITERAL, ALICE, Op.READ)) is not None
    assert creation_problem(acl(Res.TOPIC, "t", Pat.MATCH, ALICE, Op.READ)) is not None
    assert creation_problem(acl(Res.TOPIC, "t", Pat.LITERAL, "alice", Op.READ)) is not None
    assert creation_problem(acl(Res.ANY, "t", Pat.LITERAL, ALICE, Op.READ)) is not None
    assert creation_problem(acl(Res.TOPIC, "t", Pat.LITERAL, ALICE, Op.READ, Perm.ANY)) is not None
    assert camel(Op.IDEMPOTENT_WRITE) == "IdempotentWrite" and from_camel(Op, "DescribeConfigs") == Op.DESCRIBE_CONFIGS
    assert host_of("127.0.0.1:5555") == "127.0.0.1" and host_of("[::1]:9092") == "::1"
