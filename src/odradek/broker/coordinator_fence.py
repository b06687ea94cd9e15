"""A broker cut from ZooKeeper stops acting as group and transaction coordinator.

Once its ZooKeeper session has expired, the controller holds the broker dead and gives the
partitions it led, `__consumer_offsets` and `__transaction_state` among them, to other
replicas; their new coordinators acknowledge commits the cut broker never sees. A cut broker
learns nothing of it until it reaches ZooKeeper again (kazoo reports LOST only then), and
answering OffsetFetch from its old shards meanwhile tells a member an offset below one
already acknowledged (the simulator's `commit-backwards`). So this guard fences the
coordinators (`fence`: shards unloaded, NOT_COORDINATOR, clients look for the coordinator
again):

- at once when kazoo reports the session LOST (expired);
- when the connection has been SUSPENDED for a sixth of `zookeeper.session.timeout.ms`, on
  the event loop's monotonic clock. kazoo suspends at the latest two thirds of the timeout
  after ZooKeeper last answered (its read timeout: a ping unanswered), earlier when the
  socket fails; so the fence comes at the latest five sixths of the timeout after the last
  answer, before ZooKeeper may expire the session (the timeout after it last heard from the
  broker, which is no later than its last answer) and so before the controller can elect
  another leader. The sixth to spare covers latency and clocks that run at slightly
  different rates. A cut shorter than a sixth of the timeout never fences; a longer one may
  (when the socket fails at once kazoo suspends at once), and the broker acts again as soon
  as it is back with the same session.

It lifts the fence (`unfence`: a shard elected, and loaded, for every partition the broker
leads by then) once the broker is connected, registered under its current session (the
snapshot shows its broker epoch) and its view has the partition states that ZooKeeper holds
now for every coordinator partition it believes it leads: a state newer than the view's
(written while it was cut) reaches the replica manager first, which resigns or is elected
at the new epoch. After a new session the replica manager leads no state given to the old
registration (partition.py `_admitted`), so only states the controller wrote since are led.

Kafka does not fence: in ZooKeeper mode its coordinators resign when a LeaderAndIsr or
StopReplica from the controller reaches them, which a cut broker gets only once registered
again; in KRaft mode when the metadata log does. Both answer from a cut coordinator's old
state meanwhile. A ZooKeeper outage of more than five sixths of the session timeout (every
broker suspended) makes every coordinator unavailable until it ends, where Kafka's serve on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from odradek.cluster import zk_layout as L
from odradek.cluster.metadata import ClusterSnapshot
from odradek.cluster.zk_cache import CacheView
from odradek.cluster.zookeeper import ZooKeeperMetadataStore

log = logging.getLogger(__name__)

RESUME_RETRY_S = 0.5


class _Runtime(Protocol):
    @property
    def topic(self) -> str: ...


class Fenceable(Protocol):
    """A coordinator (group/coordinator.py, txn/coordinator.py)."""

    @property
    def runtime(self) -> _Runtime: ...

    def fence(self, why: str) -> None: ...

    def unfence(self) -> None: ...


class CoordinatorFence:
    """Fences `coordinators` while this broker's ZooKeeper session may be lost (module doc)."""

    def __init__(
        self,
        node_id: int,
        zk: KazooClient,
        store: ZooKeeperMetadataStore,
        coordinators: Sequence[Fenceable],
        session_timeout_ms: int,
    ) -> None:
        self.node_id = node_id
        self.zk = zk
        self.store = store
        self.coordinators = list(coordinators)
        self.grace_s = session_timeout_ms / 1000 / 6
        self.fenced: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._resuming: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.zk.add_listener(self._listener)

    def stop(self) -> None:
        self.zk.remove_listener(self._listener)
        self._cancel()
        self._loop = None

    def _listener(self, state: Any) -> None:  # kazoo's thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.on_state, state)

    def on_state(self, state: Any) -> None:
        """A kazoo session state (on the loop)."""
        if self._loop is None:
            return
        if state == KazooState.LOST:
            self._cancel()
            self.fence("its ZooKeeper session expired")
        elif state == KazooState.SUSPENDED:
            self._cancel()
            self._timer = self._loop.call_later(self.grace_s, self._suspended_too_long)
        elif state == KazooState.CONNECTED:
            self._cancel()
            if self.fenced is not None:
                self._resuming = asyncio.ensure_future(self._resume())

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._resuming is not None:
            self._resuming.cancel()
            self._resuming = None

    def _suspended_too_long(self) -> None:
        self._timer = None
        self.fence(f"cut from ZooKeeper for {self.grace_s:.1f} s after its connection was suspended")

    def fence(self, why: str) -> None:
        if self.fenced is None:
            log.warning("broker %d stops acting as coordinator: %s", self.node_id, why)
        self.fenced = why
        for c in self.coordinators:
            c.fence(why)

    async def _resume(self) -> None:
        """Until registered under the current session with the current coordinator leadership."""
        while True:
            try:
                epoch = await asyncio.to_thread(self._registration)
                if epoch is None:  # not registered under this session yet (the store does it)
                    await asyncio.sleep(RESUME_RETRY_S)
                    continue
                await self.store.wait_for(
                    functools.partial(self._registered, epoch=epoch), f"broker {self.node_id} registered again"
                )
                versions = await asyncio.to_thread(self._state_versions, self._led(self.store.snapshot))
                caught_up = functools.partial(_caught_up, versions=versions)
                await self.store.wait_for_view(caught_up, "the coordinator partitions' current states")
                if self._registered(self.store.snapshot, epoch):
                    break
            except Exception as e:  # noqa: BLE001 - MetadataTimeout, a ZooKeeper error: tried again while connected
                log.info("broker %d: not coordinator again yet (%r); trying again", self.node_id, e)
                await asyncio.sleep(RESUME_RETRY_S)
        self._resuming = None
        log.warning("broker %d acts as coordinator again (was fenced: %s)", self.node_id, self.fenced)
        self.fenced = None
        for c in self.coordinators:
            c.unfence()

    def _registration(self) -> int | None:
        """The broker epoch (czxid) of this broker's registration if this session made it, else
        None (blocking)."""
        try:
            _data, stat = self.zk.get(L.broker_path(self.node_id))
        except NoNodeError:
            return None
        return stat.czxid if stat.ephemeralOwner == self.zk.client_id[0] else None

    def _registered(self, snap: ClusterSnapshot, epoch: int) -> bool:
        """The snapshot shows the registration of this session (`epoch`)."""
        me = snap.broker(self.node_id)
        return me is not None and me.epoch == epoch

    def _led(self, snap: ClusterSnapshot) -> list[tuple[str, int]]:
        """The coordinator partitions this broker's metadata says it leads."""
        out = []
        for c in self.coordinators:
            topic = c.runtime.topic
            info = snap.topics.get(topic)
            if info is not None:
                out += [(topic, p.partition) for p in info.partitions if p.leader == self.node_id]
        return out

    def _state_versions(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """ZooKeeper's version of each partition's state now (blocking)."""
        out = {}
        for topic, p in keys:
            try:
                _data, stat = self.zk.get(L.partition_state_path(topic, p))
            except NoNodeError:
                continue
            out[(topic, p)] = stat.version
        return out


def _caught_up(view: CacheView, versions: dict[tuple[str, int], int]) -> bool:
    for key, version in versions.items():
        cached = view.states.get(key)
        if cached is not None and cached.version < version:
            return False
    return True
