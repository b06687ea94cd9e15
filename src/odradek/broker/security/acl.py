"""ACLs as Kafka defines them: resource patterns, entries, bindings and the filters that
DescribeAcls and DeleteAcls match them with (Kafka's `AclBinding`, `AclBindingFilter`).

Codes are the wire codes of Kafka's `ResourceType`, `PatternType`, `AclOperation` and
`AclPermissionType`; names are the ones Kafka writes in ZooKeeper (`/kafka-acl/Topic/...`,
`"operation":"Read"`) and prints in its tools. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# the codes live in protocol, shared with the client and the CLI (re-exported here)
from odradek.protocol.acl import AclOperation as AclOperation
from odradek.protocol.acl import AclPermissionType as AclPermissionType
from odradek.protocol.acl import PatternType as PatternType
from odradek.protocol.acl import ResourceType as ResourceType
from odradek.protocol.acl import camel as camel
from odradek.protocol.acl import from_camel as from_camel

WILDCARD = "*"  # a literal resource name matching every name; a host matching every host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
# TOPIC_AUTHORIZATION_FAILED's message where Kafka 4's controller answers it (AlterConfigs and
# IncrementalAlterConfigs of a topic, DeleteTopics: ApiError's default, Errors.message())
TOPIC_AUTHORIZATION_FAILED_MESSAGE = "Topic authorization failed."


# The names Kafka's AclAuthorizer writes in ZooKeeper: resource types in paths
# (`/kafka-acl/TransactionalId/...`), operations and permissions in the JSON ("IdempotentWrite").
ZK_RESOURCE_NAMES: dict[ResourceType, str] = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}


# What each resource type supports (Kafka's AclEntry.supportedOperations): the bits of the
# authorized-operations fields of Metadata, DescribeGroups and DescribeCluster.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    # (group configs, KIP-848: DESCRIBE_CONFIGS and ALTER_CONFIGS, as Kafka 4's AclEntry)
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (
        AclOperation.CREATE_TOKENS,
        AclOperation.DESCRIBE_TOKENS,
    ),
}


def operations_bits(*ops: AclOperation) -> int:
    """An authorized-operations field of these operations (bit 1 << code each)."""
    return sum(1 << op for op in set(ops))


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType  # LITERAL or PREFIXED


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str  # "Type:name", e.g. "User:alice"; "User:*" is every principal
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: None for a name, principal or host matches any;
    ANY for a type, operation or permission matches any; pattern type MATCH selects every
    pattern that would apply to the resource named (literal, the wildcard, prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def unknown_element(self) -> bool:
        return PatternType.UNKNOWN in (self.pattern_type,) or (
            self.resource_type == ResourceType.UNKNOWN
            or self.operation == AclOperation.UNKNOWN
            or self.permission == AclPermissionType.UNKNOWN
        )

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, p.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if p.pattern_type == PatternType.LITERAL:
                return p.name in (self.name, WILDCARD)
            return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)
        if self.pattern_type not in (PatternType.ANY, p.pattern_type):
            return False
        return self.name is None or self.name == p.name

    def matches_entry(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and self.operation in (AclOperation.ANY, e.operation)
            and self.permission in (AclPermissionType.ANY, e.permission)
        )

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


def creation_problem(b: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (INVALID_REQUEST), or None."""
    p, e = b.pattern, b.entry
    if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return f"Invalid resource type {p.resource_type.name}"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {p.pattern_type.name}"
    if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"Invalid operation {e.operation.name}"
    if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permission type {e.permission.name}"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is " + CLUSTER_NAME
    if not p.name:
        return "Invalid empty resource name"
    if ":" not in e.principal:
        return (
            f"Could not parse principal from `{e.principal}` "
            "(no colon is present separating the principal type from the principal name)"
        )
    return None
