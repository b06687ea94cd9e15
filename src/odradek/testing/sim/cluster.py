"""The simulated cluster: one loop, one network, one ZooKeeper, N broker hosts, client nodes.

`SimCluster` builds the world for one seed and offers what the workload, the faults and the
checks need: running a coroutine as a client node, the cluster's state as ZooKeeper holds it
(a god's view, read without a client), waiting until every partition is led with a full
ISR, and tearing everything down so that nothing of this run survives into the next one.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.cluster import zk_layout as L
from odradek.testing.sim.broker import BrokerHost
from odradek.testing.sim.loop import NODE, Node, SimLoop
from odradek.testing.sim.net import Network
from odradek.testing.sim.trace import Trace
from odradek.testing.sim.zk import SimZooKeeper

if TYPE_CHECKING:
    from odradek.storage import Log


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    version: int


class SimCluster:
    def __init__(
        self,
        seed: int,
        directory: str,
        *,
        brokers: int = 3,
        overrides: dict[str, str] | None = None,
        keep_trace: bool = False,
    ) -> None:
        self.seed = seed
        self.directory = directory
        self.loop = SimLoop()
        self.trace = Trace(keep=keep_trace)
        self.net = Network(self.loop, seed, self.trace)
        self.zk = SimZooKeeper(self.loop, self.net, self.trace)
        self.overrides = {"zookeeper.connect": "zk:2181", **(overrides or {})}
        self.hosts = {
            i: BrokerHost(self.loop, self.net, self.zk, i, f"{directory}/b{i}", self.overrides)
            for i in range(1, brokers + 1)
        }
        self.clients: dict[str, Node] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h.name}:9092" for h in self.hosts.values())

    def follow(
        self,
        event: Callable[[str, str], None],
        on_state: Callable[[str, int, L.PartitionState], None] | None = None,
        on_register: Callable[[int], None] | None = None,
    ) -> None:
        """Tell `event(actor, text)` of every leadership, ISR, registration and controller change
        (`on_state(topic, partition, state)` of every partition state written, `on_register(id)`
        of every broker registration)."""

        def observe(op: str, path: str, data: bytes | None) -> None:
            parts = path.split("/")
            try:
                if path.endswith("/state") and data is not None and len(parts) == 7:
                    st = L.decode_partition_state(parts[3], int(parts[5]), data)
                    event("zk", f"{parts[3]}-{parts[5]}: leader {st.leader} epoch {st.leader_epoch} isr {list(st.isr)}")
                    if on_state is not None:
                        on_state(parts[3], int(parts[5]), st)
                elif path.startswith(L.BROKER_IDS + "/") and op in ("create", "delete"):
                    event("zk", f"broker {parts[-1]} {'registered' if op == 'create' else 'gone'}")
                    if op == "create" and on_register is not None:
                        on_register(int(parts[-1]))
                elif path == L.CONTROLLER:
                    event("zk", f"controller {L.decode_controller(data) if data else 'gone'}")
            except (L.LayoutError, ValueError):
                pass

        self.zk.observer = observe

    def log_of(self, broker: int, topic: str, partition: int) -> Log | None:
        """Broker `broker`'s log of the partition (None: not running, or no such log)."""
        host = self.hosts.get(broker)
        if host is None or not host.alive or host.broker is None or host.broker.log_manager is None:
            return None
        return host.broker.log_manager.get_log(topic, partition)

    def log_end(self, broker: int, topic: str, partition: int) -> int | None:
        """Broker `broker`'s log end offset of the partition now (None: not running, no log)."""
        lg = self.log_of(broker, topic, partition)
        return lg.log_end_offset if lg is not None else None

    def host(self, broker: int) -> BrokerHost:
        return self.hosts[broker]

    def client_node(self, name: str) -> Node:
        node = self.clients.get(name)
        if node is None:
            node = self.clients[name] = Node(name)
        return node

    def spawn(self, node: Node, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        token = NODE.set(node)
        try:
            return asyncio.ensure_future(coro)
        finally:
            NODE.reset(token)

    # ------------------------------------------------------------------ the truth
    def partitions(self, topic: str) -> list[PartitionView]:
        """Each partition's state as ZooKeeper holds it now."""
        nodes = self.zk.nodes
        znode = nodes.get(L.topic_path(topic))
        if znode is None:
            return []
        assignment = L.decode_topic(topic, znode.data)
        out = []
        for p, replicas in sorted(assignment.partitions.items()):
            st = nodes.get(L.partition_state_path(topic, p))
            if st is None:
                out.append(PartitionView(topic, p, tuple(replicas), -1, -1, (), -1))
                continue
            s = L.decode_partition_state(topic, p, st.data)
            out.append(PartitionView(topic, p, tuple(replicas), s.leader, s.leader_epoch, tuple(s.isr), st.version))
        return out

    def controller(self) -> int:
        znode = self.zk.nodes.get(L.CONTROLLER)
        return L.decode_controller(znode.data) if znode is not None else -1

    def registered(self) -> set[int]:
        root = self.zk.nodes.get(L.BROKER_IDS)
        return {int(c) for c in root.children} if root is not None else set()

    def unhealthy(self, topics: list[str]) -> list[str]:
        """What is not yet as it should be once every fault is healed: a broker not running or
        not registered, a partition without a leader or with an ISR short of its replicas."""
        problems = []
        registered = self.registered()
        for b, h in self.hosts.items():
            if not h.running:
                problems.append(f"broker {b} not running")
            elif b not in registered:
                problems.append(f"broker {b} not registered")
        for topic in topics:
            for pv in self.partitions(topic):
                if pv.leader < 0:
                    problems.append(f"{topic}-{pv.partition} has no leader (isr {list(pv.isr)})")
                elif set(pv.isr) != set(pv.replicas):
                    problems.append(
                        f"{topic}-{pv.partition} isr {list(pv.isr)} of replicas {list(pv.replicas)} "
                        f"(leader {pv.leader}, epoch {pv.leader_epoch})"
                    )
        return problems

    async def wait_healthy(self, topics: list[str], timeout: float) -> list[str]:
        """Until nothing is unhealthy (returns []) or `timeout` virtual seconds pass (returns
        what still is)."""
        deadline = self.loop.time() + timeout
        while True:
            problems = self.unhealthy(topics)
            if not problems or self.loop.time() >= deadline:
                return problems
            await asyncio.sleep(0.25)

    # ------------------------------------------------------------------ teardown
    def teardown(self) -> None:
        """After the run: every node dead, every pending coroutine closed, every file closed."""
        loop = self.loop
        self.trace.close()
        for h in self.hosts.values():
            if h.node is not None:
                loop.kill(h.node)
            h.disk.close_all()
        for node in self.clients.values():
            loop.kill(node)
        loop.kill(self.zk.node)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.CRITICAL)  # finally blocks of closed coroutines complain
            try:
                loop.bury()
                if not loop.is_closed():
                    loop.close()
            finally:
                logging.disable(logging.NOTSET)
        shutil.rmtree(self.directory, ignore_errors=True)
