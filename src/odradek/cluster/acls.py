"""Where ACLs are kept: one protocol, a file for the single node (here) and ZooKeeper in Kafka
3.9's AclAuthorizer layout for a cluster (zk_acls.py).

The store knows ACLs as Kafka writes them in ZooKeeper, strings only (the broker's
broker/security/acl_store.py turns them into bindings): a resource is (pattern type,
resource type, name), e.g. ("LITERAL", "Topic", "orders") or ("PREFIXED", "Group", "app-");
each resource has a set of entries (principal, permission type, operation, host), e.g.
("User:alice", "Allow", "Read", "*"). A resource without entries does not exist.

All methods run on the broker's event loop. `update` returns once the change is stored and in
the store's view; the change callback runs whenever the view changes (after `update`, and in
a cluster when another broker's change is seen).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Protocol

AclResource = tuple[str, str, str]  # (pattern type, resource type, name)
AclEntry = tuple[str, str, str, str]  # (principal, permission type, operation, host)
AclView = Mapping[AclResource, frozenset[AclEntry]]
WriteAtomic = Callable[[str, bytes], None]

FILE_NAME = "odradek-acls.json"


class AclStore(Protocol):
    def view(self) -> AclView:
        """Every resource with ACLs and its entries."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def update(self, resource: AclResource, add: frozenset[AclEntry], remove: frozenset[AclEntry]) -> None:
        """Add and remove entries of one resource, atomically against other writers."""
        ...


def encode_entries(entries: frozenset[AclEntry]) -> bytes:
    """Kafka's znode JSON: {"version":1,"acls":[{"principal","permissionType","operation","host"}]}."""
    acls = [{"principal": p, "permissionType": perm, "operation": op, "host": h} for p, perm, op, h in sorted(entries)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(data: bytes | None) -> frozenset[AclEntry]:
    if not data:
        return frozenset()
    doc = json.loads(data)
    return frozenset((a["principal"], a["permissionType"], a["operation"], a["host"]) for a in doc.get("acls", ()))


class LocalAclStore:
    """The single node's ACLs: one JSON file beside the metadata file (`odradek-acls.json` in
    the first log directory), each resource's entries in Kafka's znode JSON, written atomically."""

    def __init__(self, directory: str, write_atomic: WriteAtomic) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self._write_atomic = write_atomic
        self._view: dict[AclResource, frozenset[AclEntry]] = {}
        self._callbacks: list[Callable[[], None]] = []
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            for r in doc.get("resources", ()):
                entries = decode_entries(json.dumps({"acls": r["acls"]}).encode())
                if entries:
                    self._view[(r["patternType"], r["resourceType"], r["name"])] = entries

    def view(self) -> AclView:
        return dict(self._view)

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    async def start(self) -> None:
        self._changed()

    async def stop(self) -> None:
        self._callbacks.clear()

    async def update(self, resource: AclResource, add: frozenset[AclEntry], remove: frozenset[AclEntry]) -> None:
        before = self._view.get(resource, frozenset())
        after = (before | add) - remove
        if after == before:
            return
        view = dict(self._view)
        if after:
            view[resource] = after
        else:
            view.pop(resource, None)
        self._save(view)
        self._view = view
        self._changed()

    def _save(self, view: Mapping[AclResource, frozenset[AclEntry]]) -> None:
        resources = [
            {"patternType": pt, "resourceType": rt, "name": name, "acls": json.loads(encode_entries(entries))["acls"]}
            for (pt, rt, name), entries in sorted(view.items())
        ]
        self._write_atomic(self.path, json.dumps({"version": 1, "resources": resources}, indent=1).encode())

    def _changed(self) -> None:
        for callback in list(self._callbacks):
            callback()
