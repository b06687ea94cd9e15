"""The wire codes of Kafka's ACL enums (`ResourceType`, `PatternType`, `AclOperation`,
`AclPermissionType`) and their camel-case names (`IdempotentWrite`), shared by the broker's
authorizer (broker/security/acl.py), the client's ACL admin calls and the CLI. Pure."""

from __future__ import annotations

from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def camel(member: IntEnum) -> str:
    """Kafka's ZooKeeper spelling of an operation or permission: IDEMPOTENT_WRITE -> IdempotentWrite."""
    return "".join(part.capitalize() for part in member.name.split("_"))


def from_camel(enum: type[IntEnum], text: str) -> IntEnum:
    """The member named `text` in any of Kafka's spellings (IdempotentWrite, IDEMPOTENT_WRITE,
    idempotent-write): ValueError for an unknown one."""
    key = text.replace("_", "").replace("-", "").lower()
    for member in enum:
        if camel(member).lower() == key:
            return member
    raise ValueError(f"unknown {enum.__name__} {text!r}")
