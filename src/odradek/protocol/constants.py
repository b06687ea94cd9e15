"""Values the protocol gives a meaning to, used across APIs."""

from __future__ import annotations

import uuid

# A topic id of all zeros: "no id" (requests by name, responses of versions without ids).
ZERO_UUID = uuid.UUID(int=0)
# Integer.MIN_VALUE in an authorized-operations field: "not requested".
UNKNOWN_OPERATIONS = -2147483648

# Kafka's AclOperation codes, as bits of an authorized-operations field: what each resource type
# supports (AclEntry.supportedOperations). Without an authorizer Kafka reports every supported
# operation as authorized, and so does odradek (no ACLs yet).
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


def operations(*codes: int) -> int:
    return sum(1 << c for c in set(codes))


TOPIC_OPERATIONS = operations(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = operations(
    CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
)
GROUP_OPERATIONS = operations(READ, DELETE, DESCRIBE)
