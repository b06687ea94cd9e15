"""The controller: one broker of the cluster decides every partition's leader and ISR.

Every broker runs a `Controller`; the one holding the ephemeral /controller znode acts. On
winning that election it increments /controller_epoch and from then on every write it makes
is one ZooKeeper transaction that first checks that epoch's znode version: once another
broker has become controller (and incremented the epoch), a deposed controller's writes all
fail, and it stops.

What it does is level-triggered: whenever the cluster changes (a broker registers, leaves
or restarts; a topic or partition is added; a deletion is requested; its own election) it
compares every partition's state with what it should be and writes the difference
(`decide`), as Kafka's ZooKeeper-mode controller does event by event:
- a partition without a state (new topic or partition) gets its first live replica as
  leader and its live replicas as ISR, leader epoch 0;
- a partition whose leader is gone (its registration deleted, or replaced by a new session:
  the broker restarted) gets the first replica, in assignment order, that is alive and in
  the ISR, with the leader epoch incremented; with none and
  `unclean.leader.election.enable` false it has no leader (-1) and keeps its ISR, and the
  first ISR member to come back becomes leader; with it true, the first live replica leads
  alone (data it lacks is lost: docs/cluster.md);
- dead brokers leave the ISR of partitions whose leader lives (the partition epoch, the
  znode version, changes; the leader epoch does not);
- a deletion requested under /admin/delete_topics removes the topic's znodes and config;
- with `auto.leader.rebalance.enable`, every `leader.imbalance.check.interval.seconds` a
  broker leading less than its preferred share (beyond
  `leader.imbalance.per.broker.percentage`) gets its preferred partitions back.

Brokers learn the new states from their own ZooKeeper watches (no LeaderAndIsr or
UpdateMetadata requests: odradek has one wire-schema library, generated from Kafka 4, which
has none; watches deliver a change to every broker within milliseconds; docs/cluster.md).

All decisions run in one task on the broker's event loop; ZooKeeper calls run in threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from odradek.cluster import zk_layout as L
from odradek.cluster.decisions import decide, preferred_election, reassignment_completions, rebalance
from odradek.cluster.metadata import DEFAULT_BROKER_ENTITY
from odradek.cluster.zk_cache import CachedState, CacheView
from odradek.cluster.zookeeper import ZooKeeperMetadataStore
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.cluster.controller")

MAX_OPS_PER_TRANSACTION = 500
UNCLEAN = "unclean.leader.election.enable"


@dataclass(frozen=True)
class ControllerConfig:
    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_per_broker_percentage: int = 10


class Deposed(Exception):
    """Another broker became controller: this one's writes are refused."""


# One write of a controller's ZooKeeper transaction: (the name of kazoo's TransactionRequest
# method, its arguments: a path and maybe data, its keyword arguments: maybe the version).
ZkOp = tuple[str, tuple[str | bytes, ...], dict[str, int]]


class Controller:
    def __init__(
        self, zk: KazooClient, store: ZooKeeperMetadataStore, node_id: int, config: ControllerConfig | None = None
    ) -> None:
        self.zk = zk
        self.store = store
        self.node_id = node_id
        self.config = config or ControllerConfig()
        self.active = False
        self.epoch = -1
        self._epoch_version = -1  # /controller_epoch's znode version our writes check
        self._sessions: dict[int, int] = {}  # broker -> czxid of the registration last acted on
        # Partition states as this controller last wrote them: its watches may not have
        # delivered its own writes yet, and it must never decide from an older state.
        self._written: dict[tuple[str, int], CachedState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_at = 0.0
        self._stopped = False
        # Brokers shutting down (ControlledShutdown): never chosen as leaders, until they
        # register again (a new session).
        self._shutting_down: dict[int, int] = {}  # broker -> czxid of the registration that asked

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self.store.add_view_listener(self._view_changed)
        self._task = asyncio.ensure_future(self._run())
        self._wake.set()

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if self.active:
            self.active = False
            await asyncio.to_thread(self._release)

    def _release(self) -> None:
        """Give up /controller on a clean shutdown, so another broker takes over at once."""
        try:
            data, stat = self.zk.get(L.CONTROLLER)
            if L.decode_controller(data) == self.node_id and stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(L.CONTROLLER, version=stat.version)
        except Exception:  # noqa: BLE001 - best effort: the session's end removes it anyway
            pass

    def _view_changed(self, view: CacheView) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while not self._stopped:
            await self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            try:
                await self._step()
            except Deposed as e:
                log.warning("broker %d is no longer the controller: %s", self.node_id, e)
                self.active = False
            except Exception:
                log.exception("controller step failed; retrying")
                await asyncio.sleep(0.5)
                self._wake.set()

    async def _step(self) -> None:
        view = self.store.view
        if self.active and view.controller not in (-1, self.node_id):
            # (-1 while active: the watch has not shown our own /controller yet, or our session
            # expired and nobody else has been elected: our epoch is still the newest, and once
            # another broker is elected its epoch fences every write of ours.)
            log.info("broker %d resigns as controller (now %d)", self.node_id, view.controller)
            self.active = False
        if view.controller == -1 and not self.active:
            if await asyncio.to_thread(self._elect):
                view = self.store.view
        if not self.active:
            return
        await self._reconcile(view)
        if self.config.auto_leader_rebalance:
            now = time.monotonic()
            if now >= self._rebalance_at:
                self._rebalance_at = now + self.config.imbalance_check_interval_s
                view = self.store.view
                live = set(view.brokers) - set(self._shutting_down)
                pct = self.config.imbalance_per_broker_percentage
                updates = rebalance(view, self._states(view), live, pct, self.epoch)
                if updates:
                    log.info("preferred leader election for %d partitions", len(updates))
                    await asyncio.to_thread(self._write_states, [], updates)
            else:
                asyncio.get_running_loop().call_later(self._rebalance_at - now, self._wake.set)

    # -------------------------------------------------------------- election
    def _elect(self) -> bool:
        try:
            self.zk.create(L.CONTROLLER, L.encode_controller(self.node_id), ephemeral=True)
        except NodeExistsError:
            return False
        try:
            data, stat = self.zk.get(L.CONTROLLER_EPOCH)
            epoch = L.decode_controller_epoch(data) + 1
            stat = self.zk.set(L.CONTROLLER_EPOCH, L.encode_controller_epoch(epoch), version=stat.version)
        except NoNodeError:
            epoch = 1
            try:
                self.zk.create(L.CONTROLLER_EPOCH, L.encode_controller_epoch(epoch))
            except NodeExistsError:
                self._release()
                return False
            _data, stat = self.zk.get(L.CONTROLLER_EPOCH)
        except BadVersionError:
            self._release()
            return False
        self.epoch, self._epoch_version = epoch, stat.version
        self._sessions = {}
        self._written = {}
        self.active = True
        log.info("broker %d is the controller (controller epoch %d)", self.node_id, epoch)
        return True

    # ------------------------------------------------------------- reconcile
    def _states(self, view: CacheView) -> dict[tuple[str, int], CachedState]:
        """The cache's partition states, each replaced by this controller's own write when that
        is newer (a higher znode version, or created and not yet seen)."""
        states = dict(view.states)
        for key, mine in list(self._written.items()):
            if key[0] not in view.topics:
                del self._written[key]
                continue
            seen = states.get(key)
            if seen is None or seen.version < mine.version:
                states[key] = mine
            else:
                del self._written[key]  # the cache has caught up
        return states

    async def _reconcile(self, view: CacheView) -> None:
        for b, czxid in list(self._shutting_down.items()):
            if view.broker_sessions.get(b) != czxid:
                del self._shutting_down[b]  # gone, or back with a new session
        live = set(view.brokers) - set(self._shutting_down)
        states = self._states(view)
        restarted = {b for b, czxid in view.broker_sessions.items() if self._sessions.get(b, czxid) != czxid}
        for topic in sorted(view.deleting):
            await asyncio.to_thread(self._delete_topic, topic)
        if view.reassigning:  # /admin/reassign_partitions, as Kafka's ZooKeeper tools write it
            await self.alter_reassignments(dict(view.reassigning), view)
            await asyncio.to_thread(self._delete_if_exists, L.REASSIGN_PARTITIONS)
        await self._complete_reassignments(view, states, live)
        creates: list[tuple[str, int, L.PartitionState]] = []
        updates: list[tuple[str, int, L.PartitionState, int]] = []
        for topic, a in view.topics.items():
            if topic in view.deleting:
                continue
            for p, replicas in sorted(a.partitions.items()):
                cached = states.get((topic, p))
                if cached is None:
                    alive = tuple(r for r in replicas if r in live)
                    if alive:
                        creates.append((topic, p, L.PartitionState(alive[0], 0, alive, self.epoch)))
                    continue
                st = cached.state
                unclean_ok = self._unclean_allowed(view, topic)
                if st.leader in self._shutting_down and st.leader in view.brokers:
                    continue  # moved by controlled_shutdown (or kept there: no other in-sync replica)
                leader, isr, bump = decide(st, replicas, live, restarted, unclean=unclean_ok)
                if (leader, isr) != (st.leader, st.isr) or bump:
                    epoch = st.leader_epoch + 1 if bump else st.leader_epoch
                    updates.append((topic, p, L.PartitionState(leader, epoch, isr, self.epoch), cached.version))
        if creates or updates:
            await asyncio.to_thread(self._write_states, creates, updates)
            for topic, p, st, _v in updates:
                log.info(
                    "%s-%d: leader %d, leader epoch %d, isr %s", topic, p, st.leader, st.leader_epoch, list(st.isr)
                )
        self._sessions = dict(view.broker_sessions)

    def _unclean_allowed(self, view: CacheView, topic: str) -> bool:
        """`unclean.leader.election.enable` as Kafka resolves it: the topic's setting, else this
        (the controller's) broker's dynamic one, the dynamic default of every broker, the static
        file. Read at each decision, so a dynamic change takes effect at the next one (the
        change itself wakes the controller: its watches cover /config/brokers)."""
        for value in (
            view.topic_configs.get(topic, {}).get(UNCLEAN),
            view.broker_configs.get(str(self.node_id), {}).get(UNCLEAN),
            view.broker_configs.get(DEFAULT_BROKER_ENTITY, {}).get(UNCLEAN),
        ):
            if value is not None:
                return value.strip().lower() == "true"
        return self.config.unclean_leader_election

    async def elect_leaders(
        self, unclean: bool, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """ElectLeaders: per partition (all when None), an error code and message. Preferred: the
        first replica, when alive and in sync (ELECTION_NOT_NEEDED when it leads already,
        PREFERRED_LEADER_NOT_AVAILABLE when it cannot); unclean: a leaderless partition gets its
        first live replica even if out of sync (ELECTION_NOT_NEEDED when it has a leader,
        ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica lives)."""
        view = self.store.view
        states = self._states(view)
        live = set(view.brokers) - set(self._shutting_down)
        wanted = (
            list(partitions)
            if partitions is not None
            else [(t, p) for t, a in view.topics.items() for p in a.partitions]
        )
        out: dict[tuple[str, int], tuple[int, str | None]] = {}
        updates = []
        for topic, p in wanted:
            a = view.topics.get(topic)
            cached = states.get((topic, p))
            if a is None or p not in a.partitions or cached is None or topic in view.deleting:
                out[(topic, p)] = (ErrorCode.unknown_topic_or_partition, "unknown partition")
                continue
            st, replicas = cached.state, a.partitions[p]
            if not unclean:
                new = preferred_election(st, replicas, live, self.epoch)
                if st.leader == replicas[0]:
                    out[(topic, p)] = (ErrorCode.election_not_needed, "already led by its preferred replica")
                elif new is None:
                    out[(topic, p)] = (
                        ErrorCode.preferred_leader_not_available,
                        "preferred replica not alive and in sync",
                    )
                else:
                    updates.append((topic, p, new, cached.version))
                    out[(topic, p)] = (ErrorCode.none, None)
                continue
            if st.leader >= 0 and st.leader in live:
                out[(topic, p)] = (ErrorCode.election_not_needed, "the partition has a leader")
                continue
            alive = [r for r in replicas if r in live]
            if not alive:
                out[(topic, p)] = (ErrorCode.eligible_leaders_not_available, "no replica is alive")
                continue
            in_sync = [r for r in alive if r in st.isr]
            leader = (in_sync or alive)[0]
            isr = tuple(r for r in st.isr if r in live) if in_sync else (leader,)
            updates.append((topic, p, L.PartitionState(leader, st.leader_epoch + 1, isr, self.epoch), cached.version))
            out[(topic, p)] = (ErrorCode.none, None)
        if updates:
            await asyncio.to_thread(self._write_states, [], updates)
        return out

    async def controlled_shutdown(self, broker: int) -> list[tuple[str, int]]:
        """Move leadership off a broker that is shutting down, to the next in-sync replica in
        assignment order, and take it out of the ISR of partitions it follows; returns the
        partitions it still leads (no other in-sync replica is alive)."""
        view = self.store.view
        if broker not in view.brokers:
            return []
        self._shutting_down[broker] = view.broker_sessions[broker]
        live = set(view.brokers) - set(self._shutting_down)
        states = self._states(view)
        updates, remaining = [], []
        for topic, a in view.topics.items():
            if topic in view.deleting:
                continue
            for p, replicas in a.partitions.items():
                cached = states.get((topic, p))
                if cached is None or broker not in replicas:
                    continue
                st = cached.state
                if st.leader == broker:
                    others = [r for r in replicas if r != broker and r in live and r in st.isr]
                    if not others:
                        remaining.append((topic, p))
                        continue
                    isr = tuple(r for r in st.isr if r != broker)
                    updates.append(
                        (topic, p, L.PartitionState(others[0], st.leader_epoch + 1, isr, self.epoch), cached.version)
                    )
                elif broker in st.isr and len(st.isr) > 1:
                    isr = tuple(r for r in st.isr if r != broker)
                    updates.append(
                        (topic, p, L.PartitionState(st.leader, st.leader_epoch, isr, self.epoch), cached.version)
                    )
        if updates:
            await asyncio.to_thread(self._write_states, [], updates)
        log.info(
            "controlled shutdown of broker %d: %d partitions moved, %d remain", broker, len(updates), len(remaining)
        )
        return sorted(remaining)

    async def alter_partition(
        self, topic: str, partition: int, leader: int, leader_epoch: int, new_isr: tuple[int, ...], partition_epoch: int
    ) -> tuple[int, L.PartitionState | None, int]:
        """AlterPartition from a leader: (error code, the partition's state after, its partition
        epoch). Kafka's rules: the request must come from the current leader at the current
        leader epoch and partition epoch (a change based on an older state is refused); the new
        ISR holds the leader and only live replicas of the partition."""
        if not self.active:
            return ErrorCode.not_controller, None, -1
        view = self.store.view
        a = view.topics.get(topic)
        cached = self._states(view).get((topic, partition))
        if a is None or cached is None or partition not in a.partitions:
            return ErrorCode.unknown_topic_or_partition, None, -1
        st, version = cached.state, cached.version
        if leader_epoch < st.leader_epoch:
            return ErrorCode.fenced_leader_epoch, st, version
        if leader_epoch > st.leader_epoch or leader != st.leader:
            return ErrorCode.not_leader_or_follower, st, version
        if partition_epoch != version:
            return ErrorCode.invalid_update_version, st, version
        replicas = a.partitions[partition]
        if leader not in new_isr or any(r not in replicas for r in new_isr) or len(set(new_isr)) != len(new_isr):
            return ErrorCode.invalid_request, st, version
        if any(r not in view.brokers or r in self._shutting_down for r in new_isr if r not in st.isr):
            # KIP-841: a replica joins only while registered and not shutting down (a broker
            # in controlled shutdown still fetches until it stops, and would flap in and out)
            return ErrorCode.ineligible_replica, st, version
        if new_isr == st.isr:
            return ErrorCode.none, st, version
        new = L.PartitionState(st.leader, st.leader_epoch, new_isr, self.epoch)
        await asyncio.to_thread(self._write_states, [], [(topic, partition, new, version)])
        log.info("%s-%d: isr %s -> %s (by leader %d)", topic, partition, list(st.isr), list(new_isr), leader)
        return ErrorCode.none, new, version + 1

    # --------------------------------------------------------- reassignment
    async def alter_reassignments(
        self, moves: dict[tuple[str, int], tuple[int, ...] | None], view: CacheView | None = None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """AlterPartitionReassignments: move each partition to its target replicas (None cancels a
        reassignment in progress). The assignment becomes target + old (the new replicas start
        copying the log as followers); once every target replica is in the ISR, the reassignment
        completes (`_complete_reassignments`): a target replica leads, the others go."""
        view = view or self.store.view
        out: dict[tuple[str, int], tuple[int, str | None]] = {}
        by_topic: dict[str, dict[int, tuple[int, ...] | None]] = {}
        for (topic, p), target in moves.items():
            a = view.topics.get(topic)
            if a is None or p not in a.partitions or topic in view.deleting:
                out[(topic, p)] = (ErrorCode.unknown_topic_or_partition, "unknown partition")
            elif target is not None and (not target or len(set(target)) != len(target)):
                out[(topic, p)] = (ErrorCode.invalid_replica_assignment, "replicas must be distinct and not empty")
            elif target is not None and any(b not in view.brokers for b in target):
                out[(topic, p)] = (ErrorCode.invalid_replica_assignment, "a target replica is not a live broker")
            elif target is None and p not in a.adding and p not in a.removing:
                out[(topic, p)] = (ErrorCode.no_reassignment_in_progress, "no reassignment in progress")
            else:
                by_topic.setdefault(topic, {})[p] = target
                out[(topic, p)] = (ErrorCode.none, None)
        for topic, changes in by_topic.items():
            a = view.topics[topic]
            parts, adding, removing = dict(a.partitions), dict(a.adding), dict(a.removing)
            for p, target in changes.items():
                current = parts[p]
                original = tuple(r for r in current if r not in adding.get(p, ())) if p in adding else current
                if target is None:  # cancel: back to the replicas before the reassignment
                    parts[p] = original
                    adding.pop(p, None)
                    removing.pop(p, None)
                    continue
                parts[p] = tuple(target) + tuple(r for r in original if r not in target)
                add = tuple(r for r in target if r not in original)
                rem = tuple(r for r in original if r not in target)
                if add or rem:
                    adding[p], removing[p] = add, rem
                else:
                    adding.pop(p, None)
                    removing.pop(p, None)
            updated = L.TopicAssignment(a.topic_id, parts, adding, removing)
            await asyncio.to_thread(self._write_topic, topic, updated, view.topic_versions.get(topic, -1), [])
        return out

    async def _complete_reassignments(
        self, view: CacheView, states: dict[tuple[str, int], CachedState], live: set[int]
    ) -> None:
        for topic, (updated, state_updates) in reassignment_completions(view, states, live, self.epoch).items():
            await asyncio.to_thread(
                self._write_topic, topic, updated, view.topic_versions.get(topic, -1), state_updates
            )
            log.info("%s: reassignment of %d partitions completed", topic, len(state_updates))

    def _write_topic(
        self,
        topic: str,
        assignment: L.TopicAssignment,
        version: int,
        state_updates: list[tuple[str, int, L.PartitionState, int]],
    ) -> None:
        ops: list[ZkOp] = [("set_data", (L.topic_path(topic), L.encode_topic(assignment)), {"version": version})]
        for t, p, st, v in state_updates:
            ops.append(("set_data", (L.partition_state_path(t, p), L.encode_partition_state(st)), {"version": v}))
        self._transaction(ops)
        for t, p, st, v in state_updates:
            self._written[(t, p)] = CachedState(st, v + 1)

    def _delete_if_exists(self, path: str) -> None:
        try:
            self.zk.delete(path)
        except NoNodeError:
            pass

    # --------------------------------------------------------- zookeeper ops
    def _transaction(self, ops: list[ZkOp]) -> None:
        """Commit `ops` behind the controller-epoch check, in chunks. Deposed when the check fails."""
        for i in range(0, len(ops), MAX_OPS_PER_TRANSACTION):
            t = self.zk.transaction()
            t.check(L.CONTROLLER_EPOCH, self._epoch_version)
            for name, args, kwargs in ops[i : i + MAX_OPS_PER_TRANSACTION]:
                getattr(t, name)(*args, **kwargs)
            results = t.commit()
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise Deposed(f"controller epoch {self.epoch} was superseded") from None
            failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failed:
                raise RuntimeError(f"controller transaction failed: {failed[0]!r} (will re-read and retry)")

    def _write_states(
        self,
        creates: list[tuple[str, int, L.PartitionState]],
        updates: list[tuple[str, int, L.PartitionState, int]],
    ) -> None:
        ops: list[ZkOp] = []
        for topic, p, st in creates:
            if not self.zk.exists(L.partitions_path(topic)):
                try:
                    self.zk.create(L.partitions_path(topic))
                except NodeExistsError:
                    pass
            if not self.zk.exists(L.partition_path(topic, p)):
                ops.append(("create", (L.partition_path(topic, p), b""), {}))
            ops.append(("create", (L.partition_state_path(topic, p), L.encode_partition_state(st)), {}))
        for topic, p, st, version in updates:
            ops.append(
                ("set_data", (L.partition_state_path(topic, p), L.encode_partition_state(st)), {"version": version})
            )
        self._transaction(ops)
        for topic, p, st in creates:
            self._written[(topic, p)] = CachedState(st, 0)
        for topic, p, st, version in updates:
            self._written[(topic, p)] = CachedState(st, version + 1)

    def _delete_topic(self, topic: str) -> None:
        ops: list[ZkOp] = []
        if self.zk.exists(L.topic_path(topic)):
            try:
                partitions = self.zk.get_children(L.partitions_path(topic))
            except NoNodeError:
                partitions = []
            for p in partitions:
                base = f"{L.partitions_path(topic)}/{p}"
                for child in self.zk.get_children(base):
                    ops.append(("delete", (f"{base}/{child}",), {}))
                ops.append(("delete", (base,), {}))
            if self.zk.exists(L.partitions_path(topic)):
                ops.append(("delete", (L.partitions_path(topic),), {}))
            ops.append(("delete", (L.topic_path(topic),), {}))
        if self.zk.exists(L.topic_config_path(topic)):
            ops.append(("delete", (L.topic_config_path(topic),), {}))
        ops.append(("delete", (L.delete_topic_path(topic),), {}))
        self._transaction(ops)
        log.info("deleted topic %s", topic)
