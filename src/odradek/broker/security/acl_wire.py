"""ACL requests' entities (kio) to the domain's bindings and filters (broker/security/acl.py).

A code that is no member of Kafka's enums gives None (the handler answers INVALID_REQUEST).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)


def binding_filter(f: Any) -> AclBindingFilter | None:
    """A DescribeAcls request or a DeleteAcls filter: its filter."""
    try:
        return AclBindingFilter(
            resource_type=ResourceType(int(f.resource_type_filter)),
            name=f.resource_name_filter,
            pattern_type=PatternType(int(f.pattern_type_filter)),
            principal=f.principal_filter,
            host=f.host_filter,
            operation=AclOperation(int(f.operation)),
            permission=AclPermissionType(int(f.permission_type)),
        )
    except ValueError:
        return None


def binding_of_creation(c: Any) -> AclBinding | None:
    """A CreateAcls creation: its binding."""
    try:
        pattern_type = PatternType(int(c.resource_pattern_type))
        return AclBinding(
            ResourcePattern(ResourceType(int(c.resource_type)), c.resource_name, pattern_type),
            AccessControlEntry(
                c.principal, c.host, AclOperation(int(c.operation)), AclPermissionType(int(c.permission_type))
            ),
        )
    except ValueError:
        return None
