"""Differential: the ACL APIs (DescribeAcls 29, CreateAcls 30, DeleteAcls 31) without an
authorizer, odradek against Apache Kafka 4.x: every version Kafka 4 serves answers
SECURITY_DISABLED (54), with Kafka's messages (which the harness leaves out of the field
comparison, so they are compared here by name), an empty resource list and no matching ACLs."""

from __future__ import annotations

import pytest
from support.raw import nested

pytestmark = pytest.mark.reference

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31

FILTER = {
    "resource_type_filter": 1,  # ANY
    "resource_name_filter": None,
    "pattern_type_filter": 1,  # ANY
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,  # ANY
    "permission_type": 1,  # ANY
}


def _creation(version: int):
    return nested(
        CREATE_ACLS,
        version,
        "AclCreation",
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:ANONYMOUS",
        host="*",
        operation=3,
        permission_type=3,
    )


@pytest.mark.parametrize("version", [1, 2, 3])
def test_acl_apis_without_an_authorizer_answer_security_disabled(pair, version):
    def scenario(t):
        with t.raw() as c:
            describe = c.call(DESCRIBE_ACLS, version, **FILTER)
            create = c.call(CREATE_ACLS, version, creations=(_creation(version), _creation(version)))
            delete = c.call(DELETE_ACLS, version, filters=(nested(DELETE_ACLS, version, "DeleteAclsFilter", **FILTER),))
        messages = {
            "describe": describe.error_message,
            "create": [r.error_message for r in create.results],
            "delete": [r.error_message for r in delete.filter_results],
        }
        return {"describe": describe, "create": create, "delete": delete, "messages": messages}

    kafka, odradek = pair.run(scenario)
    assert (
        kafka["messages"]
        == odradek["messages"]
        == {
            "describe": "No Authorizer is configured on the broker",
            "create": ["No Authorizer is configured."] * 2,
            "delete": ["No Authorizer is configured."],
        }
    )
    got = pair.compare(kafka, odradek)
    assert got["describe"]["error_code"] == 54 and got["describe"]["resources"] == []
    assert [r["error_code"] for r in got["create"]["results"]] == [54, 54]
    assert [(r["error_code"], r["matching_acls"]) for r in got["delete"]["filter_results"]] == [(54, [])]
