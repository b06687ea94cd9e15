"""A broker of the simulated cluster: the real `Broker`, over the simulated network and ZooKeeper.

`SimBroker` overrides only the seams of `broker.server.Broker` that touch the outside world:
`_join_cluster` (the simulated ZooKeeper's client instead of kazoo's), `_bind`,
`_accept_loop` and `_advertised_endpoint` (the simulated network instead of sockets), and
`_warm_up` (no gc.freeze: one process runs many seeds). Everything above them is the real
code: handlers and codecs, ReplicaManager, Partition, the replica fetchers, AlterPartition,
the controller, the ZooKeeper metadata store and cache, the coordinators, storage on real
files through `SimDisk`.

`BrokerHost` is one broker across its incarnations: the same node id, directories and disk;
`start()` makes a new incarnation (a new `Node`, so handles of a killed one never run),
`kill()` is kill -9 (its connections close; its ZooKeeper session lives until it expires;
the files keep what was written), `kill(power=True)` a power cut (the disk loses what was
not fsynced and the host goes silent).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from odradek.broker.config import BrokerConfig
from odradek.broker.connection import Connection
from odradek.broker.registry import preload_schemas
from odradek.broker.server import Broker, new_cluster_id, read_meta_properties
from odradek.broker.services import BrokerServices
from odradek.cluster import zk_client
from odradek.cluster.metadata import BrokerInfo
from odradek.storage.fs import FaultyFileSystem
from odradek.testing.sim.loop import NODE, Node, SimLoop
from odradek.testing.sim.net import Network, SimListener, SimTransport

if TYPE_CHECKING:
    from odradek.testing.sim.zk import SimZooKeeper

log = logging.getLogger("odradek.sim")

PORT = 9092


class SimDisk(FaultyFileSystem):
    """A broker's disk across its incarnations: real files, what was fsynced remembered (a power
    cut loses the rest), and the descriptors an incarnation opened closed when it dies."""

    def __init__(self) -> None:
        super().__init__(real_fsync=False)
        self.fsyncs = 0

    def fsync(self, fd):
        self.fsyncs += 1
        super().fsync(fd)

    def close_all(self) -> None:
        """The process died: the kernel closes what it had open (the page cache keeps the data)."""
        for fd in list(self._paths):
            try:
                os.close(fd)
            except OSError:
                pass
        self._paths.clear()
        self.forget_open_files()  # the segment file cache's descriptors went with them

    def power_loss(self) -> None:
        self.close_all()
        self.crash()


class OrderedSet(dict):
    """The set operations the broker uses, iterating in insertion order (a set of objects
    iterates by address, which differs from run to run)."""

    def add(self, item: Any) -> None:
        self[item] = None

    def discard(self, item: Any) -> None:
        self.pop(item, None)


class SimBroker(Broker):
    def __init__(
        self,
        config: BrokerConfig,
        *,
        fs: SimDisk,
        net: Network,
        zookeeper: SimZooKeeper | None,
        node: Node,
        boot_id: str = "",
    ) -> None:
        super().__init__(config, fs=fs)
        self.boot_id = boot_id
        self.connections = OrderedSet()  # type: ignore[assignment]
        self._conn_tasks = OrderedSet()  # type: ignore[assignment]
        self.net = net
        self.zookeeper = zookeeper
        self.node = node

    async def _join_cluster(self) -> tuple[Any, str]:
        assert self.zookeeper is not None, "cluster mode needs the simulated ZooKeeper"
        config = self.config
        zk = self.zookeeper.client(self.node, config["zookeeper.session.timeout.ms"])
        self.zk = zk
        proposed = config["cluster.id"] or new_cluster_id()
        existing = {cid for d in config["log.dirs"] if (cid := read_meta_properties(d).get("cluster.id"))}
        cluster_id = await asyncio.to_thread(zk_client.cluster_id, zk, proposed)
        if existing and cluster_id not in existing:
            log.warning("broker %d: directories of cluster %s, ZooKeeper has %s", self.node_id, existing, cluster_id)
        return zk, cluster_id

    def _boot_id(self) -> str:
        return self.boot_id  # the simulated host's: a power cut boots it again

    def _bind(self, name: str, host: str, port: int) -> None:
        listener = self.net.listen(self.node, host, port)
        self._servers.append((name, listener))  # type: ignore[arg-type]
        self.bound.append((host, port))

    def _advertised_endpoint(self) -> BrokerInfo:
        endpoints = [(name, host, port) for name, host, port in self.config.advertised]
        inter = self.config.inter_broker_listener
        _n, host, port = next((e for e in endpoints if e[0] == inter), endpoints[0])
        return BrokerInfo(self.node_id, host, port, self.config["broker.rack"] or None, tuple(endpoints))

    async def _accept_loop(self, listener_name: str, server: Any, services: BrokerServices) -> None:
        listener: SimListener = server
        while not self._stopping:
            try:
                ep = await listener.accept()
            except OSError:
                return
            protocol = services.config.security_protocol(listener_name)
            conn = Connection(services, SimTransport(self.net, ep), ep.peer_name, listener_name, protocol)
            self.connections.add(conn)
            task = asyncio.ensure_future(conn.run())
            self._conn_tasks.add(task)
            task.add_done_callback(self._connection_done(conn))

    async def _warm_up(self) -> None:
        await asyncio.to_thread(preload_schemas)


def broker_config(node_id: int, data_dir: str, overrides: dict[str, str]) -> BrokerConfig:
    host = f"b{node_id}"
    raw = {
        "node.id": str(node_id),
        "broker.id": str(node_id),
        "log.dirs": data_dir,
        "listeners": f"PLAINTEXT://{host}:{PORT}",
        "advertised.listeners": f"PLAINTEXT://{host}:{PORT}",
    }
    raw.update(overrides)
    return BrokerConfig(raw)


class BrokerHost:
    """One broker id across its incarnations."""

    def __init__(
        self,
        loop: SimLoop,
        net: Network,
        zookeeper: SimZooKeeper | None,
        node_id: int,
        data_dir: str,
        overrides: dict[str, str],
    ) -> None:
        self.loop = loop
        self.net = net
        self.zookeeper = zookeeper
        self.node_id = node_id
        self.name = f"b{node_id}"
        self.data_dir = data_dir
        self.overrides = dict(overrides)
        self.disk = SimDisk()
        self.incarnation = 0
        self.boots = 1  # the host's boots: a power cut is followed by a new one
        self.node: Node | None = None
        self.broker: SimBroker | None = None
        self.started = False  # the current incarnation finished Broker.start()
        self.start_task: asyncio.Task[None] | None = None
        self.start_error: BaseException | None = None
        self.io_delay = (0.00005, 0.0005)
        self.slow_io = 1.0
        self.wall_offset = 0.0
        self.drift = 0.0

    @property
    def alive(self) -> bool:
        return self.node is not None and not self.node.dead

    @property
    def running(self) -> bool:
        return self.alive and self.started

    def start(self) -> asyncio.Task[None]:
        """A new incarnation, starting (the task ends when Broker.start() has returned)."""
        assert not self.alive, f"{self.name} is already running"
        self.incarnation += 1
        node = self.node = Node(self.name, self.incarnation, io_delay=self.io_delay, slow_io=self.slow_io)
        node.wall_offset, node.drift = self.wall_offset, self.drift
        self.net.restart_host(self.name)
        self.started = False
        self.start_error = None
        config = broker_config(self.node_id, self.data_dir, self.overrides)
        self.broker = SimBroker(
            config,
            fs=self.disk,
            net=self.net,
            zookeeper=self.zookeeper,
            node=node,
            boot_id=f"{self.name}-boot-{self.boots}",
        )
        token = NODE.set(node)
        try:
            self.start_task = asyncio.ensure_future(self._start(self.broker))
            return self.start_task
        finally:
            NODE.reset(token)

    async def _start(self, broker: SimBroker) -> None:
        try:
            await broker.start()
        except Exception as e:  # the supervisor (faults.FaultRunner.restart_dead) starts it again
            self.start_error = e
            log.warning("%s failed to start: %r", self.name, e)
            return
        self.started = True

    def kill(self, *, power: bool = False) -> None:
        """kill -9 (power=True: the host loses power, and the disk its unsynced writes)."""
        node = self.node
        if node is None or node.dead:
            return
        self.loop.kill(node)
        self.net.kill(node, power=power)
        if power:
            self.disk.power_loss()
            self.boots += 1
        else:
            self.disk.close_all()
        self.started = False

    async def stop(self) -> None:
        """A clean shutdown (SIGTERM): controlled shutdown, flush, clean-shutdown marker."""
        node, broker = self.node, self.broker
        if node is None or node.dead or broker is None:
            return
        token = NODE.set(node)
        try:
            task = asyncio.ensure_future(broker.stop())
        finally:
            NODE.reset(token)
        await task
        self.loop.kill(node)
        self.net.kill(node)
        self.disk.close_all()
        self.started = False

    def pause(self) -> None:
        if self.node is not None and not self.node.dead:
            self.loop.pause(self.node)

    def resume(self) -> None:
        if self.node is not None and not self.node.dead:
            self.loop.resume(self.node)
            self.loop.resume_readers()

    def step_clock(self, seconds: float) -> None:
        """The host's wall clock jumps (an NTP step, an operator's date)."""
        self.wall_offset += seconds
        if self.node is not None:
            self.node.wall_offset += seconds

    def set_drift(self, drift: float) -> None:
        """The host's wall clock runs `drift` seconds per second fast (negative: slow) from now."""
        self.wall_offset += self.loop.elapsed * (self.drift - drift)
        self.drift = drift
        if self.node is not None:
            self.node.wall_offset, self.node.drift = self.wall_offset, drift

    def set_slow_io(self, factor: float) -> None:
        self.slow_io = factor
        if self.node is not None:
            self.node.slow_io = factor
