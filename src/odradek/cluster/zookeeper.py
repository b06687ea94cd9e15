"""The ZooKeeper metadata store: cluster mode's `MetadataStore`, in Kafka's ZooKeeper layout.

Reads come from a watched cache (zk_cache.py); every change to it becomes one new
snapshot, published as a `MetadataDelta` to the listeners (the replica manager: logs,
leadership; the controller gets the raw view too). Writes are the admin side of Kafka's
ZooKeeper mode: a new topic is its assignment znode (the controller then elects leaders and
writes each partition's state), configs are /config/topics/<topic> and
/config/brokers/<id|<default>> with a change notification. A write returns once this
broker's snapshot shows its effect (a new topic with a leader for every partition), or
raises `MetadataTimeout`.

A deletion is a request under /admin/delete_topics, as in Kafka, in two steps:
- from the moment a topic's deletion is requested every broker leaves it out of its
  metadata (Kafka's brokers drop it when the controller starts the deletion) and stops its
  replicas (the replica manager deletes its logs), then adds its id to the request's
  `dropped_by`; creating a topic of that name (CreateTopics, or Metadata's auto-creation) is
  refused meanwhile ("marked for deletion", as Kafka does);
- once every live broker has dropped it, the controller removes the topic's znodes, its
  config and the request.
DeleteTopics returns once every live broker has dropped the topic (this broker's view of
the request shows it), or raises `MetadataTimeout`.

The broker's registration is the ephemeral /brokers/ids/<id>. One left by a previous run of
the same broker (killed, or back from a power cut, its session not yet expired) is ended
first thing at start when it names this broker's log directories
(`end_previous_registration`), and the new one is made once the controller has fenced that
run's broker epoch; one that does not name them (Kafka's, an older odradek's) is waited for
until it expires. A registration lost with an expired session is made again when ZooKeeper
is back, tried again until it is made.

kazoo calls block; they run in worker threads (`asyncio.to_thread`), never on the loop. A write
of the admin side (topics, configs, producer id blocks) that ZooKeeper's session or connection
fails under raises `MetadataUnavailable`, which handlers answer with an error code (kazoo's own
exceptions closed the client's connection: simulator seed 5964, IncrementalAlterConfigs on a
broker whose session had just expired).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)

from odradek.cluster import zk_client
from odradek.cluster import zk_layout as L
from odradek.cluster.metadata import (
    EMPTY_SNAPSHOT,
    BrokerInfo,
    ClusterSnapshot,
    MetadataDelta,
    PartitionInfo,
    TopicInfo,
)
from odradek.cluster.store import (
    MetadataError,
    MetadataListener,
    MetadataTimeout,
    MetadataUnavailable,
    TopicExistsError,
    UnknownTopicError,
)
from odradek.cluster.zk_cache import CacheView, ZkCache
from odradek.cluster.zk_cache_reads import DEFAULT_MAX_IN_FLIGHT

log = logging.getLogger("odradek.cluster.zk")

REREGISTER_RETRY_S = 0.5  # a registration lost with its session is tried again this often until made
# what kazoo raises when the session or the connection fails under a call
_UNREACHABLE = (SessionExpiredError, ConnectionClosedError, ConnectionLoss, OperationTimeoutError)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BuiltTopic:
    """A topic as `build_snapshot` made it, and what it made it from."""

    gen: int  # the view's topic_gens
    live: frozenset[int]  # the registered brokers (its partitions' offline replicas)
    info: TopicInfo


def build_snapshot(
    view: CacheView,
    dropped: Mapping[str, uuid.UUID] | None = None,
    own: tuple[int, int] | None = None,
    built: dict[str, BuiltTopic] | None = None,
) -> ClusterSnapshot:
    """The cluster as the cache shows it. A partition the controller has not given a state yet
    has no leader (-1); a topic being deleted is left out, and so is one of `dropped` (topic
    name -> the id of a topic seen being deleted: its znodes may still be in the view after its
    deletion request is gone). `own`: (this broker's id, the epoch of the registration it
    created, -1 before): a registration of its id with another epoch is a previous run's, and
    its epoch is not this broker's (-1: a restarted broker leads no state given to that one).

    `built`: the topics of the previous call (updated in place): a topic whose assignment and
    partition states have not changed since (the view's `topic_gens`), with the same live
    brokers and configs, is that call's `TopicInfo` again, the same object. A change then costs
    the topics it touched, not every partition of the cluster, and so do the comparisons that
    follow (the snapshots', `MetadataDelta.changed_partitions`)."""
    live = frozenset(view.brokers)
    topics: dict[str, TopicInfo] = {}
    for name, assignment in view.topics.items():
        if name in view.deleting or (dropped is not None and dropped.get(name) == assignment.topic_id):
            continue
        configs = view.topic_configs.get(name, {})
        gen = view.topic_gens.get(name)
        if built is not None and gen is not None:
            prev = built.get(name)
            if prev is not None and prev.gen == gen and prev.live == live and prev.info.configs == configs:
                topics[name] = prev.info
                continue
        parts = []
        for p in range(len(assignment.partitions)):
            replicas = assignment.partitions.get(p, ())
            offline = tuple(r for r in replicas if r not in live)
            cached = view.states.get((name, p))
            if cached is None:
                parts.append(PartitionInfo(p, -1, replicas, (), -1, offline, -1))
            else:
                st = cached.state
                parts.append(
                    PartitionInfo(
                        p, st.leader, replicas, st.isr, st.leader_epoch, offline, cached.version, st.isr_epochs
                    )
                )
        topics[name] = TopicInfo(name, assignment.topic_id, tuple(parts), dict(configs))
        if built is not None and gen is not None:
            built[name] = BuiltTopic(gen, live, topics[name])
    if built is not None:
        for name in [n for n in built if n not in topics]:
            del built[name]
    epochs = dict(view.broker_sessions)
    if own is not None and own[0] in epochs and epochs[own[0]] != own[1]:
        epochs[own[0]] = -1
    brokers = tuple(replace(view.brokers[b], epoch=epochs.get(b, -1)) for b in sorted(view.brokers))
    broker_configs = {entity: dict(c) for entity, c in view.broker_configs.items() if c}
    user_configs = {user: dict(c) for user, c in view.user_configs.items() if c}
    client_configs = {client: dict(c) for client, c in view.client_configs.items() if c}
    user_client_configs = {uc: dict(c) for uc, c in view.user_client_configs.items() if c}
    return ClusterSnapshot(
        view.cluster_id,
        view.controller,
        brokers,
        topics,
        broker_configs,
        user_configs,
        client_configs,
        user_client_configs,
    )


def previous_run_fenced(view: CacheView, node_id: int, epoch: int) -> bool:
    """Whether the registration of broker `node_id`'s previous run (broker epoch `epoch`) is out
    of every partition state the controller acts on: no partition led by it, none with a leader
    whose ISR admitted it with that epoch (or with an unrecorded one). A leaderless partition
    keeps its last ISR, as Kafka's: not waited for."""
    for cached in view.states.values():
        st = cached.state
        if st.leader == node_id:
            return False
        if st.leader >= 0 and node_id in st.isr and st.admitted_epoch(node_id) in (epoch, -1):
            return False
    return True


class ZooKeeperMetadataStore:
    def __init__(
        self,
        zk: KazooClient,
        node_id: int,
        *,
        listener: str = "PLAINTEXT",
        protocols: Mapping[str, str] | None = None,
        session_timeout_ms: int = 18000,
        wait_timeout_s: float = 30.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self.zk = zk
        self.node_id = node_id
        self.listener = listener
        self.protocols = dict(protocols or {})  # listener name -> security protocol, for the registration
        self.session_timeout_ms = session_timeout_ms
        self.wait_timeout_s = wait_timeout_s
        self.cache = ZkCache(zk, node_id, listener, self._cache_changed, max_in_flight)
        self._snapshot = EMPTY_SNAPSHOT
        self._view = CacheView()
        self._built: dict[str, BuiltTopic] = {}  # build_snapshot's topics, reused while unchanged
        self._listeners: list[MetadataListener] = []
        self._view_listeners: list[Callable[[CacheView], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._dirty = False
        self._publisher: asyncio.Task[None] | None = None
        self._published = asyncio.Condition()
        self._registration: BrokerInfo | None = None
        self._epoch = -1  # the czxid of the registration this store created (its broker epoch), -1 before
        self._previous_epoch = -1  # the previous run's, while this run waits for it to be fenced
        self._session_lost = False
        self._reregistering: asyncio.Task[None] | None = None
        self._starting_again: asyncio.Task[None] | None = None  # a new session after kazoo's thread ended
        self._dropping: set[tuple[str, int]] = set()  # deletion requests being acknowledged
        self._dropped: dict[str, uuid.UUID] = {}  # topics seen being deleted, until their znodes go
        self._acks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ reads
    @property
    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    @property
    def view(self) -> CacheView:
        """The raw cache behind the newest snapshot (brokers' sessions, deletions, epochs)."""
        return self._view

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)

    def add_view_listener(self, callback: Callable[[CacheView], None]) -> None:
        """Called on the loop with every new cache view, after the listeners (the controller)."""
        self._view_listeners.append(callback)

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.zk.add_listener(self._session_state)
        await asyncio.to_thread(self.cache.start)
        self._started = True
        await self._publish_once()

    async def stop(self) -> None:
        self._started = False
        for task in (self._reregistering, self._starting_again):
            if task is not None:
                task.cancel()
        self.cache.stop()
        self.zk.remove_listener(self._session_state)
        if self._publisher is not None:
            self._publisher.cancel()
            await asyncio.gather(self._publisher, return_exceptions=True)
        for task in list(self._acks):
            task.cancel()
        await asyncio.gather(*self._acks, return_exceptions=True)
        self._listeners.clear()
        self._view_listeners.clear()

    def _cache_changed(self) -> None:  # kazoo's thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._mark_dirty)

    def _mark_dirty(self) -> None:
        self._dirty = True
        if self._started and (self._publisher is None or self._publisher.done()):
            self._publisher = asyncio.ensure_future(self._publish_loop())

    async def _publish_loop(self) -> None:
        while self._dirty and self._started:
            await asyncio.sleep(0)  # let a burst of watch events coalesce into one snapshot
            await self._publish_once()

    async def _publish_once(self) -> None:
        self._dirty = False
        view = self.cache.view()
        for name in list(self._dropped):
            if (a := view.topics.get(name)) is None or a.topic_id != self._dropped[name]:
                del self._dropped[name]
        for name in view.deleting:
            if (a := view.topics.get(name)) is not None:
                self._dropped[name] = a.topic_id
        after = build_snapshot(view, self._dropped, (self.node_id, self._epoch), self._built)
        before = self._snapshot
        self._view = view
        if after != before:
            self._snapshot = after
            for listener in list(self._listeners):
                try:
                    await listener.on_metadata(MetadataDelta(before, after))
                except Exception:
                    log.exception("metadata listener %s failed", type(listener).__name__)
        for callback in list(self._view_listeners):
            try:
                callback(view)
            except Exception:
                log.exception("metadata view listener failed")
        self._acknowledge_deletions(view)
        async with self._published:
            self._published.notify_all()

    async def wait_for(
        self, condition: Callable[[ClusterSnapshot], bool], what: str, timeout_s: float | None = None
    ) -> None:
        """Until this broker's snapshot satisfies `condition` (MetadataTimeout after `timeout_s`,
        by default wait_timeout_s)."""
        await self._wait(lambda: condition(self._snapshot), what, timeout_s)

    async def wait_for_view(
        self, condition: Callable[[CacheView], bool], what: str, timeout_s: float | None = None
    ) -> None:
        """Until this broker's cache view satisfies `condition` (as `wait_for`)."""
        await self._wait(lambda: condition(self._view), what, timeout_s)

    async def _wait(self, done: Callable[[], bool], what: str, timeout_s: float | None) -> None:
        timeout = self.wait_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        async with self._published:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MetadataTimeout(f"timed out after {timeout:.1f} s waiting for {what}")
                try:
                    await asyncio.wait_for(self._published.wait(), left)
                except TimeoutError:
                    pass

    # ---------------------------------------------------------- registration
    async def register_broker(self, broker: BrokerInfo) -> None:
        if broker.node_id != self.node_id:
            raise MetadataError(f"this store belongs to broker {self.node_id}, not {broker.node_id}")
        self._registration = broker
        await self._register(broker)
        await self.wait_for(  # the snapshot's copy carries the registration's epoch (its czxid)
            lambda s: (b := s.broker(self.node_id)) is not None and replace(b, epoch=broker.epoch) == broker,
            f"broker {self.node_id}'s registration",
        )

    async def end_previous_registration(self, directory_ids: Sequence[str]) -> int:
        """Called first thing at start, before this broker follows or leads anything: when
        /brokers/ids/<id> is still there from this broker's previous run (killed, or back from
        a power cut, its session not yet expired), delete it. Recognised by the log
        directories it names (`directory_ids`): only a process holding these directories made
        it, and this one holds them now. Until that session expired the controller would
        count the previous run as live and in sync, with whatever log this run found (after a
        power cut, without its unflushed tail); deleted, the controller fails that broker
        epoch at once (out of every ISR, its leadership moved), and the controller's writes
        check that every ISR member they name is still registered (controller_writes.py), so none
        admits the previous run after this. Its /controller, if it was the controller, goes
        too (the controller epoch fences that run's writes). Returns the ended registration's
        broker epoch, -1 when there was none (or it was not this broker's: left alone)."""
        if not directory_ids:
            return -1
        ended = await asyncio.to_thread(self._end_previous, set(directory_ids))
        if ended != -1:
            self._previous_epoch = ended
            log.warning(
                "ended the registration of broker %d's previous run (broker epoch %d): its session had not "
                "expired; the controller fails that epoch before this run registers",
                self.node_id,
                ended,
            )
        return ended

    def _end_previous(self, directory_ids: set[str]) -> int:
        path = L.broker_path(self.node_id)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return -1
        if stat.ephemeralOwner == self.zk.client_id[0]:
            return -1
        try:
            previous = L.decode_broker(self.node_id, data, self.listener)
        except L.LayoutError:
            return -1
        if not directory_ids & set(previous.directory_ids):
            return -1  # not made by a process with these directories: waited for (_register)
        try:
            data, cstat = self.zk.get(L.CONTROLLER)
            if L.decode_controller(data) == self.node_id and cstat.ephemeralOwner == stat.ephemeralOwner:
                self.zk.delete(L.CONTROLLER, version=cstat.version)
        except (NoNodeError, BadVersionError, L.LayoutError):
            pass
        try:
            self.zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass  # expired meanwhile: the controller sees it go all the same
        return int(stat.czxid)

    async def _register(self, broker: BrokerInfo) -> None:
        """Create the registration, waiting on the loop (no thread sleeps) for one left by a
        previous run of this broker to expire, or, where this run ended it
        (`end_previous_registration`), for the controller to fail its broker epoch: a new
        registration only once the previous one is fenced, as KRaft's controller accepts one
        (within the session timeout: a previous session has expired by then in any case)."""
        if self._previous_epoch != -1:
            try:
                fenced = functools.partial(previous_run_fenced, node_id=self.node_id, epoch=self._previous_epoch)
                await self.wait_for_view(fenced, "the previous run fenced", self.session_timeout_ms / 1000)
            except MetadataTimeout:
                log.info("broker %d's previous run is not fenced yet; registering anyway", broker.node_id)
            self._previous_epoch = -1
        deadline = time.monotonic() + self.session_timeout_ms / 1000 + 10
        while not await asyncio.to_thread(self._try_register, broker, deadline):
            log.info("waiting for the previous registration of broker %d to expire", broker.node_id)
            await asyncio.sleep(0.5)
        self._mark_dirty()  # this broker's epoch is known: the snapshot shows it

    def _try_register(self, broker: BrokerInfo, deadline: float) -> bool:
        """True once registered; False while another session's registration is there."""
        path = L.broker_path(broker.node_id)
        while True:
            try:
                data = L.encode_broker(broker, self.listener, self.protocols)
                self.zk.create(path, data, ephemeral=True, makepath=True)
                stat = self.zk.exists(path)
                if stat is None or stat.ephemeralOwner != self.zk.client_id[0]:
                    continue  # gone at once (this session expired): again
                self._epoch = stat.czxid
                log.info("registered broker %d at %s:%d in ZooKeeper", broker.node_id, broker.host, broker.port)
                return True
            except NodeExistsError:
                try:
                    _data, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    self.zk.set(path, L.encode_broker(broker, self.listener, self.protocols))
                    self._epoch = stat.czxid
                    return True
                if time.monotonic() > deadline:
                    raise MetadataError(
                        f"broker id {broker.node_id} is registered in ZooKeeper by another live broker "
                        f"(session 0x{stat.ephemeralOwner:x}): two brokers cannot share broker.id"
                    ) from None
                return False

    def _session_state(self, state: KazooState) -> None:  # kazoo's thread
        if state == KazooState.LOST:
            self._session_lost = True
            self._epoch = -1
            log.warning("ZooKeeper session expired: the ephemeral registration of broker %d is gone", self.node_id)
            if zk_client.connection_ended(self.zk):
                log.error(
                    "broker %d's ZooKeeper connection thread ended (kazoo connects no more): starting a new session",
                    self.node_id,
                )
                loop = self._loop
                if loop is not None and not loop.is_closed():
                    loop.call_soon_threadsafe(self._start_again)
        elif state == KazooState.CONNECTED and self._session_lost and self._registration is not None:
            self._session_lost = False
            loop = self._loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._reregister, self._registration)

    def _start_again(self) -> None:
        if self._started and (self._starting_again is None or self._starting_again.done()):
            self._starting_again = asyncio.ensure_future(self._start_again_until_done())

    async def _start_again_until_done(self) -> None:
        """Start the client again with a new session, until it is done (Kafka's ZooKeeperClient
        makes a new ZooKeeper client whenever its session is no longer alive, retrying until
        one is made). Its CONNECTED registers this broker again (`_session_state`)."""
        while self._started:
            try:
                await asyncio.to_thread(zk_client.start_again, self.zk, self.session_timeout_ms)
                log.warning("broker %d has a new ZooKeeper session (0x%x)", self.node_id, self.zk.client_id[0])
                return
            except Exception as e:  # noqa: BLE001 - retried: a broker must not run on without ZooKeeper
                log.warning(
                    "starting broker %d's ZooKeeper client again failed: %r; trying again in %.1f s",
                    self.node_id,
                    e,
                    REREGISTER_RETRY_S,
                )
            await asyncio.sleep(REREGISTER_RETRY_S)

    def _reregister(self, broker: BrokerInfo) -> None:
        """Register again after the session expired, until it is done: an attempt that fails
        (a dropped connection, ConnectionLoss, under load) is not asked for again by kazoo,
        which reconnects with the same session (no new LOST). A later session's loss starts
        another, which replaces this one."""
        if self._reregistering is not None:
            self._reregistering.cancel()
        self._reregistering = asyncio.ensure_future(self._register_until_done(broker))

    async def _register_until_done(self, broker: BrokerInfo) -> None:
        while self._started:
            try:
                await self._register(broker)
                return
            except Exception as e:  # noqa: BLE001 - retried: a broker must not run on unregistered
                log.warning(
                    "re-registering broker %d failed: %r; trying again in %.1f s", broker.node_id, e, REREGISTER_RETRY_S
                )
            await asyncio.sleep(REREGISTER_RETRY_S)

    # ------------------------------------------------------------------ topics
    async def _admin_write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` (blocking ZooKeeper calls) in a thread; a session or connection that fails
        under it is `MetadataUnavailable` (what it did, if anything, reaches this broker through
        the watches like any other change)."""
        try:
            return await asyncio.to_thread(fn, *args)
        except _UNREACHABLE as e:
            raise MetadataUnavailable(f"ZooKeeper unavailable: {type(e).__name__}") from e

    async def create_topic(
        self,
        name: str,
        assignment: Sequence[Sequence[int]],
        configs: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        tid = topic_id or uuid.uuid4()
        replicas = {p: tuple(r) for p, r in enumerate(assignment)}
        data = L.encode_topic(L.TopicAssignment(tid, replicas, {}, {}))
        await self._admin_write(self._create_topic, name, data, dict(configs))
        await self.wait_for(
            lambda s: (
                (t := s.topics.get(name)) is not None and t.topic_id == tid and all(p.leader >= 0 for p in t.partitions)
            ),
            f"leaders of the new topic {name}",
        )
        return self._snapshot.topics[name]

    def _create_topic(self, name: str, data: bytes, configs: dict[str, str]) -> None:
        if self.zk.exists(L.delete_topic_path(name)):  # checked first, as Kafka's AdminZkClient does
            raise TopicExistsError(f"Topic '{name}' is marked for deletion.")
        if self.zk.exists(L.topic_path(name)):
            raise TopicExistsError(f"Topic '{name}' already exists.")
        self._set_or_create(L.topic_config_path(name), L.encode_config(configs))
        try:
            self.zk.create(L.topic_path(name), data, makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{name}' already exists.") from None

    async def delete_topic(self, name: str, timeout_s: float | None = None) -> TopicInfo:
        info = self._snapshot.topics.get(name)
        if info is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        try:
            await self._admin_write(functools.partial(self.zk.create, makepath=True), L.delete_topic_path(name), b"")
        except NodeExistsError:
            pass  # already requested

        def dropped_everywhere(v: CacheView) -> bool:
            t = v.topics.get(name)
            if t is None or t.topic_id != info.topic_id:
                return True  # deleted (and maybe created again)
            request = v.deletions.get(name)
            return request is not None and set(v.brokers) <= request.dropped_by

        await self.wait_for_view(dropped_everywhere, f"every broker to drop topic {name}", timeout_s)
        return info

    def _acknowledge_deletions(self, view: CacheView) -> None:
        """Say, in each deletion request this broker's published snapshot has applied, that this
        broker has dropped the topic (the controller completes the deletion once every live
        broker has). Retried while ZooKeeper refuses."""
        for topic in view.deleting:
            request = view.deletions.get(topic)
            if request is None or self.node_id in request.dropped_by or (topic, request.czxid) in self._dropping:
                continue
            self._dropping.add((topic, request.czxid))
            task = asyncio.ensure_future(self._acknowledge(topic, request.czxid))
            self._acks.add(task)
            task.add_done_callback(self._acks.discard)

    async def _acknowledge(self, topic: str, czxid: int) -> None:
        try:
            if not self.zk.connected:  # (a call now would wait for the connection in a thread)
                raise ConnectionError("not connected to ZooKeeper")
            await asyncio.to_thread(self._add_dropped_by, topic, czxid)
        except Exception as e:  # noqa: BLE001 - ZooKeeper away: published again, and acknowledged then
            log.info("acknowledging the deletion of %s failed: %r; retrying", topic, e)
            if self._loop is not None and self._started:
                self._loop.call_later(0.5, self._mark_dirty)
        finally:
            self._dropping.discard((topic, czxid))

    def _add_dropped_by(self, topic: str, czxid: int) -> None:
        path = L.delete_topic_path(topic)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return  # completed
            if stat.czxid != czxid:
                return  # another request: acknowledged on its own
            dropped_by = L.decode_deletion(topic, data)
            if self.node_id in dropped_by:
                return
            try:
                self.zk.set(path, L.encode_deletion(dropped_by | {self.node_id}), version=stat.version)
                return
            except BadVersionError:
                continue  # another broker's acknowledgement came first
            except NoNodeError:
                return

    async def create_partitions(self, name: str, new_assignment: Sequence[Sequence[int]]) -> TopicInfo:
        total = await self._admin_write(self._add_partitions, name, new_assignment)
        await self.wait_for(
            lambda s: (
                (t := s.topics.get(name)) is not None
                and len(t.partitions) >= total
                and all(p.leader >= 0 for p in t.partitions)
            ),
            f"leaders of the new partitions of {name}",
        )
        return self._snapshot.topics[name]

    def _add_partitions(self, name: str, new_assignment: Sequence[Sequence[int]]) -> int:
        while True:
            try:
                data, stat = self.zk.get(L.topic_path(name))
            except NoNodeError:
                raise UnknownTopicError(f"Topic '{name}' does not exist.") from None
            current = L.decode_topic(name, data)
            partitions = dict(current.partitions)
            for replicas in new_assignment:
                partitions[len(partitions)] = tuple(replicas)
            updated = L.TopicAssignment(current.topic_id, partitions, current.adding, current.removing)
            try:
                self.zk.set(L.topic_path(name), L.encode_topic(updated), version=stat.version)
                return len(partitions)
            except BadVersionError:
                continue  # changed meanwhile: read again

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        if name not in self._snapshot.topics:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        wanted = dict(configs)
        await self._admin_write(self._write_config, L.topic_config_path(name), wanted, f"topics/{name}")
        await self.wait_for(
            lambda s: (t := s.topics.get(name)) is None or t.configs == wanted, f"the new configs of {name}"
        )
        return self._snapshot.topics[name]

    async def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Dynamic broker settings of one broker (its id) or of all (`<default>`), persisted."""
        wanted = dict(configs)
        await self._admin_write(self._write_config, L.broker_config_path(entity), wanted, f"brokers/{entity}")
        if entity in (L.DEFAULT_BROKER, str(self.node_id)):  # the ones this broker watches
            await self.wait_for(
                lambda s: s.broker_configs.get(entity, {}) == wanted, f"the new dynamic settings of {entity}"
            )

    async def set_user_configs(self, user: str | None, configs: Mapping[str, str]) -> None:
        wanted = dict(configs)
        path = L.user_config_path(user)
        await self._admin_write(self._write_config, path, wanted, path[len("/config/") :])
        await self.wait_for(lambda s: s.user_configs.get(user, {}) == wanted, f"the new settings of user {user}")

    async def set_client_configs(self, client_id: str | None, configs: Mapping[str, str]) -> None:
        wanted = dict(configs)
        path = L.client_config_path(client_id)
        await self._admin_write(self._write_config, path, wanted, path[len("/config/") :])
        await self.wait_for(
            lambda s: s.client_configs.get(client_id, {}) == wanted, f"the new settings of client {client_id}"
        )

    async def set_user_client_configs(
        self, user: str | None, client_id: str | None, configs: Mapping[str, str]
    ) -> None:
        wanted = dict(configs)
        path = L.user_client_config_path(user, client_id)
        await self._admin_write(self._write_config, path, wanted, path[len("/config/") :])
        await self.wait_for(
            lambda s: s.user_client_configs.get((user, client_id), {}) == wanted,
            f"the new settings of user {user}'s client {client_id}",
        )

    def _write_config(self, path: str, configs: dict[str, str], entity_path: str) -> None:
        self._set_or_create(path, L.encode_config(configs))
        self.zk.create(L.CONFIG_CHANGE_PREFIX, L.encode_config_change(entity_path), sequence=True, makepath=True)

    # ------------------------------------------------------------ producer ids
    async def next_producer_id_block(self, size: int) -> int:
        """Claim the next block of producer ids for the whole cluster (Kafka's ZooKeeper-mode
        ProducerIdManager): the first id of a block of `size` nobody else will get."""
        return await self._admin_write(self._claim_block, size)

    def _claim_block(self, size: int) -> int:
        while True:
            try:
                data, stat = self.zk.get(L.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.zk.create(L.PRODUCER_ID_BLOCK, b"", makepath=True)
                except NodeExistsError:
                    pass
                continue
            last = L.decode_producer_id_block(data)
            start = last[1] + 1 if last is not None else 0
            try:
                self.zk.set(
                    L.PRODUCER_ID_BLOCK,
                    L.encode_producer_id_block(self.node_id, start, start + size - 1),
                    version=stat.version,
                )
                return start
            except BadVersionError:
                continue  # another broker claimed one meanwhile

    def _set_or_create(self, path: str, data: bytes) -> None:
        try:
            self.zk.set(path, data)
        except NoNodeError:
            try:
                self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                self.zk.set(path, data)


def describe(view: CacheView) -> dict[str, Any]:
    """A plain summary of a cache view (for logs and `odradek cluster status`)."""
    return {
        "cluster_id": view.cluster_id,
        "controller": view.controller,
        "controller_epoch": view.controller_epoch,
        "brokers": sorted(view.brokers),
        "topics": len(view.topics),
    }
