"""odradek's admin client's ACL and SCRAM calls against a broker in this process, over a
SASL_PLAINTEXT listener as a super user: users added (salted client-side), described, able to
authenticate, deleted and then refused; ACLs created, described by Kafka's filters (literal,
prefixed, MATCH), deleted; the ACL calls without an authorizer raise SECURITY_DISABLED; the
blocking Admin has the same calls."""

from __future__ import annotations

import asyncio

import pytest
from support.inprocess import InProcessBroker
from support.secure_clients import scram_user

from odradek.client import Admin
from odradek.client import errors as E
from odradek.client.aio import (
    AclBinding,
    AclBindingFilter,
    AIOAdmin,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from odradek.protocol.acl import AclOperation as Op
from odradek.protocol.acl import AclPermissionType as Perm
from odradek.protocol.acl import PatternType as Pat
from odradek.protocol.acl import ResourceType as Res

SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}


def _conf(b: InProcessBroker, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{b.broker.bound[1][1]}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "default.api.timeout.ms": 5000,
    }


def test_scram_users_added_described_used_and_deleted(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            await scram_user(b, "admin", "admin-pw", "SCRAM-SHA-512")
            async with AIOAdmin(_conf(b, "admin", "admin-pw")) as admin:
                await admin.alter_user_scram_credentials(
                    [
                        UserScramCredentialUpsertion("alice", "SCRAM-SHA-512", "alice-pw", iterations=8192),
                        UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "alice-pw-256"),
                        UserScramCredentialUpsertion("bob", "SCRAM-SHA-256", "bob-pw"),
                    ]
                )
                got = await admin.describe_user_scram_credentials(["alice"])
                assert {u: sorted(c, key=lambda i: i.mechanism) for u, c in got.items()} == {
                    "alice": [ScramCredentialInfo("SCRAM-SHA-256", 4096), ScramCredentialInfo("SCRAM-SHA-512", 8192)]
                }
                every = await admin.describe_user_scram_credentials()
                assert set(every) == {"admin", "alice", "bob"}
                with pytest.raises(E.ResourceNotFoundError):
                    await admin.describe_user_scram_credentials(["nobody"])
                with pytest.raises(E.UnacceptableCredentialError):
                    await admin.alter_user_scram_credentials(
                        [UserScramCredentialUpsertion("carol", "SCRAM-SHA-256", "pw", iterations=100)]
                    )

                # the salted credential works: alice authenticates with each mechanism's password
                async with AIOAdmin(_conf(b, "alice", "alice-pw")) as alice:
                    await alice.list_topics()
                async with AIOAdmin(_conf(b, "alice", "alice-pw-256", "SCRAM-SHA-256")) as alice:
                    await alice.list_topics()

                await admin.alter_user_scram_credentials([UserScramCredentialDeletion("alice", "SCRAM-SHA-512")])
                got = await admin.describe_user_scram_credentials(["alice"])
                assert got == {"alice": [ScramCredentialInfo("SCRAM-SHA-256", 4096)]}
            with pytest.raises(E.SaslAuthenticationFailedError):
                async with AIOAdmin(_conf(b, "alice", "alice-pw")):
                    pass

    asyncio.run(main())


def test_acls_created_described_by_filter_and_deleted(tmp_path):
    read_t = AclBinding.of("topic", "orders", "User:alice", "read")
    write_prefixed = AclBinding.of(Res.TOPIC, "ord", "User:alice", Op.WRITE, pattern_type="prefixed")
    deny_group = AclBinding.of("group", "g1", "User:bob", "Read", "deny", host="10.0.0.1")
    cluster = AclBinding.of("cluster", "kafka-cluster", "User:bob", "IDEMPOTENT_WRITE")

    async def main():
        async with InProcessBroker(tmp_path / "data", SETTINGS) as b:
            await scram_user(b, "admin", "admin-pw", "SCRAM-SHA-512")
            async with AIOAdmin(_conf(b, "admin", "admin-pw")) as admin:
                assert await admin.describe_acls() == []
                await admin.create_acls([read_t, write_prefixed, deny_group, cluster])
                assert set(await admin.describe_acls()) == {read_t, write_prefixed, deny_group, cluster}
                assert await admin.describe_acls(AclBindingFilter(Res.GROUP)) == [deny_group]
                assert set(await admin.describe_acls(AclBindingFilter(principal="User:alice"))) == {
                    read_t,
                    write_prefixed,
                }
                # MATCH: every pattern that applies to topic "orders" (the literal and the prefix)
                matching = await admin.describe_acls(AclBindingFilter("topic", "orders", "match"))
                assert set(matching) == {read_t, write_prefixed}
                assert await admin.describe_acls(AclBindingFilter("topic", "orders", "literal")) == [read_t]
                assert await admin.describe_acls(AclBindingFilter(permission=Perm.DENY)) == [deny_group]

                with pytest.raises(E.InvalidRequestError):
                    await admin.create_acls([AclBinding.of("cluster", "not-the-cluster", "User:x", "alter")])

                deleted = await admin.delete_acls(
                    [AclBindingFilter("topic", "ord", Pat.PREFIXED), AclBindingFilter(operation="idempotent-write")]
                )
                assert set(deleted) == {write_prefixed, cluster}
                assert set(await admin.describe_acls()) == {read_t, deny_group}

            # a principal that is no super user and has no ALTER on the cluster is refused
            await scram_user(b, "eve", "eve-pw", "SCRAM-SHA-512")
            async with AIOAdmin(_conf(b, "eve", "eve-pw")) as eve:
                with pytest.raises(E.ClusterAuthorizationFailedError):
                    await eve.create_acls([read_t])
                with pytest.raises(E.ClusterAuthorizationFailedError):
                    await eve.describe_acls()

            # the blocking Admin forwards the same calls (from a thread: the broker runs on this loop)
            def blocking() -> list:
                with Admin(_conf(b, "admin", "admin-pw")) as admin:
                    admin.delete_acls([AclBindingFilter()])
                    return admin.describe_acls()

            assert await asyncio.to_thread(blocking) == []

    asyncio.run(main())


def test_acl_calls_without_an_authorizer_raise_security_disabled(tmp_path):
    async def main():
        async with InProcessBroker(tmp_path / "data") as b:
            conf = {"bootstrap.servers": f"127.0.0.1:{b.broker.bound[0][1]}", "default.api.timeout.ms": 5000}
            async with AIOAdmin(conf) as admin:
                with pytest.raises(E.SecurityDisabledError):
                    await admin.describe_acls()
                with pytest.raises(E.SecurityDisabledError):
                    await admin.create_acls([AclBinding.of("topic", "t", "User:a", "read")])
                with pytest.raises(E.SecurityDisabledError):
                    await admin.delete_acls([AclBindingFilter()])

    asyncio.run(main())
