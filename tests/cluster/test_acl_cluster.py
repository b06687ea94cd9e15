"""ACLs on a 3-broker cluster with a real ZooKeeper: an ACL created through one broker is kept in
ZooKeeper in Kafka 3.9's AclAuthorizer layout, announced by a change notification, and enforced by
the other brokers within a second; a deletion through another broker likewise. The brokers run
the authorizer with allow.everyone.if.no.acl.found=true and no super user (their own requests to
each other are User:ANONYMOUS on PLAINTEXT, allowed while the cluster resource has no ACL)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from support.odradek_cluster import OdradekCluster
from support.proto import batch, produce
from support.raw import RawConnection, nested

pytestmark = pytest.mark.cluster

SETTINGS = {
    "offsets.topic.replication.factor": 1,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
ANY = {
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}


@pytest.fixture
def cluster(tmp_path):
    c = OdradekCluster(tmp_path, brokers=3, overrides=SETTINGS)
    try:
        c.start()
    except Exception:
        print(c.logs())
        c.stop()
        raise
    yield c
    c.stop()


def creation(rt: int, name: str, pattern: int, op: int, perm: int):
    return nested(
        30, 3, "AclCreation", resource_type=rt, resource_name=name, resource_pattern_type=pattern,
        principal="User:ANONYMOUS", host="*", operation=op, permission_type=perm,
    )  # fmt: skip


def until(what: str, condition, timeout: float) -> float:
    """Seconds until `condition()` holds (fails after `timeout`)."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout} s"
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.serial  # timed: every broker within a second (tests/README.md)
def test_an_acl_made_through_one_broker_is_enforced_by_every_broker_within_a_second(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("guarded", 3, 1)], operation_timeout=20)["guarded"].result(30)
    conns = {b: RawConnection(cluster.brokers[b].bootstrap) for b in (1, 2, 3)}
    try:

        def write_code(b: int) -> int:
            # authorization comes before leadership: every broker answers for every partition
            return int(produce(conns[b], "guarded", [batch((None, b"x"))], partition=0, acks=1).error_code)

        # every broker knows the topic (UNKNOWN_TOPIC_OR_PARTITION until its metadata has it)
        until("every broker knowing the topic", lambda: all(write_code(b) in (0, 6) for b in conns), 10)
        assert {b: write_code(b) for b in conns} in ({1: 0, 2: 6, 3: 6}, {1: 6, 2: 0, 3: 6}, {1: 6, 2: 6, 3: 0})
        r = conns[1].call(30, 3, creations=(creation(2, "guarded", 3, 4, 2), creation(3, "app-", 4, 3, 3)))
        assert [int(x.error_code) for x in r.results] == [0, 0]
        for b in (2, 3):
            took = until(f"broker {b} enforcing the deny", lambda b=b: write_code(b) == 29, 5)
            assert took < 1.0, f"broker {b} applied the ACL after {took:.2f} s"
        assert write_code(1) == 29

        zk = KazooClient(hosts=cluster.zookeeper_connect)
        zk.start(timeout=10)
        try:
            literal = json.loads(zk.get("/kafka-acl/Topic/guarded")[0])
            assert literal == {
                "version": 1,
                "acls": [{"principal": "User:ANONYMOUS", "permissionType": "Deny", "operation": "Write", "host": "*"}],
            }
            prefixed = json.loads(zk.get("/kafka-acl-extended/prefixed/Group/app-")[0])
            assert prefixed["acls"] == [
                {"principal": "User:ANONYMOUS", "permissionType": "Allow", "operation": "Read", "host": "*"}
            ]
            changes = [zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")]
            assert b"TOPIC:guarded" in changes
            extended = [
                json.loads(zk.get(f"/kafka-acl-extended-changes/{c}")[0])
                for c in zk.get_children("/kafka-acl-extended-changes")
            ]
            assert {"version": 1, "resourceType": "GROUP", "name": "app-", "patternType": "PREFIXED"} in extended
        finally:
            zk.stop()
            zk.close()

        # every broker describes the same ACLs; a deletion through broker 3 reaches broker 1
        for b in (1, 2, 3):
            assert len(conns[b].call(29, 3, **ANY).resources) == 2
        gone = conns[3].call(31, 3, filters=(nested(31, 3, "DeleteAclsFilter", **{**ANY, "resource_type_filter": 2}),))
        assert [m.resource_name for m in gone.filter_results[0].matching_acls] == ["guarded"]
        for b in (1, 2):
            took = until(f"broker {b} dropping the deny", lambda b=b: write_code(b) != 29, 5)
            assert took < 1.0, f"broker {b} dropped the ACL after {took:.2f} s"
    finally:
        for c in conns.values():
            c.close()
