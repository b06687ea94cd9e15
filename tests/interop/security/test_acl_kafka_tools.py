"""Kafka 4.4's own `kafka-acls` (org.apache.kafka.tools.AclCommand, through Kafka's admin
client) manages odradek's ACLs unchanged: --add (literal, prefixed, allow and deny), --list
(all, by resource), --remove; a real client (confluent-kafka) is then refused by them with
Kafka's error. The broker runs the authorizer with allow.everyone.if.no.acl.found=true and no
super user, so User:ANONYMOUS may manage ACLs while the cluster has none."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.apache_kafka import SHORT_JVM, tool_command, unavailable_reason

SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def kafka_acls(bootstrap: str, *args: str) -> str:
    cmd = tool_command("4", "org.apache.kafka.tools.AclCommand", "--bootstrap-server", bootstrap, *args, jvm=SHORT_JVM)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def bindings(listing: str) -> set[tuple[str, str, str]]:
    """(resource pattern line, principal, operation/permission) of `kafka-acls --list` output."""
    out = set()
    resource = ""
    for line in listing.splitlines():
        line = line.strip()
        if line.startswith("Current ACLs for resource"):
            resource = line.split("`", 2)[1]
        elif line.startswith("(principal="):
            fields = dict(part.split("=", 1) for part in line.strip("()").split(", "))
            out.add((resource, fields["principal"], f"{fields['operation']}/{fields['permissionType']}"))
    return out


def test_kafka_acls_adds_lists_and_removes_and_clients_are_refused(broker_factory):
    if unavailable_reason("4"):
        pytest.skip(unavailable_reason("4"))
    b = broker_factory(SETTINGS)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept: a collected handle fails its futures
    admin.create_topics([NewTopic("locked", 1, 1)])["locked"].result(30)
    kafka_acls(b.bootstrap, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")
    kafka_acls(
        b.bootstrap, "--add", "--allow-principal", "User:bob", "--operation", "Write",
        "--topic", "app-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    kafka_acls(b.bootstrap, "--add", "--deny-principal", "User:ANONYMOUS", "--operation", "Write", "--topic", "locked")
    everything = bindings(kafka_acls(b.bootstrap, "--list"))
    topic = "ResourcePattern(resourceType=TOPIC, name={}, patternType={})"
    assert everything == {
        (topic.format("orders", "LITERAL"), "User:alice", "READ/ALLOW"),
        (topic.format("app-", "PREFIXED"), "User:bob", "WRITE/ALLOW"),
        (topic.format("locked", "LITERAL"), "User:ANONYMOUS", "WRITE/DENY"),
    }
    assert bindings(kafka_acls(b.bootstrap, "--list", "--topic", "orders")) == {
        (topic.format("orders", "LITERAL"), "User:alice", "READ/ALLOW")
    }

    # the deny is enforced on a real client: Kafka's TOPIC_AUTHORIZATION_FAILED
    p = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 10000})
    errors = []
    p.produce("locked", b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    kafka_acls(
        b.bootstrap, "--remove", "--force", "--deny-principal", "User:ANONYMOUS",
        "--operation", "Write", "--topic", "locked",
    )  # fmt: skip
    kafka_acls(
        b.bootstrap,
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--topic",
        "orders",
    )
    assert bindings(kafka_acls(b.bootstrap, "--list")) == {
        (topic.format("app-", "PREFIXED"), "User:bob", "WRITE/ALLOW")
    }
    errors.clear()
    p = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 10000})  # no cached topic error
    p.produce("locked", b"y", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors == [None]
