"""The authorizer: Kafka's StandardAuthorizer semantics over a set of ACL bindings. Pure: the
bindings are given (`replace`) by whoever keeps them (broker/security/acl_store.py).

A request (principal, client host, operation, resource) is decided as Kafka decides it:

* a super user (`super.users`, `User:a;User:b`) may do anything;
* the ACLs that apply to the resource are its literal ACLs, the literal `*` ACLs of its type
  and the prefixed ACLs whose prefix starts its name; one applies to the request when its
  principal is the caller's or `User:*`, its host the caller's or `*`, and its operation the
  one asked, or ALL, or (ALLOW only) one implying it: READ, WRITE, DELETE and ALTER imply
  DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS;
* a DENY that applies wins; else an ALLOW that applies allows;
* with no ACL on the resource at all (of anyone), `allow.everyone.if.no.acl.found` decides
  (false by default: denied); with ACLs on it but none for the caller, denied.

`authorize_by_resource_type` is Kafka's Authorizer.authorizeByResourceType (KIP-679: may the
caller do this to at least one resource of the type; the idempotent producer's WRITE on any
topic).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from odradek.broker.security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

_IMPLIES_DESCRIBE = frozenset(
    (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER)
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset((AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS))

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def host_of(peer: str) -> str:
    """The client's address as ACL hosts name it ("127.0.0.1", "::1") from "host:port"."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return host.strip("[]")


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons ("User:admin;User:ops")."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


def _applies(e: AccessControlEntry, principal: str, host: str, op: AclOperation) -> AclPermissionType | None:
    """ALLOW or DENY when this entry applies to the request, else None (StandardAuthorizerData.findResult)."""
    if e.principal != principal and e.principal != WILDCARD_PRINCIPAL:
        return None
    if e.host != WILDCARD and e.host != host:
        return None
    if e.operation != AclOperation.ALL:
        if e.permission == ALLOW:
            if op == AclOperation.DESCRIBE:
                if e.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op == AclOperation.DESCRIBE_CONFIGS:
                if e.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif e.operation != op:
                return None
        elif e.operation != op:
            return None
    return e.permission if e.permission in (ALLOW, DENY) else None


class Authorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: frozenset[AclBinding] = frozenset()
        # (type, name) -> entries of the literal pattern; type -> prefix -> entries
        self._literal: dict[tuple[ResourceType, str], list[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[AccessControlEntry]]] = {}

    # -- the bindings --------------------------------------------------------------------
    def replace(self, bindings: Iterable[AclBinding]) -> None:
        """Take this set of bindings as the whole of the ACLs (the store's newest view)."""
        self._bindings = frozenset(bindings)
        literal: dict[tuple[ResourceType, str], list[AccessControlEntry]] = defaultdict(list)
        prefixed: dict[ResourceType, dict[str, list[AccessControlEntry]]] = defaultdict(lambda: defaultdict(list))
        for b in self._bindings:
            p = b.pattern
            if p.pattern_type == PatternType.LITERAL:
                literal[(p.resource_type, p.name)].append(b.entry)
            elif p.pattern_type == PatternType.PREFIXED:
                prefixed[p.resource_type][p.name].append(b.entry)
        self._literal = dict(literal)
        self._prefixed = {t: dict(v) for t, v in prefixed.items()}

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._bindings

    def acls(self, f: AclBindingFilter) -> list[AclBinding]:
        """The bindings the filter selects (DescribeAcls), in a stable order."""
        return sorted(b for b in self._bindings if f.matches(b))

    # -- decisions -----------------------------------------------------------------------
    def _entries(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out += self._literal.get((resource_type, WILDCARD), ())
        for prefix, entries in self._prefixed.get(resource_type, {}).items():
            if name.startswith(prefix):
                out += entries
        return out

    def authorize(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._entries(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for e in entries:
            result = _applies(e, principal, host, op)
            if result == DENY:
                return False
            if result == ALLOW:
                allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bits (1 << operation code) of what the caller may do to the resource, among what
        its type supports: the authorized-operations fields of Metadata, DescribeGroups and
        DescribeCluster."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def authorize_by_resource_type(
        self, principal: str, host: str, op: AclOperation, resource_type: ResourceType
    ) -> bool:
        """May the caller do `op` to at least one resource of this type (Kafka's
        Authorizer.authorizeByResourceType)?"""
        if self.authorize(principal, host, op, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[ResourcePattern] = []
        for b in self._bindings:
            p, e = b.pattern, b.entry
            if p.resource_type != resource_type:
                continue
            if e.host not in (host, WILDCARD) or e.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if e.operation not in (op, AclOperation.ALL):
                continue
            if e.permission == DENY:
                if p.pattern_type == PatternType.LITERAL:
                    if p.name == WILDCARD:
                        return False
                    deny_literal.add(p.name)
                elif p.pattern_type == PatternType.PREFIXED:
                    deny_prefixed.add(p.name)
            elif e.permission == ALLOW:
                allow.append(p)
        if any(p.pattern_type == PatternType.LITERAL and p.name == WILDCARD for p in allow):
            return True
        for p in allow:
            if p.pattern_type == PatternType.LITERAL and p.name in deny_literal:
                continue
            if any(p.name[:i] in deny_prefixed for i in range(1, len(p.name) + 1)):
                continue
            return True
        return False
