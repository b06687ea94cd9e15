"""The broker's ACLs: the store's view (cluster/acls.py: a file on a single node, ZooKeeper in a
cluster) as bindings, given to the authorizer on every change, and the writes of CreateAcls and
DeleteAcls.

A change made here is in the authorizer before `create`/`delete` return; a change made through
another broker reaches this one through the store's change notifications.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from odradek.broker.security.acl import (
    ZK_RESOURCE_NAMES,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    camel,
    from_camel,
)
from odradek.broker.security.authorizer import Authorizer
from odradek.cluster.acls import AclEntry, AclResource, AclStore, AclView
from odradek.cluster.store import MetadataError
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.acls")

_TYPES_BY_NAME = {name: t for t, name in ZK_RESOURCE_NAMES.items()}


def resource_of(p: ResourcePattern) -> AclResource:
    return (p.pattern_type.name, ZK_RESOURCE_NAMES[p.resource_type], p.name)


def entry_of(e: AccessControlEntry) -> AclEntry:
    return (e.principal, camel(e.permission), camel(e.operation), e.host)


def bindings_of(view: AclView) -> list[AclBinding]:
    out = []
    for (pattern_type, resource_type, name), entries in view.items():
        try:
            pattern = ResourcePattern(_TYPES_BY_NAME[resource_type], name, PatternType[pattern_type])
        except KeyError:
            log.warning("ignoring ACLs of an unknown resource %s:%s:%s", pattern_type, resource_type, name)
            continue
        for principal, permission, operation, host in entries:
            try:
                op = AclOperation(from_camel(AclOperation, operation))
                perm = AclPermissionType(from_camel(AclPermissionType, permission))
            except ValueError:
                log.warning("ignoring an unreadable ACL of %s:%s:%s", pattern_type, resource_type, name)
                continue
            out.append(AclBinding(pattern, AccessControlEntry(principal, host, op, perm)))
    return out


StoreError = tuple[int, str]  # (error code, message) for every item of the request


class AclManager:
    def __init__(self, authorizer: Authorizer, store: AclStore) -> None:
        self.authorizer = authorizer
        self.store = store
        store.on_change(self._apply)

    async def start(self) -> None:
        await self.store.start()
        self._apply()

    async def stop(self) -> None:
        await self.store.stop()

    def _apply(self) -> None:
        self.authorizer.replace(bindings_of(self.store.view()))

    async def create(self, bindings: Iterable[AclBinding]) -> StoreError | None:
        """Store these bindings (existing ones stay as they are)."""
        by_resource: dict[ResourcePattern, set[AclEntry]] = defaultdict(set)
        for b in bindings:
            by_resource[b.pattern].add(entry_of(b.entry))
        try:
            for pattern, entries in by_resource.items():
                await self.store.update(resource_of(pattern), frozenset(entries), frozenset())
        except MetadataError as e:
            return ErrorCode.unknown_server_error, f"ACLs could not be stored: {e}"
        return None

    async def delete(self, filters: list[AclBindingFilter]) -> tuple[list[list[AclBinding]], StoreError | None]:
        """Delete what each filter selects; the bindings deleted, one list per filter (a binding
        two filters select is answered for both, as Kafka answers it)."""
        current = sorted(self.authorizer.bindings)
        matched = [[b for b in current if f.matches(b)] for f in filters]
        by_resource: dict[ResourcePattern, set[AclEntry]] = defaultdict(set)
        for found in matched:
            for b in found:
                by_resource[b.pattern].add(entry_of(b.entry))
        try:
            for pattern, entries in by_resource.items():
                await self.store.update(resource_of(pattern), frozenset(), frozenset(entries))
        except MetadataError as e:
            return [[] for _ in filters], (ErrorCode.unknown_server_error, f"ACLs could not be deleted: {e}")
        return matched, None
