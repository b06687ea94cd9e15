"""The controller's side of ZooKeeper: its election, and every write it makes.

Winning the ephemeral /controller increments /controller_epoch (`ControllerWrites.elect`);
from then on every write is one ZooKeeper transaction that first checks that epoch's znode
version (`commit`): once another broker has become controller, a deposed controller's writes
all fail (`Deposed`). A transaction is made of units, the writes of one partition (or one
topic), each committed together or not at all: a unit ZooKeeper refuses (its version check
failed: the state changed meanwhile; or an ISR member's registration is gone) is reported
with the op it refused, and the others are committed all the same. Every partition state
with a leader carries the check that its ISR members are still registered (`registered`).

Everything here blocks: the controller runs it in worker threads (Controller._zk), which
bound each call by the session timeout. What it decides is controller.py's and
decisions.py's.
"""

from __future__ import annotations

import collections
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from odradek.cluster import zk_layout as L
from odradek.cluster.decisions import Key, Update
from odradek.cluster.zk_cache_reads import DEFAULT_MAX_IN_FLIGHT

MAX_OPS_PER_TRANSACTION = 500


class Deposed(Exception):
    """Another broker became controller: this one's writes are refused."""


# One write of a controller's ZooKeeper transaction: (the name of kazoo's TransactionRequest
# method, its arguments: a path and maybe data, its keyword arguments: maybe the version).
ZkOp = tuple[str, tuple[str | bytes, ...], dict[str, int]]
# The writes of one partition (or one topic): committed together or not at all.
Unit = list[ZkOp]


def registered(st: L.PartitionState) -> Unit:
    """The checks a partition state's write carries: every ISR member of a partition with a
    leader is still registered. The controller decides from its watched copy, which may not
    show yet that a registration is gone (a broker back from a crash ends its previous run's
    registration first: zookeeper.py); ZooKeeper then refuses the write, and the partition is
    decided again from the newer state. (A leaderless partition's ISR is a memory of its last
    members, as in Kafka: not checked.)"""
    if st.leader < 0:
        return []
    return [("check", (L.broker_path(b),), {"version": -1}) for b in st.isr]


def unregistered(op: ZkOp) -> int:
    """The broker whose registration check (`registered`) `op` is; -1 for any other write."""
    name, args, _kwargs = op
    if name != "check" or not isinstance(args[0], str) or not args[0].startswith(L.BROKER_IDS + "/"):
        return -1
    return int(args[0].rsplit("/", 1)[1])


class ControllerWrites:
    """One broker's controller's writes (blocking). `epoch`, `epoch_version`: the controller
    epoch it won and the znode version of /controller_epoch its writes check (`fence`)."""

    def __init__(self, zk: KazooClient, node_id: int, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.zk = zk
        self.node_id = node_id
        self.max_in_flight = max_in_flight  # zookeeper.max.in.flight.requests: `existing`'s reads
        self.epoch = -1
        self.epoch_version = -1

    def fence(self, epoch: int, epoch_version: int) -> None:
        """From now on write as the controller of `epoch` (an election's result)."""
        self.epoch, self.epoch_version = epoch, epoch_version

    def elect(self) -> tuple[int, int] | None:
        """(controller epoch, its znode version) when this broker won /controller."""
        try:
            self.zk.create(L.CONTROLLER, L.encode_controller(self.node_id), ephemeral=True)
        except NodeExistsError:
            return None
        try:
            data, stat = self.zk.get(L.CONTROLLER_EPOCH)
            epoch = L.decode_controller_epoch(data) + 1
            stat = self.zk.set(L.CONTROLLER_EPOCH, L.encode_controller_epoch(epoch), version=stat.version)
        except NoNodeError:
            epoch = 1
            try:
                self.zk.create(L.CONTROLLER_EPOCH, L.encode_controller_epoch(epoch))
            except NodeExistsError:
                self.release()
                return None
            _data, stat = self.zk.get(L.CONTROLLER_EPOCH)
        except BadVersionError:
            self.release()
            return None
        return epoch, stat.version

    def release(self) -> None:
        """Give up /controller on a clean shutdown, so another broker takes over at once."""
        try:
            data, stat = self.zk.get(L.CONTROLLER)
            if L.decode_controller(data) == self.node_id and stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(L.CONTROLLER, version=stat.version)
        except Exception:  # noqa: BLE001 - best effort: the session's end removes it anyway
            pass

    def commit(self, units: list[Unit]) -> dict[int, ZkOp]:
        """Commit each unit behind the controller-epoch check, in transactions of at most
        MAX_OPS_PER_TRANSACTION writes (blocking). Returns the units ZooKeeper refused (a
        version or existence check failed: the state changed meanwhile, or an ISR member's
        registration is gone), each with the op it refused; all the others are committed.
        Deposed when the epoch check fails."""
        refused: dict[int, ZkOp] = {}
        pending = list(range(len(units)))
        while pending:
            chunk: list[int] = []
            size = 0
            for i in pending:
                if chunk and size + len(units[i]) > MAX_OPS_PER_TRANSACTION:
                    break
                chunk.append(i)
                size += len(units[i])
            t = self.zk.transaction()
            t.check(L.CONTROLLER_EPOCH, self.epoch_version)
            owner: list[tuple[int, ZkOp]] = []  # the unit of each op, and the op
            for i in chunk:
                for op in units[i]:
                    name, args, kwargs = op
                    getattr(t, name)(*args, **kwargs)
                    owner.append((i, op))
            results = t.commit()
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise Deposed(f"controller epoch {self.epoch} was superseded") from None
            # the op that failed has its error; the others of a failed transaction are rolled
            # back (before it) or not attempted (after it: RuntimeInconsistency)
            failed = dict(
                owner[j - 1]
                for j, r in enumerate(results)
                if j > 0 and isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))
            )
            if failed:  # nothing of this chunk was written: again without the refused units
                refused |= failed
                pending = [i for i in pending if i not in failed]
                continue
            pending = pending[len(chunk) :]
        return refused

    def state_units(
        self, creates: list[tuple[str, int, L.PartitionState]], updates: list[Update]
    ) -> tuple[list[Key], list[Unit]]:
        """The units that create (`creates`) or replace (`updates`, each with the znode version it
        replaces) partition states, and the partition of each. Which partition znodes exist
        already is asked all at once (`existing`), not two round trips per partition."""
        keys: list[Key] = []
        units: list[Unit] = []
        topics = sorted({topic for topic, _p, _st in creates})
        there = self.existing([L.partitions_path(t) for t in topics] + [L.partition_path(t, p) for t, p, _ in creates])
        for topic in topics:
            if L.partitions_path(topic) not in there:
                try:
                    self.zk.create(L.partitions_path(topic))
                except NodeExistsError:
                    pass
                except NoNodeError:  # the topic is gone: its states' creates are refused below
                    pass
        for topic, p, st in creates:
            unit: Unit = []
            if L.partition_path(topic, p) not in there:
                unit.append(("create", (L.partition_path(topic, p), b""), {}))
            unit.append(("create", (L.partition_state_path(topic, p), L.encode_partition_state(st)), {}))
            keys.append((topic, p))
            units.append(unit + registered(st))
        for topic, p, st, version in updates:
            keys.append((topic, p))
            path, data = L.partition_state_path(topic, p), L.encode_partition_state(st)
            units.append([("set_data", (path, data), {"version": version}), *registered(st)])
        return keys, units

    def existing(self, paths: list[str]) -> set[str]:
        """The znodes of `paths` that exist: `exists` sent asynchronously, at most
        `max_in_flight` on their way (as Kafka's ZooKeeperClient sends a batch of requests).
        One created meanwhile makes its create fail, refusing its unit: decided again."""
        found: set[str] = set()
        window: collections.deque[tuple[str, Any]] = collections.deque()

        def receive() -> None:
            path, pending = window.popleft()
            if pending.get() is not None:
                found.add(path)

        for path in paths:
            if len(window) >= self.max_in_flight:
                receive()
            window.append((path, self.zk.exists_async(path)))
        while window:
            receive()
        return found

    def write_states(self, creates: list[tuple[str, int, L.PartitionState]], updates: list[Update]) -> dict[Key, ZkOp]:
        """Write new and changed partition states, each partition its own unit: the partitions
        ZooKeeper refused, each with the op it refused."""
        keys, units = self.state_units(creates, updates)
        return {keys[i]: op for i, op in self.commit(units).items()}

    def write_topic(self, topic: str, assignment: L.TopicAssignment, version: int, updates: list[Update]) -> bool:
        """A topic's assignment (replacing znode version `version`) and some of its partition
        states, in one unit; False when ZooKeeper refused it."""
        unit: Unit = [("set_data", (L.topic_path(topic), L.encode_topic(assignment)), {"version": version})]
        for t, p, st, v in updates:
            unit.append(("set_data", (L.partition_state_path(t, p), L.encode_partition_state(st)), {"version": v}))
            unit += registered(st)
        return not self.commit([unit])

    def delete_topic(self, topic: str, czxid: int) -> None:
        """Remove a topic's znodes, its config and its deletion request (the request whose znode
        has `czxid`), in one transaction; what is already gone is not deleted again."""
        try:
            _data, stat = self.zk.get(L.delete_topic_path(topic))
        except NoNodeError:
            return
        if stat.czxid != czxid:
            return  # a newer request for a topic of that name: decided on its own
        ops: list[ZkOp] = []
        if self.zk.exists(L.topic_path(topic)):
            try:
                partitions = self.zk.get_children(L.partitions_path(topic))
            except NoNodeError:
                partitions = []
            for p in partitions:
                base = f"{L.partitions_path(topic)}/{p}"
                try:
                    children = self.zk.get_children(base)
                except NoNodeError:
                    continue
                for child in children:
                    ops.append(("delete", (f"{base}/{child}",), {}))
                ops.append(("delete", (base,), {}))
            if self.zk.exists(L.partitions_path(topic)):
                ops.append(("delete", (L.partitions_path(topic),), {}))
            ops.append(("delete", (L.topic_path(topic),), {}))
        if self.zk.exists(L.topic_config_path(topic)):
            ops.append(("delete", (L.topic_config_path(topic),), {}))
        ops.append(("delete", (L.delete_topic_path(topic),), {"version": stat.version}))
        if self.commit([ops]):
            raise RuntimeError(f"topic {topic} changed while it was being deleted")

    def delete_if_exists(self, path: str) -> None:
        try:
            self.zk.delete(path)
        except NoNodeError:
            pass
