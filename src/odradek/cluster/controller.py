"""The controller: one broker of the cluster decides every partition's leader and ISR.

Every broker runs a `Controller`; the one holding the ephemeral /controller znode acts. On
winning that election it increments /controller_epoch and from then on every write it makes
is one ZooKeeper transaction that first checks that epoch's znode version: once another
broker has become controller (and incremented the epoch), a deposed controller's writes all
fail, and it stops. (The election and the writes themselves: cluster/controller_writes.py.)

What it does is level-triggered: whenever the cluster changes (a broker registers, leaves
or restarts; a topic or partition is added; a deletion is requested; its own election) it
compares every partition's state with what it should be and writes the difference
(cluster/decisions.py), as Kafka's ZooKeeper-mode controller does event by event:
- a partition without a state (new topic or partition) gets its first live replica as
  leader and its live replicas as ISR, leader epoch 0;
- a broker registered again since an ISR admitted it (a new session: it restarted, its log
  may lack its unflushed tail) is bounced, as Kafka's controller handles one: failed first,
  then started; each state records the broker epoch its ISR members were admitted with, so
  a controller elected after the restart sees it too (decisions.reconcile_partition);
- a partition whose leader is gone (its registration deleted, or bounced) gets the first
  replica, in assignment order, that is alive and in the ISR, with the leader epoch
  incremented; with none and
  `unclean.leader.election.enable` false it has no leader (-1) and keeps its ISR, and the
  first ISR member to come back becomes leader; with it true, the first live replica leads
  alone (data it lacks is lost: docs/cluster.md);
- dead brokers leave the ISR of partitions whose leader lives (the partition epoch, the
  znode version, changes; the leader epoch does not);
- a deletion requested under /admin/delete_topics removes the topic's znodes and config once
  every live broker has dropped the topic from its metadata (each says so in the request's
  znode: zookeeper.py), once;
- with `auto.leader.rebalance.enable`, every `leader.imbalance.check.interval.seconds` a
  broker leading less than its preferred share (beyond
  `leader.imbalance.per.broker.percentage`) gets its preferred partitions back.

Brokers learn the new states from their own ZooKeeper watches (no LeaderAndIsr or
UpdateMetadata requests: odradek has one wire-schema library, generated from Kafka 4, which
has none; watches deliver a change to every broker within milliseconds; docs/cluster.md).

Decisions are made one at a time, as on Kafka's single controller thread: the reconcile
step and each request (AlterPartition, ControlledShutdown, ElectLeaders, reassignments) hold
one lock from reading the state to writing it, so none decides from a state another is
replacing. ZooKeeper calls run in threads, each bounded by the session timeout: a request
the controller cannot serve gets a `ControllerError` with the Kafka error code to answer
(NOT_CONTROLLER when this broker is not, or no longer, the controller or is stopping;
REQUEST_TIMED_OUT when ZooKeeper did not take the write), never an internal error. An error
in one topic's or partition's part of the reconcile step is logged and retried; the others
go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError

from odradek.cluster import zk_layout as L
from odradek.cluster.controller_writes import ControllerWrites, Deposed, ZkOp, unregistered
from odradek.cluster.decisions import (
    Key,
    Update,
    check_isr_change,
    controlled_shutdown_moves,
    plan_reassignments,
    preferred_election,
    reassignment_completions,
    rebalance,
    reconcile_partition,
    stamp,
    unclean_election,
)
from odradek.cluster.metadata import DEFAULT_BROKER_ENTITY
from odradek.cluster.zk_cache import CachedState, CacheView
from odradek.cluster.zookeeper import ZooKeeperMetadataStore
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.cluster.controller")

UNCLEAN = "unclean.leader.election.enable"
RETRY_S = 0.5  # a reconcile step that left something undone runs again this much later
DEFAULT_ZK_TIMEOUT_S = 18.0  # zookeeper.session.timeout.ms's default, when there is no store
T = TypeVar("T")


@dataclass(frozen=True)
class ControllerConfig:
    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_per_broker_percentage: int = 10


class ControllerError(ConnectionError):
    """A request the controller cannot serve now, with the Kafka error code to answer it
    (NOT_CONTROLLER, REQUEST_TIMED_OUT, STALE_BROKER_EPOCH, BROKER_NOT_AVAILABLE). A
    ConnectionError: a broker asking its own controller retries as when a remote one is
    unreachable."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition request."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int
    isr_epochs: tuple[int, ...] | None = None  # v3 (KIP-903): each member's broker epoch, -1 unknown


class Controller:
    def __init__(
        self, zk: KazooClient, store: ZooKeeperMetadataStore, node_id: int, config: ControllerConfig | None = None
    ) -> None:
        self.zk = zk
        self.store = store
        self.node_id = node_id
        self.config = config or ControllerConfig()
        self.active = False
        # its election and every write (controller_writes.py)
        self.writes = ControllerWrites(zk, node_id, store.cache.max_in_flight if store is not None else 10)
        self._sessions: dict[int, int] = {}  # broker -> czxid of the registration last acted on
        # Partition states as this controller last wrote them: its watches may not have
        # delivered its own writes yet, and it must never decide from an older state.
        self._written: dict[Key, CachedState] = {}
        # Deletions this controller completed, by (topic, czxid of the request's znode): its
        # watches may still list them, and a deletion is done once.
        self._deleted: set[tuple[str, int]] = set()
        self._gone: dict[str, uuid.UUID] = {}  # topics it deleted, by id, until its watches agree
        self._lock = asyncio.Lock()  # one decision at a time
        self._deadline: float | None = None  # the loop time by which the request deciding must be answered
        self._zk_timeout_s = store.session_timeout_ms / 1000 if store is not None else DEFAULT_ZK_TIMEOUT_S
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._rebalance_at = 0.0
        self._stopped = False
        self._last_failure = ""
        # Brokers shutting down (ControlledShutdown): never chosen as leaders, until they
        # register again (a new session).
        self._shutting_down: dict[int, int] = {}  # broker -> czxid of the registration that asked
        # What the last complete reconcile decided from (None: decide every partition next):
        # what every partition's decision shares, and each topic's (cache number, unclean
        # election allowed). A topic that has not changed since need not be decided again.
        self._reconciled: tuple[tuple[object, ...], dict[str, tuple[int, bool]]] | None = None

    @property
    def epoch(self) -> int:
        """The controller epoch this broker won last (-1 before): what its states record."""
        return self.writes.epoch

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self.store.add_view_listener(self._view_changed)
        self._task = asyncio.ensure_future(self._run())
        self._wake.set()

    async def stop(self) -> None:
        """Stop deciding: requests from now on get NOT_CONTROLLER; those in progress finish (or
        time out) first; /controller is given up so another broker takes over at once."""
        self._stopped = True
        self._wake.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            done, _ = await asyncio.wait([self._task], timeout=self._zk_timeout_s + 1)
            if not done:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        try:
            await asyncio.wait_for(self._lock.acquire(), self._zk_timeout_s)
            self._lock.release()
        except TimeoutError:
            log.warning("a controller decision still waits on ZooKeeper; stopping anyway")
        if self.active:
            self.active = False
            try:
                await self._zk(self.writes.release)
            except ControllerError as e:
                log.info("could not give up /controller (%s): it goes with the session", e.message)

    def _view_changed(self, view: CacheView) -> None:
        self._wake.set()

    def _retry_later(self, delay: float = RETRY_S) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, self._wake.set)

    async def _run(self) -> None:
        while not self._stopped:
            await self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            try:
                async with self._lock:
                    complete = await self._step()
            except ControllerError as e:
                if e.message != self._last_failure:  # once per kind of failure, not every retry
                    log.warning("controller step failed: %s; retrying", e.message)
                self._last_failure = e.message
                complete = False
            except Exception:
                log.exception("controller step failed; retrying")
                complete = False
            else:
                self._last_failure = ""
            if not complete and self.active and not self._stopped:
                self._retry_later()

    def _current(self, view: CacheView) -> CacheView:
        """The view to decide from: without the topics this controller has deleted (its watches
        may deliver a deletion's znodes in any order: a deleted topic must not look like a new
        one whose partitions need states)."""
        for name, tid in list(self._gone.items()):
            a = view.topics.get(name)
            if a is None or a.topic_id != tid:
                del self._gone[name]
        if not self._gone:
            return view
        gone = set(self._gone)
        return dataclasses.replace(
            view,
            topics={t: a for t, a in view.topics.items() if t not in gone},
            states={k: c for k, c in view.states.items() if k[0] not in gone},
        )

    async def _step(self) -> bool:
        """One reconcile step; False when something was left undone (retried later)."""
        view = self._current(self.store.view)
        if self.active and view.controller not in (-1, self.node_id):
            # (-1 while active: the watch has not shown our own /controller yet, or our session
            # expired and nobody else has been elected: our epoch is still the newest, and once
            # another broker is elected its epoch fences every write of ours.)
            log.info("broker %d resigns as controller (now %d)", self.node_id, view.controller)
            self.active = False
        if view.controller == self.node_id and not self.active and not self._stopped:
            # ours, yet not acting: an election whose answer came after its timeout (or a previous
            # run of this broker whose session has not expired: ControllerWrites.release leaves that one alone)
            await self._zk(self.writes.release)
            return True
        if view.controller == -1 and not self.active:
            elected = await self._zk(self.writes.elect)
            if elected is None:
                return True
            self.writes.fence(*elected)
            self._sessions, self._written, self._deleted, self._gone = {}, {}, set(), {}
            self._reconciled = None
            self.active = True
            log.info("broker %d is the controller (controller epoch %d)", self.node_id, self.epoch)
            view = self.store.view
        if not self.active:
            return True
        complete = await self._reconcile(view)
        if self.config.auto_leader_rebalance:
            now = time.monotonic()
            if now >= self._rebalance_at:
                self._rebalance_at = now + self.config.imbalance_check_interval_s
                view = self._current(self.store.view)
                pct = self.config.imbalance_per_broker_percentage
                updates = rebalance(view, self._states(view), self._live(view), pct, self.epoch)
                if updates:
                    log.info("preferred leader election for %d partitions", len(updates))
                    complete = not await self._write_states([], updates) and complete
            if complete:
                self._retry_later(max(0.0, self._rebalance_at - time.monotonic()))
        return complete

    # ------------------------------------------------------------- reconcile
    def _live(self, view: CacheView) -> set[int]:
        """Brokers that may lead or join an ISR: registered and not in controlled shutdown."""
        for b, czxid in list(self._shutting_down.items()):
            if view.broker_sessions.get(b) != czxid:
                del self._shutting_down[b]  # gone, or back with a new session
        return set(view.brokers) - set(self._shutting_down)

    def _states(self, view: CacheView) -> dict[Key, CachedState]:
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

    async def _reconcile(self, view: CacheView) -> bool:
        """Bring every partition to what it should be; False when a part was left undone (one
        topic's or partition's failure is logged; the others go on)."""
        live = self._live(view)
        complete = await self._delete_topics(view)
        if view.reassigning:  # /admin/reassign_partitions, as Kafka's ZooKeeper tools write it
            try:
                await self._alter_reassignments(dict(view.reassigning), view)
                await self._zk(self.writes.delete_if_exists, L.REASSIGN_PARTITIONS)
            except ControllerError:
                raise
            except Exception:
                log.exception("applying %s failed; retrying", L.REASSIGN_PARTITIONS)
                complete = False
        states = self._states(view)
        for topic, (assignment, moved) in reassignment_completions(view, states, live, self.epoch).items():
            if await self._write_topic(topic, assignment, view.topic_versions.get(topic, -1), moved):
                log.info("%s: reassignment of %d partitions completed", topic, len(moved))
            else:
                complete = False
        states = self._states(view)
        sessions = view.broker_sessions
        restarted = {b for b, czxid in sessions.items() if self._sessions.get(b, czxid) != czxid}
        lost = {b for b, info in view.brokers.items() if info.may_lack_unflushed}
        # Only the topics changed since the last complete reconcile, while nothing every
        # decision shares has changed: each change would otherwise cost every partition
        shared = (self.epoch, frozenset(live), tuple(sorted(sessions.items())), frozenset(lost), view.deleting)
        previous = self._reconciled[1] if self._reconciled is not None and self._reconciled[0] == shared else None
        self._reconciled = None  # until this one completes
        decided_from: dict[str, tuple[int, bool]] = {}
        creates: list[tuple[str, int, L.PartitionState]] = []
        updates: list[Update] = []
        decided = True
        for topic, a in view.topics.items():
            if topic in view.deleting:
                continue
            try:
                unclean_ok = self._unclean_allowed(view, topic)
                gen = view.topic_gens.get(topic)
                if gen is not None:
                    decided_from[topic] = (gen, unclean_ok)
                    if previous is not None and previous.get(topic) == (gen, unclean_ok) and not restarted:
                        continue
                for p, replicas in sorted(a.partitions.items()):
                    cached = states.get((topic, p))
                    if cached is None:
                        alive = tuple(r for r in replicas if r in live)
                        if alive:
                            epochs = stamp(alive, None, sessions)
                            creates.append((topic, p, L.PartitionState(alive[0], 0, alive, self.epoch, epochs)))
                        continue
                    st = cached.state
                    if st.leader in self._shutting_down and st.leader in view.brokers:
                        continue  # moved by controlled_shutdown (or kept there: no other in-sync replica)
                    new = reconcile_partition(
                        st, replicas, live, sessions, restarted, self.epoch, unclean=unclean_ok, lost=lost
                    )
                    if new is not None:
                        updates.append((topic, p, new, cached.version))
            except Exception:
                log.exception("deciding the partitions of %s failed; retrying", topic)
                decided = False
        refused: dict[Key, ZkOp] = {}
        if creates or updates:
            refused = await self._write_states(creates, updates)
            for topic, p, st, _v in updates:
                if (topic, p) not in refused:
                    log.info(
                        "%s-%d: leader %d, leader epoch %d, isr %s", topic, p, st.leader, st.leader_epoch, list(st.isr)
                    )
        # A restarted broker is acted on once every partition it led or was in sync for got its
        # new state.
        unfinished = (
            restarted
            if not decided
            else {b for k in refused if k in states for b in (states[k].state.leader, *states[k].state.isr)} & restarted
        )
        self._sessions = {
            b: (self._sessions[b] if b in unfinished and b in self._sessions else czxid)
            for b, czxid in view.broker_sessions.items()
        }
        if decided and not refused and not self._shutting_down:
            self._reconciled = (shared, decided_from)
        return complete and decided and not refused

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

    # ------------------------------------------------------------- deletion
    async def _delete_topics(self, view: CacheView) -> bool:
        """Complete each requested deletion that every live broker has dropped from its metadata
        (or whose topic is gone already), once; False when one failed (retried)."""
        self._deleted &= {(t, m.czxid) for t, m in view.deletions.items()}
        complete = True
        for topic in sorted(view.deleting):
            marker = view.deletions.get(topic)
            if marker is None:
                continue  # its znode's watch has not delivered it yet
            if (topic, marker.czxid) in self._deleted:
                continue  # done; the watches have not caught up
            if topic in view.topics and not set(view.brokers) <= marker.dropped_by:
                continue  # a broker still serves it: its drop (a change of the znode) wakes us
            try:
                await self._zk(self.writes.delete_topic, topic, marker.czxid)
            except ControllerError:
                raise
            except Exception:
                log.exception("deleting topic %s failed; retrying", topic)
                complete = False
                continue
            self._deleted.add((topic, marker.czxid))
            if topic in view.topics:
                self._gone[topic] = view.topics[topic].topic_id
            for key in [k for k in self._written if k[0] == topic]:
                del self._written[key]
            log.info("deleted topic %s", topic)
        return complete

    # ---------------------------------------------------------------- requests
    @contextlib.asynccontextmanager
    async def _deciding(self) -> AsyncIterator[CacheView]:
        """Hold the decision lock for a request, as the active controller; yields the view to
        decide from. The request is answered within the ZooKeeper timeout, waiting for the
        lock included (REQUEST_TIMED_OUT past it)."""
        if self._stopped or not self.active:
            raise ControllerError(ErrorCode.not_controller, f"broker {self.node_id} is not the controller")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._zk_timeout_s
        try:
            await asyncio.wait_for(self._lock.acquire(), self._zk_timeout_s)
        except TimeoutError:
            raise ControllerError(
                ErrorCode.request_timed_out, f"the controller is busy for more than {self._zk_timeout_s:.0f} s"
            ) from None
        self._deadline = deadline
        try:
            if self._stopped or not self.active:
                raise ControllerError(ErrorCode.not_controller, f"broker {self.node_id} is no longer the controller")
            yield self._current(self.store.view)
        finally:
            self._deadline = None
            self._lock.release()

    async def alter_partition(
        self, broker: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> list[tuple[int, L.PartitionState | None, int]]:
        """AlterPartition from leader `broker`: per change, (error code, the partition's state
        after, its partition epoch), by Kafka's rules (decisions.check_isr_change); the accepted
        changes are written together. STALE_BROKER_EPOCH (a ControllerError, for the whole
        request) when `broker` is not registered, or `broker_epoch` is not its registration's
        (-1, not sent: not checked)."""
        async with self._deciding() as view:
            session = view.broker_sessions.get(broker)
            if session is None or broker not in view.brokers:
                raise ControllerError(ErrorCode.stale_broker_epoch, f"broker {broker} is not registered")
            if broker_epoch != -1 and broker_epoch != session:
                raise ControllerError(
                    ErrorCode.stale_broker_epoch, f"broker {broker}'s epoch is {session}, not {broker_epoch}"
                )
            states = self._states(view)
            live = self._live(view)
            eligible = {b: e for b, e in view.broker_sessions.items() if b in live}
            results: list[tuple[int, L.PartitionState | None, int]] = []
            updates: list[Update] = []
            written: dict[Key, int] = {}  # partition -> its result's index
            for ch in changes:
                key = (ch.topic, ch.partition)
                a = view.topics.get(ch.topic)
                cached = states.get(key)
                if a is None or cached is None or ch.partition not in a.partitions or ch.topic in view.deleting:
                    results.append((ErrorCode.unknown_topic_or_partition, None, -1))
                    continue
                st, version = cached.state, cached.version
                code = check_isr_change(
                    broker,
                    ch.leader_epoch,
                    ch.partition_epoch,
                    ch.new_isr,
                    ch.isr_epochs,
                    cached,
                    a.partitions[ch.partition],
                    eligible,
                )
                if code:
                    log.info(
                        "%s-%d: isr change to %s refused: %s",
                        ch.topic,
                        ch.partition,
                        list(ch.new_isr),
                        ErrorCode(code).name,
                    )
                if code or ch.new_isr == st.isr or key in written:
                    results.append((code, st, version))
                    continue
                epochs = stamp(ch.new_isr, st, view.broker_sessions)
                new = L.PartitionState(st.leader, st.leader_epoch, ch.new_isr, self.epoch, epochs)
                written[key] = len(results)
                updates.append((ch.topic, ch.partition, new, version))
                results.append((ErrorCode.none, new, version + 1))
            refused = await self._write_states([], updates) if updates else {}
            for key, i in written.items():
                before = states[key]
                if key in refused and (gone := unregistered(refused[key])) >= 0:
                    # its registration went after the view this was decided from: not applied, and
                    # the partition epoch is current (INVALID_UPDATE_VERSION would keep the leader
                    # waiting for a newer state that never comes: Partition.on_alter_partition_response)
                    log.info("%s-%d: isr change refused: broker %d is no longer registered", *key, gone)
                    results[i] = (ErrorCode.ineligible_replica, before.state, before.version)
                elif key in refused:
                    results[i] = (ErrorCode.invalid_update_version, before.state, before.version)
                else:
                    after = results[i][1]
                    assert after is not None
                    log.info(
                        "%s-%d: isr %s -> %s (by leader %d)", *key, list(before.state.isr), list(after.isr), broker
                    )
            return results

    async def controlled_shutdown(self, broker: int, broker_epoch: int = -1) -> list[Key]:
        """Move leadership off a broker that is shutting down, to the next in-sync replica in
        assignment order, and take it out of the ISR of partitions it follows; returns the
        partitions it still leads (no other in-sync replica is alive, or their state changed
        meanwhile: the broker asks again). BROKER_NOT_AVAILABLE for a broker that is not
        registered, STALE_BROKER_EPOCH for an older registration's request (Kafka's rules)."""
        async with self._deciding() as view:
            session = view.broker_sessions.get(broker)
            if session is None or broker not in view.brokers:
                raise ControllerError(ErrorCode.broker_not_available, f"broker {broker} is not registered")
            if broker_epoch != -1 and broker_epoch < session:
                raise ControllerError(
                    ErrorCode.stale_broker_epoch, f"broker {broker}'s epoch is {session}, not {broker_epoch}"
                )
            self._shutting_down[broker] = session
            updates, remaining = controlled_shutdown_moves(
                view, self._states(view), broker, self._live(view), self.epoch
            )
            refused = await self._write_states([], updates) if updates else {}
            remaining = sorted(set(remaining) | set(refused))
            log.info(
                "controlled shutdown of broker %d: %d partitions moved, %d remain",
                broker,
                len(updates) - len(refused),
                len(remaining),
            )
            return remaining

    async def elect_leaders(self, unclean: bool, partitions: Iterable[Key] | None) -> dict[Key, tuple[int, str | None]]:
        """ElectLeaders: per partition (all when None), an error code and message. Preferred: the
        first replica, when alive and in sync (ELECTION_NOT_NEEDED when it leads already,
        PREFERRED_LEADER_NOT_AVAILABLE when it cannot); unclean: a leaderless partition gets its
        first live replica even if out of sync (ELECTION_NOT_NEEDED when it has a leader,
        ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica lives). When the controller cannot
        decide now, every partition gets that error (NOT_CONTROLLER, REQUEST_TIMED_OUT)."""
        wanted = list(partitions) if partitions is not None else None
        try:
            async with self._deciding() as view:
                return await self._elect_leaders(view, unclean, wanted)
        except ControllerError as e:
            everything = (
                wanted
                if wanted is not None
                else [(t, p) for t, a in self.store.view.topics.items() for p in a.partitions]
            )
            return dict.fromkeys(everything, (e.error_code, e.message))

    async def _elect_leaders(
        self, view: CacheView, unclean: bool, wanted: list[Key] | None
    ) -> dict[Key, tuple[int, str | None]]:
        states = self._states(view)
        live = self._live(view)
        if wanted is None:
            wanted = [(t, p) for t, a in view.topics.items() for p in a.partitions]
        out: dict[Key, tuple[int, str | None]] = {}
        updates: list[Update] = []
        for topic, p in wanted:
            a = view.topics.get(topic)
            cached = states.get((topic, p))
            if a is None or p not in a.partitions or cached is None or topic in view.deleting:
                out[(topic, p)] = (ErrorCode.unknown_topic_or_partition, "unknown partition")
                continue
            st, replicas = cached.state, a.partitions[p]
            if unclean:
                code, message, new = unclean_election(st, replicas, live, view.broker_sessions, self.epoch)
            elif st.leader == replicas[0]:
                code, message, new = ErrorCode.election_not_needed, "already led by its preferred replica", None
            elif (new := preferred_election(st, replicas, live, view.broker_sessions, self.epoch)) is None:
                code, message = ErrorCode.preferred_leader_not_available, "preferred replica not alive and in sync"
                log.info(
                    "%s-%d: preferred replica %d may not lead: live %s, isr %s admitted with %s, registrations %s",
                    topic,
                    p,
                    replicas[0],
                    replicas[0] in live,
                    list(st.isr),
                    list(st.isr_epochs or ()),
                    {b: view.broker_sessions.get(b, -1) for b in (replicas[0], *st.isr)},
                )
            else:
                code, message = ErrorCode.none, None
            if new is not None:
                updates.append((topic, p, new, cached.version))
            out[(topic, p)] = (code, message)
        for key in await self._write_states([], updates) if updates else ():
            out[key] = (ErrorCode.unknown_server_error, "the partition's state changed meanwhile; try again")
        return out

    # --------------------------------------------------------- reassignment
    async def alter_reassignments(self, moves: dict[Key, tuple[int, ...] | None]) -> dict[Key, tuple[int, str | None]]:
        """AlterPartitionReassignments: move each partition to its target replicas (None cancels a
        reassignment in progress; decisions.plan_reassignments). Once every target replica is in
        the ISR, the reassignment completes (decisions.reassignment_completions): a target
        replica leads, the others go. When the controller cannot decide now, every partition
        gets that error (NOT_CONTROLLER, REQUEST_TIMED_OUT)."""
        try:
            async with self._deciding() as view:
                return await self._alter_reassignments(moves, view)
        except ControllerError as e:
            return dict.fromkeys(moves, (e.error_code, e.message))

    async def _alter_reassignments(
        self, moves: dict[Key, tuple[int, ...] | None], view: CacheView
    ) -> dict[Key, tuple[int, str | None]]:
        out, assignments = plan_reassignments(view, moves)
        for topic, assignment in assignments.items():
            if not await self._write_topic(topic, assignment, view.topic_versions.get(topic, -1), []):
                for key in out:
                    if key[0] == topic and out[key][0] == ErrorCode.none:
                        out[key] = (
                            ErrorCode.unknown_server_error,
                            f"{topic}'s assignment changed meanwhile; try again",
                        )
        return out

    # --------------------------------------------------------- zookeeper ops
    async def _zk(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` (blocking ZooKeeper calls) in a thread, for at most the session timeout: past
        it, when the session is gone, or while disconnected from ZooKeeper, a ControllerError.
        The thread's writes reach this controller's state only through what `fn` returns, so
        one that ZooKeeper commits after the timeout is learnt from the watches like any other
        change."""
        if not self.zk.connected:
            # kazoo queues a call made while it reconnects until it is connected again or closed:
            # threads left waiting would pile up (and starve the ones shutting the broker down)
            raise ControllerError(ErrorCode.request_timed_out, "not connected to ZooKeeper")
        timeout = self._zk_timeout_s
        if self._deadline is not None:  # a request's: answered in time
            timeout = max(0.0, min(timeout, self._deadline - asyncio.get_running_loop().time()))
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout)
        except Deposed as e:
            log.warning("broker %d is no longer the controller: %s", self.node_id, e)
            self.active = False
            raise ControllerError(ErrorCode.not_controller, str(e)) from None
        except TimeoutError:
            raise ControllerError(
                ErrorCode.request_timed_out, f"ZooKeeper did not answer within {timeout:.1f} s"
            ) from None
        except (SessionExpiredError, ConnectionClosedError) as e:
            raise ControllerError(ErrorCode.not_controller, f"the ZooKeeper session is gone: {e!r}") from None
        except (ConnectionLoss, OperationTimeoutError) as e:
            raise ControllerError(ErrorCode.request_timed_out, f"ZooKeeper: {e!r}") from None
        # (any other error of ZooKeeper's is a state this controller did not expect: it goes up as it is)

    async def _write_states(
        self, creates: list[tuple[str, int, L.PartitionState]], updates: list[Update]
    ) -> dict[Key, ZkOp]:
        """Write new and changed partition states, each partition on its own: returns the
        partitions ZooKeeper refused, each with the op it refused (their state changed
        meanwhile, or a registration its ISR names is gone: decided again from the newer
        view), remembers the others as written."""
        refused = await self._zk(self.writes.write_states, creates, updates)
        for topic, p, st in creates:
            if (topic, p) not in refused:
                self._written[(topic, p)] = CachedState(st, 0)
        for topic, p, st, version in updates:
            if (topic, p) not in refused:
                self._written[(topic, p)] = CachedState(st, version + 1)
        if refused:
            log.info("partition states changed meanwhile, deciding again: %s", sorted(refused))
        return refused

    async def _write_topic(
        self, topic: str, assignment: L.TopicAssignment, version: int, updates: list[Update]
    ) -> bool:
        """Write a topic's assignment and some of its partition states together; False when
        ZooKeeper refused (the topic changed meanwhile)."""
        if not await self._zk(self.writes.write_topic, topic, assignment, version, updates):
            log.info("%s changed meanwhile; deciding again", topic)
            return False
        for t, p, st, v in updates:
            self._written[(t, p)] = CachedState(st, v + 1)
        return True
