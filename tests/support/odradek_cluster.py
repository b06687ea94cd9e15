"""Several odradek brokers and a private ZooKeeper, on loopback, for cluster tests.

    with OdradekCluster(tmp_path, brokers=3) as c:
        c.bootstrap                    # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        c.brokers[1]                   # BrokerProcess of broker.id 1 (kill(), stop(), start(), pause())
        c.snapshot()                   # the cluster as ZooKeeper holds it (ClusterSnapshot)
        c.wait(lambda s: ..., 10)      # until a snapshot satisfies a condition

Short timeouts keep tests fast: ZooKeeper ticks every 250 ms so sessions may be as short as
500 ms; brokers use `zookeeper.session.timeout.ms` (default here 2000) and the settings given.

Faults beyond kill/stop/pause (tests/cluster/test_*_faults.py):
- `replication_proxies=True`: `proxies[b]` in front of broker b's inter-broker listener;
- `zookeeper_proxies=True`: `zk_proxies[b]` between broker b and ZooKeeper (cut it and b alone
  loses ZooKeeper while its peers and clients still reach it);
- `broker_env={b: {...}}`: environment for broker b's process, e.g. `faketime_env("-2h")`;
- `kill_all()`: SIGKILL to every broker at once (`stop()`, the end of a test's cluster, does it
  and kills ZooKeeper: a test of a clean stop stops brokers itself, `brokers[b].stop()`).
:class:`KafkaZkCluster` gives Apache Kafka 3.9 in ZooKeeper mode the same surface, to check a
fault test against the reference.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from support.broker import BrokerProcess, _Process, free_port
from support.proxy import TcpProxy

from odradek.cli.zookeeper_server import ZooKeeperServer
from odradek.cluster.metadata import ClusterSnapshot
from odradek.cluster.zk_cache import read_view
from odradek.cluster.zk_client import connect
from odradek.cluster.zookeeper import build_snapshot

SESSION_MS = 2000

#: libfaketime from Debian's `faketime` package (scripts/install-test-deps.sh)
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

# libfaketime 0.9.10 (Debian 12's) with FAKETIME_DONT_FAKE_MONOTONIC=1 still shifts an absolute
# CLOCK_MONOTONIC deadline given to clock_nanosleep by the wall clock's offset, which makes it
# negative: EINVAL (wolfcw/libfaketime#426, fixed after 0.9.10). Python 3.11's time.sleep is
# clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME): every sleep failed at once, and kazoo's
# connection thread died of it between reconnect attempts. Faking the monotonic clock instead
# hangs every timed wait of a thread (sem_clockwait reaches the kernel with a faked deadline).
# Preloaded before libfaketime, this sends a sleep on any clock but the wall clock to the
# kernel as asked (the monotonic clock is not faked), and a wall-clock sleep on to libfaketime.
_TRUE_SLEEP_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*sleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req, struct timespec *rem)
{
    if (clock_id == CLOCK_REALTIME) {
        static sleep_fn faked;
        if (faked == NULL)
            faked = (sleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
        return faked(clock_id, flags, req, rem);
    }
    return syscall(SYS_clock_nanosleep, clock_id, flags, req, rem) == 0 ? 0 : errno;
}
"""


def true_sleep_preload() -> Path:
    """The shared object above, built once per source (needs a C compiler: gcc, as Debian's
    build-essential gives). Raises RuntimeError saying why when it cannot be built."""
    import hashlib
    import shutil
    import subprocess
    import tempfile

    digest = hashlib.sha256(_TRUE_SLEEP_C.encode()).hexdigest()[:12]
    so = Path(tempfile.gettempdir()) / f"odradek-true-sleep-{digest}.so"
    if so.is_file():
        return so
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc) to build the clock_nanosleep shim libfaketime 0.9.10 needs")
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "true_sleep.c", Path(d) / "true_sleep.so"
        src.write_text(_TRUE_SLEEP_C)
        done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src), "-ldl"], capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the clock_nanosleep shim failed: {done.stderr.decode(errors='replace')}")
        os.replace(out, so)  # atomic: parallel workers may build it at once
    return so


def faketime_env(offset: str) -> dict[str, str]:
    """The environment that puts a process's wall clock `offset` away ("+2h", "-2h"; libfaketime's
    FAKETIME syntax), as `faketime -f` does but without its wrapper process (so signals reach
    the broker itself). Monotonic clocks stay true: a skewed host clock, not a slow one, and
    sleeps on them sleep as long as asked (`true_sleep_preload`).
    FAKETIME_FORCE_MONOTONIC_FIX=0: with it on (libfaketime 0.9.10's default) a JVM reading the
    clock 2 million times took 41 s here instead of 0.8 s, and a Kafka broker over 100 s to
    start (Python was not slowed)."""
    return {
        "LD_PRELOAD": f"{true_sleep_preload()}:{LIBFAKETIME}",
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
    }


class _ClusterBroker(BrokerProcess):
    """A cluster member: a BrokerProcess with environment of its own (faketime)."""

    def __init__(self, *args, extra_env: dict[str, str] | None = None, **kw) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kw)
        self.extra_env = dict(extra_env or {})

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.extra_env}


class _ZooKeeperView:
    """What both kinds of cluster offer a fault test: the cluster as ZooKeeper holds it, waits on
    it, pause/resume and kill -9 of brokers. Needs `zookeeper_connect` and `brokers`."""

    brokers: dict[int, _Process]
    _zk = None

    @property
    def zookeeper_connect(self) -> str:
        raise NotImplementedError

    def logs(self, lines: int = 30) -> str:
        raise NotImplementedError

    @property
    def client_bootstraps(self) -> list[str]:
        """Each broker's own address for clients (to ask a broker directly)."""
        return [b.bootstrap for b in self.brokers.values()]

    def snapshot(self, timeout: float = 30) -> ClusterSnapshot:
        """The cluster as ZooKeeper holds it. This reader's own ZooKeeper connection may drop
        under load or while ZooKeeper restarts (kazoo's ConnectionLoss): it is retried, with a new
        session once the old one is lost, for up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._zk is None:
                    self._zk = connect(self.zookeeper_connect, 10000, 10000)
                return build_snapshot(read_view(self._zk))
            except KazooException:
                if time.monotonic() > deadline:
                    raise
                self._reconnect_if_lost()
                time.sleep(0.1)

    def _close_zk(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def _reconnect_if_lost(self) -> None:
        if self._zk is not None and self._zk.state == KazooState.LOST:
            self._close_zk()

    def wait(self, condition: Callable[[ClusterSnapshot], bool], timeout: float, what: str = "") -> ClusterSnapshot:
        deadline = time.monotonic() + timeout
        while True:
            try:
                snap = self.snapshot(timeout=max(deadline - time.monotonic(), 0))
            except KazooException as e:  # ZooKeeper restarting, for longer than the wait
                raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}: {e!r}") from e
            if condition(snap):
                return snap
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what or condition}: {snap}\n{self.logs(40)}"
                )
            time.sleep(0.05)

    def pause(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].proc.pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].proc.pid, signal.SIGCONT)

    def kill_all(self) -> None:
        """SIGKILL to every broker at once (a power cut of the processes, not of their page cache)."""
        for b in self.brokers.values():
            if b.running:
                b.proc.send_signal(signal.SIGKILL)
        for b in self.brokers.values():
            b.kill()  # reaps it and closes its log

    def _resume_stopped(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None and _stopped(b):
                os.kill(b.proc.pid, signal.SIGCONT)


class OdradekCluster(_ZooKeeperView):
    session_ms = SESSION_MS

    def __init__(
        self,
        directory: str | os.PathLike,
        brokers: int = 3,
        overrides: dict | None = None,
        *,
        metrics: bool = False,
        replication_proxies: bool = False,
        zookeeper_proxies: bool = False,
        broker_env: dict[int, dict[str, str]] | None = None,
        broker_overrides: dict[int, dict] | None = None,
        zookeeper_tick_ms: int = 250,
    ) -> None:
        self.directory = Path(directory)
        # sessions of 2 to 20 ticks (ZooKeeper's bounds)
        self.zookeeper = ZooKeeperServer(self.directory / "zookeeper", tick_ms=zookeeper_tick_ms)
        #: settings of one broker only (e.g. its broker.rack), over `overrides`
        self.broker_overrides = broker_overrides or {}
        self.overrides = {
            "zookeeper.session.timeout.ms": SESSION_MS,
            "offsets.topic.num.partitions": 6,
            "group.initial.rebalance.delay.ms": 0,
            **(overrides or {}),
        }
        self.brokers: dict[int, BrokerProcess] = {}
        self.count = brokers
        self.broker_env = broker_env or {}
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
        # With zookeeper_proxies, broker b reaches ZooKeeper only through zk_proxies[b].
        self.zk_proxies: dict[int, TcpProxy] = {}
        if zookeeper_proxies:
            zk = ("127.0.0.1", self.zookeeper.port)
            self.zk_proxies = {i: TcpProxy(zk).start() for i in range(1, brokers + 1)}
        self._zk = None

    @property
    def zookeeper_connect(self) -> str:
        return self.zookeeper.connect

    def _zookeeper_connect_of(self, i: int) -> str:
        if i in self.zk_proxies:
            return f"127.0.0.1:{self.zk_proxies[i].port}"
        return self.zookeeper.connect

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self, timeout: float = 40) -> OdradekCluster:
        self.zookeeper.start()
        for i in range(1, self.count + 1):
            client_port = free_port()
            b = self.brokers[i] = _ClusterBroker(
                self.directory / f"broker-{i}",
                {
                    **self._listeners(i, client_port),
                    "zookeeper.connect": self._zookeeper_connect_of(i),
                    "broker.id": i,
                    **({"metrics.listener": f"127.0.0.1:{self.metrics_ports[i]}"} if self.metrics_ports else {}),
                    **self.overrides,
                    **self.broker_overrides.get(i, {}),
                },
                port=client_port,
                extra_env=self.broker_env.get(i),
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
        """The end of a test's cluster: SIGKILL to every broker (as :meth:`kill_all`) and to
        ZooKeeper. Nothing is asserted after it, and stopping each broker cleanly cost
        every cluster test 3-5 s (the last broker's controlled shutdown retried until it gave up,
        its partitions having no other live replica). A test of a clean stop stops the brokers
        itself (``brokers[b].stop()``: SIGTERM)."""
        self.kill_all()
        self._close_zk()
        self.zookeeper.kill()
        for proxy in (*self.proxies.values(), *self.zk_proxies.values()):
            proxy.stop()

    def __enter__(self) -> OdradekCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- broker {i}\n{b.log_tail(lines)}" for i, b in self.brokers.items())


class KafkaZkCluster(_ZooKeeperView):
    """Apache Kafka 3.9 in ZooKeeper mode (tests/support/apache_kafka.py) with the surface of
    :class:`OdradekCluster` that fault tests use: `brokers` by id (each start()/kill()/stop()),
    `bootstrap`, `client_bootstraps`, `snapshot()` and `wait()` on ZooKeeper (the same layout),
    `pause()`/`resume()`, `kill_all()`, `logs()`. `session_ms`: Kafka's ZooKeeper ticks every
    2 s, so no session is shorter than 4 s there."""

    session_ms = 6000

    def __init__(
        self,
        directory: str | os.PathLike,
        brokers: int = 3,
        overrides: dict | None = None,
        *,
        broker_env: dict[int, dict[str, str]] | None = None,
    ) -> None:
        from support.apache_kafka import ApacheKafka

        settings = {"zookeeper.session.timeout.ms": self.session_ms, **(overrides or {})}
        self.kafka = ApacheKafka(directory, line="3.9", brokers=brokers, zookeeper=True, overrides=settings)
        self.brokers = {n.node_id: n for n in self.kafka.nodes}
        self.count = brokers
        for i, extra in (broker_env or {}).items():
            node = self.brokers[i]
            node.env = lambda base=node.env, extra=extra: {**base(), **extra}
        self._zk = None

    @staticmethod
    def unavailable_reason() -> str | None:
        from support.apache_kafka import unavailable_reason

        return unavailable_reason("3.9")

    @property
    def zookeeper_connect(self) -> str:
        assert self.kafka.zookeeper is not None
        return self.kafka.zookeeper.connect

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    def start(self, timeout: float = 120) -> KafkaZkCluster:
        self.kafka.start(timeout)
        self.wait(lambda s: len(s.brokers) == self.count and s.controller_id > 0, timeout, "every broker registered")
        return self

    def stop(self) -> None:
        self._resume_stopped()
        self._close_zk()
        self.kafka.stop()

    def logs(self, lines: int = 30) -> str:
        return self.kafka.log_tail(lines)


def _stopped(b: _Process) -> bool:
    try:
        with open(f"/proc/{b.proc.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False
