"""Values the protocol gives a meaning to, used across APIs."""

from __future__ import annotations

import uuid

# A topic id of all zeros: "no id" (requests by name, responses of versions without ids).
ZERO_UUID = uuid.UUID(int=0)
# Integer.MIN_VALUE in an authorized-operations field: "not requested". (The operations' bits:
# broker/security/acl.py, operations_bits and SUPPORTED_OPERATIONS.)
UNKNOWN_OPERATIONS = -2147483648
