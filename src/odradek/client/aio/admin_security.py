"""The admin client's ACL and SCRAM calls (Java's Admin.createAcls, describeAcls, deleteAcls,
describeUserScramCredentials, alterUserScramCredentials: the calls behind kafka-acls.sh and
kafka-configs.sh --entity-type users).

* `create_acls`, `describe_acls`, `delete_acls` take Kafka's `AclBinding` and
  `AclBindingFilter` (here flat: pattern and entry in one dataclass); enum fields take the
  codes of protocol/acl.py or their names ("READ", "Read", "prefixed"). They go to the
  least loaded broker, as the Java client sends them.
* `alter_user_scram_credentials` salts the password here, as Java's AdminClient does: the
  broker receives the salt, the iterations and Hi(password, salt, iterations), never the
  password. It goes to the controller; `describe_user_scram_credentials` to any broker.

Errors raise the `odradek.client.errors` class of the first error the broker reports
(SecurityDisabledError without an authorizer, ClusterAuthorizationFailedError, ...).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from odradek.protocol.acl import AclOperation, AclPermissionType, PatternType, ResourceType, from_camel
from odradek.protocol.scram import MIN_ITERATIONS, salted_password

from .. import errors as E
from ..cluster import Cluster

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
# Kafka's ScramMechanism codes on the wire
SCRAM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_NAMES = {v: k for k, v in SCRAM_CODES.items()}
SALT_BYTES = 32

_E = TypeVar("_E", bound=IntEnum)


def _enum(enum: type[_E], value: Any) -> _E:
    if isinstance(value, str):
        return enum(from_camel(enum, value))
    return enum(int(value))


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern and an entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str  # "User:alice"; "User:*" every principal
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(
        cls,
        resource_type: Any,
        name: str,
        principal: str,
        operation: Any,
        permission: Any = AclPermissionType.ALLOW,
        *,
        pattern_type: Any = PatternType.LITERAL,
        host: str = "*",
    ) -> AclBinding:
        """Names or codes for the enum fields."""
        return cls(
            _enum(ResourceType, resource_type),
            name,
            _enum(PatternType, pattern_type),
            principal,
            host,
            _enum(AclOperation, operation),
            _enum(AclPermissionType, permission),
        )


@dataclass(frozen=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls and DeleteAcls select (Kafka's AclBindingFilter): None matches
    any name, principal or host; ANY any type, operation or permission; pattern type MATCH
    every pattern that applies to the resource named (literal, wildcard, prefixes)."""

    resource_type: Any = ResourceType.ANY
    name: str | None = None
    pattern_type: Any = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Any = AclOperation.ANY
    permission: Any = AclPermissionType.ANY

    def wire(self) -> dict[str, Any]:
        return {
            "resource_type_filter": _enum(ResourceType, self.resource_type),
            "resource_name_filter": self.name,
            "pattern_type_filter": _enum(PatternType, self.pattern_type),
            "principal_filter": self.principal,
            "host_filter": self.host,
            "operation": _enum(AclOperation, self.operation),
            "permission_type": _enum(AclPermissionType, self.permission),
        }


ANY_ACL = AclBindingFilter()


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Add or replace `user`'s credential for `mechanism`; the salt is random unless given."""

    user: str
    mechanism: str
    password: str
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = None


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: str


def _binding(resource: Any, acl: Any) -> AclBinding:
    return AclBinding(
        ResourceType(int(resource.resource_type)),
        resource.resource_name,
        PatternType(int(getattr(resource, "pattern_type", PatternType.LITERAL))),
        acl.principal,
        acl.host,
        AclOperation(int(acl.operation)),
        AclPermissionType(int(acl.permission_type)),
    )


def _mechanism_code(mechanism: str) -> int:
    code = SCRAM_CODES.get(mechanism.upper())
    if code is None:
        raise ValueError(f"SCRAM mechanism {mechanism!r}: one of {', '.join(SCRAM_CODES)}")
    return code


class SecurityAdmin:
    """Mixed into AIOAdmin."""

    cluster: Cluster

    async def _any_broker(self, api_key: int, data: dict, what: str) -> Any:
        async def attempt():
            conn = await self.cluster.any_connection()
            return await conn.request(api_key, data)

        return await self.cluster.retrying(attempt, what=what)

    # ------------------------------------------------------------------ ACLs
    async def create_acls(self, bindings: list[AclBinding]) -> None:
        creations = [
            {
                "resource_type": b.resource_type,
                "resource_name": b.name,
                "resource_pattern_type": b.pattern_type,
                "principal": b.principal,
                "host": b.host,
                "operation": b.operation,
                "permission_type": b.permission,
            }
            for b in bindings
        ]
        resp = await self._any_broker(CREATE_ACLS, {"creations": creations}, "CreateAcls")
        for b, r in zip(bindings, resp.results):
            if int(r.error_code):
                raise E.error_class(int(r.error_code))(r.error_message or f"create ACL {b}")

    async def describe_acls(self, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        resp = await self._any_broker(DESCRIBE_ACLS, acl_filter.wire(), "DescribeAcls")
        if int(resp.error_code):
            raise E.error_class(int(resp.error_code))(resp.error_message or "DescribeAcls")
        return [_binding(res, a) for res in resp.resources for a in res.acls]

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclBinding]:
        """Delete every ACL each filter matches; the ACLs deleted."""
        resp = await self._any_broker(DELETE_ACLS, {"filters": [f.wire() for f in filters]}, "DeleteAcls")
        out: list[AclBinding] = []
        for r in resp.filter_results:
            if int(r.error_code):
                raise E.error_class(int(r.error_code))(r.error_message or "DeleteAcls")
            for m in r.matching_acls:
                if int(m.error_code):
                    raise E.error_class(int(m.error_code))(m.error_message or "DeleteAcls")
                out.append(_binding(m, m))
        return out

    # ------------------------------------------------------------------ SCRAM users
    async def describe_user_scram_credentials(
        self, users: list[str] | None = None
    ) -> dict[str, list[ScramCredentialInfo]]:
        """{user: its credentials' mechanism and iterations}, for `users` or every user."""
        data = {"users": None if users is None else [{"name": u} for u in users]}
        resp = await self._any_broker(DESCRIBE_USER_SCRAM_CREDENTIALS, data, "DescribeUserScramCredentials")
        if int(resp.error_code):
            raise E.error_class(int(resp.error_code))(resp.error_message or "DescribeUserScramCredentials")
        out: dict[str, list[ScramCredentialInfo]] = {}
        for r in resp.results:
            if int(r.error_code):
                raise E.error_class(int(r.error_code))(r.error_message or f"describe SCRAM user {r.user}")
            out[r.user] = [
                ScramCredentialInfo(SCRAM_NAMES.get(int(c.mechanism), str(c.mechanism)), int(c.iterations))
                for c in r.credential_infos
            ]
        return out

    async def alter_user_scram_credentials(
        self, alterations: list[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> None:
        upsertions, deletions = [], []
        for a in alterations:
            code = _mechanism_code(a.mechanism)
            if isinstance(a, UserScramCredentialDeletion):
                deletions.append({"name": a.user, "mechanism": code})
                continue
            salt = a.salt if a.salt is not None else secrets.token_bytes(SALT_BYTES)
            upsertions.append(
                {
                    "name": a.user,
                    "mechanism": code,
                    "iterations": a.iterations,
                    "salt": salt,
                    "salted_password": salted_password(SCRAM_NAMES[code], a.password, salt, a.iterations),
                }
            )

        async def attempt():
            md = self.cluster.metadata
            node = md.controller_id if md.controller_id in md.brokers else next(iter(md.brokers))
            return await self.cluster.send(
                node, ALTER_USER_SCRAM_CREDENTIALS, {"upsertions": upsertions, "deletions": deletions}
            )

        resp = await self.cluster.retrying(attempt, what="AlterUserScramCredentials")
        for r in resp.results:
            if int(r.error_code):
                raise E.error_class(int(r.error_code))(r.error_message or f"alter SCRAM user {r.user}")
