"""Several odradek brokers and a private ZooKeeper, on loopback, for cluster tests.

    with OdradekCluster(tmp_path, brokers=3) as c:
        c.bootstrap                    # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        c.brokers[1]                   # BrokerProcess of broker.id 1 (kill(), stop(), start(), pause())
        c.snapshot()                   # the cluster as ZooKeeper holds it (ClusterSnapshot)
        c.wait(lambda s: ..., 10)      # until a snapshot satisfies a condition

Short timeouts keep tests fast: ZooKeeper ticks every 250 ms so sessions may be as short as
500 ms; brokers use `zookeeper.session.timeout.ms` (default here 2000) and the settings given.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from support.broker import BrokerProcess, free_port
from support.proxy import TcpProxy

from odradek.cli.zookeeper_server import ZooKeeperServer
from odradek.cluster.metadata import ClusterSnapshot
from odradek.cluster.zk_cache import read_view
from odradek.cluster.zk_client import connect
from odradek.cluster.zookeeper import build_snapshot

SESSION_MS = 2000


class OdradekCluster:
    def __init__(
        self,
        directory: str | os.PathLike,
        brokers: int = 3,
        overrides: dict | None = None,
        *,
        metrics: bool = False,
        replication_proxies: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.zookeeper = ZooKeeperServer(self.directory / "zookeeper", tick_ms=250)
        self.overrides = {
            "zookeeper.session.timeout.ms": SESSION_MS,
            "offsets.topic.num.partitions": 6,
            "group.initial.rebalance.delay.ms": 0,
            **(overrides or {}),
        }
        self.brokers: dict[int, BrokerProcess] = {}
        self.count = brokers
        self.metrics_ports: dict[int, int] = {i: free_port() for i in range(1, brokers + 1)} if metrics else {}
        # With replication_proxies, brokers reach each other on a REPLICATION listener behind a
        # TcpProxy per broker (proxies[b]: cut it and nobody reaches b's replication listener,
        # while clients still reach b on its CLIENT listener).
        self.proxies: dict[int, TcpProxy] = {}
        self._replication_ports: dict[int, int] = {}
        if replication_proxies:
            for i in range(1, brokers + 1):
                self._replication_ports[i] = free_port()
                self.proxies[i] = TcpProxy(("127.0.0.1", self._replication_ports[i])).start()
        self._zk = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self, timeout: float = 40) -> OdradekCluster:
        self.zookeeper.start()
        for i in range(1, self.count + 1):
            client_port = free_port()
            b = self.brokers[i] = BrokerProcess(
                self.directory / f"broker-{i}",
                {
                    **self._listeners(i, client_port),
                    "zookeeper.connect": self.zookeeper.connect,
                    "broker.id": i,
                    **({"metrics.listener": f"127.0.0.1:{self.metrics_ports[i]}"} if self.metrics_ports else {}),
                    **self.overrides,
                },
                port=client_port,
            )
            b.spawn()
        for b in self.brokers.values():
            b.wait_ready(timeout)
        self.wait(lambda s: len(s.brokers) == self.count and s.controller_id > 0, timeout, "every broker registered")
        self.wait_brokers_see_each_other(timeout)
        return self

    def wait_brokers_see_each_other(self, timeout: float = 20) -> None:
        """Until every broker's own Metadata lists every broker (each learns of the others
        through its ZooKeeper watches, a moment after they register)."""
        from support.raw import RawConnection

        deadline = time.monotonic() + timeout
        for b in self.brokers.values():
            while True:
                with RawConnection(b.bootstrap) as conn:
                    n = len(
                        conn.call(
                            3, 12, topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
                        ).brokers
                    )
                if n == self.count:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"broker {b.bootstrap} sees {n} brokers, not {self.count}")
                time.sleep(0.05)

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        if not self.proxies:
            return {}
        return {
            "listeners": f"CLIENT://127.0.0.1:{client},REPLICATION://127.0.0.1:{self._replication_ports[i]}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{client},REPLICATION://127.0.0.1:{self.proxies[i].port}",
            "inter.broker.listener.name": "REPLICATION",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
        }

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None and _stopped(b):
                os.kill(b.proc.pid, signal.SIGCONT)
        for b in self.brokers.values():
            b.stop()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
        self.zookeeper.stop()
        for proxy in self.proxies.values():
            proxy.stop()

    def __enter__(self) -> OdradekCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> ClusterSnapshot:
        if self._zk is None:
            self._zk = connect(self.zookeeper.connect, 10000, 10000)
        return build_snapshot(read_view(self._zk))

    def _reconnect_if_lost(self) -> None:
        if self._zk is not None and self._zk.state == KazooState.LOST:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def wait(self, condition: Callable[[ClusterSnapshot], bool], timeout: float, what: str = "") -> ClusterSnapshot:
        deadline = time.monotonic() + timeout
        while True:
            try:
                snap = self.snapshot()
            except KazooException as e:  # ZooKeeper restarting: this reader's session may be gone
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}: {e!r}") from e
                self._reconnect_if_lost()
                time.sleep(0.1)
                continue
            if condition(snap):
                return snap
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}: {snap}")
            time.sleep(0.05)

    def pause(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].proc.pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].proc.pid, signal.SIGCONT)

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- broker {i}\n{b.log_tail(lines)}" for i, b in self.brokers.items())


def _stopped(b: BrokerProcess) -> bool:
    try:
        with open(f"/proc/{b.proc.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False
