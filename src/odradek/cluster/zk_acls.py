"""ACLs in ZooKeeper, in Kafka 3.9's AclAuthorizer layout (Kafka's ZkData.scala: ZkAclStore):

    /kafka-acl/<ResourceType>/<name>                       literal patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>     prefixed patterns
        {"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                   "<RESOURCE_TYPE>:<name>" (a literal change)
    /kafka-acl-extended-changes/acl_changes_<seq>          {"version":1,"resourceType":"TOPIC",
                                                            "name":..,"patternType":"PREFIXED"}

A write is a conditional set (or create) of the resource's znode, retried on a conflicting
write, then a change notification; every broker watches both notification paths (kazoo's
ChildrenWatch) and reads again the resources named by notifications it has not seen, so an ACL
made through one broker is applied by the others within a watch's round trip. The resource
type in a notification is Kafka's enum name (TOPIC), in paths its camel-case name (Topic).
Notifications older than 15 minutes (by their znode's creation time) are deleted whenever a
broker processes notifications, as Kafka's ZkNodeChangeNotificationListener purges them, so the
change paths do not grow for ever.

kazoo calls block: they run in worker threads. The watch callbacks, on kazoo's own thread, make
no ZooKeeper call: as zk_cache.py's, they only record what they were given (the children of a
change path) and tell the event loop, whose one task at a time reads the new notifications and
the resources they name in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from odradek.cluster.acls import AclEntry, AclResource, AclView, decode_entries, encode_entries
from odradek.cluster.store import MetadataUnavailable

log = logging.getLogger("odradek.cluster.zk")

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener.changeExpirationMs

# camel-case path names <-> Kafka's ResourceType enum names in notifications
_ENUM_NAMES = {
    "Topic": "TOPIC",
    "Group": "GROUP",
    "Cluster": "CLUSTER",
    "TransactionalId": "TRANSACTIONAL_ID",
    "DelegationToken": "DELEGATION_TOKEN",
    "User": "USER",
}
_PATH_NAMES = {v: k for k, v in _ENUM_NAMES.items()}


def resource_path(resource: AclResource) -> str:
    pattern_type, resource_type, name = resource
    root = LITERAL_ROOT if pattern_type == "LITERAL" else PREFIXED_ROOT
    return f"{root}/{resource_type}/{name}"


def encode_change(resource: AclResource) -> tuple[str, bytes]:
    """(the notification path to create a sequential node under, its data)."""
    pattern_type, resource_type, name = resource
    if pattern_type == "LITERAL":
        return LITERAL_CHANGES, f"{_ENUM_NAMES[resource_type]}:{name}".encode()
    event = {"version": 1, "resourceType": _ENUM_NAMES[resource_type], "name": name, "patternType": pattern_type}
    return EXTENDED_CHANGES, json.dumps(event, separators=(",", ":")).encode()


def decode_change(root: str, data: bytes) -> AclResource | None:
    try:
        if root == LITERAL_CHANGES:
            enum_name, _, name = data.decode().partition(":")
            return ("LITERAL", _PATH_NAMES[enum_name.upper()], name)
        event = json.loads(data)
        return (event["patternType"].upper(), _PATH_NAMES[event["resourceType"].upper()], event["name"])
    except (ValueError, KeyError, UnicodeDecodeError):
        log.warning("ignoring an unreadable ACL change notification under %s: %r", root, data[:200])
        return None


class ZooKeeperAclStore:
    def __init__(self, zk: KazooClient, clock: Callable[[], float] = time.time) -> None:
        """`clock`: wall-clock seconds, compared with the notifications' creation times."""
        self.zk = zk
        self.clock = clock
        self._lock = threading.Lock()
        self._view: dict[AclResource, frozenset[AclEntry]] = {}
        self._seen: dict[str, int] = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}
        self._callbacks: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        # the children of each change path a watch reported, not processed yet (under _lock)
        self._pending: dict[str, list[str]] = {}
        self._processing: asyncio.Task[None] | None = None

    def view(self) -> AclView:
        with self._lock:
            return dict(self._view)

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._load)

    async def stop(self) -> None:
        self._stopped = True
        self._callbacks.clear()

    async def update(self, resource: AclResource, add: frozenset[AclEntry], remove: frozenset[AclEntry]) -> None:
        try:
            changed = await asyncio.to_thread(self._update, resource, add, remove)
        except KazooException as e:  # the request answers UNKNOWN_SERVER_ERROR, as Kafka for a ZooKeeper error
            raise MetadataUnavailable(f"ZooKeeper: {type(e).__name__} {e}") from None
        if changed:
            self._changed()

    # -- worker threads -------------------------------------------------------------------
    def _load(self) -> None:
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self.zk.ensure_path(root)
        for root in (LITERAL_ROOT, PREFIXED_ROOT):
            self.zk.ensure_path(root)
        view: dict[AclResource, frozenset[AclEntry]] = {}
        for pattern_type, root in (("LITERAL", LITERAL_ROOT), ("PREFIXED", PREFIXED_ROOT)):
            for resource_type in self.zk.get_children(root):
                if resource_type not in _ENUM_NAMES:
                    continue
                for name in self.zk.get_children(f"{root}/{resource_type}"):
                    entries = self._read((pattern_type, resource_type, name))[0]
                    if entries:
                        view[(pattern_type, resource_type, name)] = entries
        with self._lock:
            self._view = view
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            children = self.zk.get_children(root)
            self._seen[root] = max((_seq(c) for c in children), default=-1)
            self._purge(root, children)
            self.zk.ChildrenWatch(root, self._watcher(root))

    def _read(self, resource: AclResource) -> tuple[frozenset[AclEntry], int]:
        """The resource's entries and its znode's version (-1: no znode)."""
        try:
            data, stat = self.zk.get(resource_path(resource))
        except NoNodeError:
            return frozenset(), -1
        try:
            return decode_entries(data), stat.version
        except (ValueError, KeyError):
            log.warning("ignoring unreadable ACLs at %s", resource_path(resource))
            return frozenset(), stat.version

    def _update(self, resource: AclResource, add: frozenset[AclEntry], remove: frozenset[AclEntry]) -> bool:
        path = resource_path(resource)
        while True:
            before, version = self._read(resource)
            after = (before | add) - remove
            if after == before:
                self._set_view(resource, after)
                return False
            try:
                if version < 0:
                    self.zk.create(path, encode_entries(after), makepath=True)
                elif after:
                    self.zk.set(path, encode_entries(after), version=version)
                else:
                    self.zk.delete(path, version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker wrote it meanwhile: read again
            break
        root, data = encode_change(resource)
        self.zk.create(f"{root}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)
        self._set_view(resource, after)
        return True

    def _set_view(self, resource: AclResource, entries: frozenset[AclEntry]) -> None:
        with self._lock:
            if entries:
                self._view[resource] = entries
            else:
                self._view.pop(resource, None)

    def _process(self, root: str, children: list[str]) -> bool:
        """Read the notifications among `children` not seen yet and the resources they name;
        purge the expired ones. Whether the view may have changed."""
        now_ms = self.clock() * 1000
        fresh = sorted((_seq(c), c) for c in children if _seq(c) > self._seen[root])
        for seq, child in fresh:
            try:
                data, _ = self.zk.get(f"{root}/{child}")
            except NoNodeError:
                continue
            resource = decode_change(root, data)
            if resource is not None:
                self._set_view(resource, self._read(resource)[0])
            self._seen[root] = max(self._seen[root], seq)
        self._purge(root, children, now_ms)
        return bool(fresh)

    def _purge(self, root: str, children: list[str], now_ms: float | None = None) -> None:
        """Delete the notifications created more than CHANGE_EXPIRATION_MS ago (Kafka's
        purgeObsoleteNotifications; every broker does it, the first one deletes)."""
        now_ms = self.clock() * 1000 if now_ms is None else now_ms
        for child in sorted(children):
            path = f"{root}/{child}"
            try:
                _data, stat = self.zk.get(path)
                if now_ms - stat.ctime > CHANGE_EXPIRATION_MS:
                    log.debug("purging ACL change notification %s", path)
                    self.zk.delete(path)
            except NoNodeError:
                continue

    # -- kazoo's thread: record and tell the event loop, no ZooKeeper call ------------------
    def _watcher(self, root: str) -> Callable[[list[str]], bool | None]:
        def changed(children: list[str]) -> bool | None:
            if self._stopped:
                return False
            with self._lock:
                self._pending[root] = list(children)
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._process_pending)
            return None

        return changed

    # -- the event loop -------------------------------------------------------------------
    def _process_pending(self) -> None:
        if self._stopped or (self._processing is not None and not self._processing.done()):
            return  # the task running takes what is pending when it is done with what it has
        self._processing = asyncio.get_running_loop().create_task(self._process_all())

    async def _process_all(self) -> None:
        while not self._stopped:
            with self._lock:
                pending, self._pending = self._pending, {}
            if not pending:
                return
            changed = False
            for root, children in pending.items():
                try:
                    changed |= await asyncio.to_thread(self._process, root, children)
                except KazooException as e:  # the next notification (or a restart) reads them again
                    log.warning("reading ACL change notifications under %s failed: %s", root, e)
            if changed:
                self._changed()

    def _changed(self) -> None:
        for callback in list(self._callbacks):
            callback()


def _seq(child: str) -> int:
    try:
        return int(child[len(CHANGE_PREFIX) :]) if child.startswith(CHANGE_PREFIX) else -1
    except ValueError:
        return -1
