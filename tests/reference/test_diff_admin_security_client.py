"""Differential: odradek's admin client's ACL and SCRAM calls (client/aio/admin_security.py) against
Apache Kafka 4.4 and odradek, both with the StandardAuthorizer (allow.everyone.if.no.acl.found,
as test_diff_acl_matrix.py, so the PLAINTEXT principal may manage ACLs): the same ACLs created,
found by the same filters (literal, prefixed, MATCH, ANY, by principal, by permission), deleted
alike; the same SCRAM users (salted by the client) described, refused and deleted alike."""

from __future__ import annotations

import asyncio

import pytest
from support import apache_kafka
from support.broker import BrokerProcess
from support.diff import Pair, Target, unique

from odradek.client import errors as E
from odradek.client.aio import (
    AclBinding,
    AclBindingFilter,
    AIOAdmin,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

pytestmark = pytest.mark.reference

SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    reason = apache_kafka.unavailable_reason("4")
    if reason:
        pytest.skip(reason)
    kafka = apache_kafka.ApacheKafka(tmp_path_factory.mktemp("kafka-admin-sec"), line="4", overrides=SETTINGS).start()
    try:
        odradek = BrokerProcess(tmp_path_factory.mktemp("odradek-admin-sec"), SETTINGS).start(timeout=30)
    except Exception:
        kafka.stop()
        raise
    yield Pair(Target("kafka", kafka.bootstrap, kafka.version), Target("odradek", odradek.bootstrap, "odradek"))
    odradek.stop()
    kafka.stop()


def _error(coro) -> str:
    async def go():
        try:
            await coro
            return "ok"
        except E.KafkaError as e:
            return type(e).__name__

    return go()


def test_acl_calls_answer_alike(pair):
    u = unique("acl")
    bindings = [
        AclBinding.of("topic", f"{u}-orders", "User:alice", "read"),
        AclBinding.of("topic", f"{u}-ord", "User:alice", "write", pattern_type="prefixed"),
        AclBinding.of("topic", f"{u}-ord", "User:bob", "write", "deny", pattern_type="prefixed", host="10.0.0.1"),
        AclBinding.of("group", f"{u}-g", "User:alice", "read"),
        AclBinding.of("transactional_id", f"{u}-tx", "User:alice", "describe"),
    ]
    mine = lambda bs: sorted((b for b in bs if b.name.startswith(u)), key=repr)  # noqa: E731

    def scenario(t: Target) -> dict:
        async def main() -> dict:
            async with AIOAdmin(bootstrap_servers=t.bootstrap) as a:
                await a.create_acls(bindings)
                await a.create_acls(bindings[:1])  # again: succeeds, no duplicate
                out = {
                    "all": mine(await a.describe_acls()),
                    "match": mine(await a.describe_acls(AclBindingFilter("topic", f"{u}-orders", "match"))),
                    "literal": mine(await a.describe_acls(AclBindingFilter("topic", f"{u}-orders", "literal"))),
                    "any_pattern": mine(await a.describe_acls(AclBindingFilter("topic", f"{u}-ord", "any"))),
                    "deny": mine(await a.describe_acls(AclBindingFilter(permission="deny"))),
                    "bob": mine(await a.describe_acls(AclBindingFilter(principal="User:bob"))),
                    "bad_cluster_name": await _error(
                        a.create_acls([AclBinding.of("cluster", "not-kafka-cluster", "User:x", "alter")])
                    ),
                    "bad_principal": await _error(a.create_acls([AclBinding.of("topic", u, "alice", "read")])),
                }
                out["deleted"] = mine(
                    await a.delete_acls(
                        [AclBindingFilter("topic", f"{u}-orders", "match"), AclBindingFilter("group", f"{u}-g")]
                    )
                )
                out["left"] = mine(await a.describe_acls())
                out["deleted_rest"] = mine(await a.delete_acls([AclBindingFilter(name=n) for n in (f"{u}-tx",)]))
                return out

        return asyncio.run(main())

    kafka, odradek = pair.run(scenario)
    assert kafka == odradek
    assert len(kafka["all"]) == 5 and len(kafka["match"]) == 3 and kafka["bad_cluster_name"] == "InvalidRequestError"


def test_scram_calls_answer_alike(pair):
    alice, bob = unique("alice"), unique("bob")

    def scenario(t: Target) -> dict:
        async def main() -> dict:
            async with AIOAdmin(bootstrap_servers=t.bootstrap) as a:
                # one change per user and request: Kafka 4's KRaft controller refuses a user named
                # twice in one request (odradek, as Kafka 3.9's ZooKeeper mode, only the same mechanism twice)
                await a.alter_user_scram_credentials(
                    [
                        UserScramCredentialUpsertion(alice, "SCRAM-SHA-256", "pw-256"),
                        UserScramCredentialUpsertion(bob, "SCRAM-SHA-512", "pw"),
                    ]
                )
                await a.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion(alice, "SCRAM-SHA-512", "pw-512", iterations=8192)]
                )
                described = await a.describe_user_scram_credentials([alice, bob])
                every = await a.describe_user_scram_credentials()
                out = {
                    "described": {u.split("-")[0]: sorted(c, key=repr) for u, c in described.items()},
                    "every_has_both": {alice, bob} <= set(every),
                    "unknown": await _error(a.describe_user_scram_credentials([unique("nobody")])),
                    "few_iterations": await _error(
                        a.alter_user_scram_credentials(
                            [UserScramCredentialUpsertion(unique("c"), "SCRAM-SHA-256", "pw", iterations=100)]
                        )
                    ),
                    "many_iterations": await _error(
                        a.alter_user_scram_credentials(
                            [UserScramCredentialUpsertion(unique("c"), "SCRAM-SHA-256", "pw", iterations=20000)]
                        )
                    ),
                    "same_mechanism_twice": await _error(
                        a.alter_user_scram_credentials(
                            [
                                UserScramCredentialUpsertion(bob, "SCRAM-SHA-512", "pw"),
                                UserScramCredentialDeletion(bob, "SCRAM-SHA-512"),
                            ]
                        )
                    ),
                    "delete_absent": await _error(
                        a.alter_user_scram_credentials([UserScramCredentialDeletion(bob, "SCRAM-SHA-256")])
                    ),
                }
                await a.alter_user_scram_credentials(
                    [
                        UserScramCredentialDeletion(alice, "SCRAM-SHA-512"),
                        UserScramCredentialDeletion(bob, "SCRAM-SHA-512"),
                    ]
                )
                after = await a.describe_user_scram_credentials([alice])
                out["after"] = {u.split("-")[0]: c for u, c in after.items()}
                out["bob_gone"] = await _error(a.describe_user_scram_credentials([bob]))
                return out

        return asyncio.run(main())

    kafka, odradek = pair.run(scenario)
    assert kafka == odradek
    assert kafka["unknown"] == "ResourceNotFoundError" and kafka["few_iterations"] == "UnacceptableCredentialError"
