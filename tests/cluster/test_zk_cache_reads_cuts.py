"""The batched re-reads of `zk_cache_reads.DataWatches` through a link to a real ZooKeeper that is
cut now and then, some cuts past the session timeout: no change is lost.

A writer (its own session, never cut) changes random partition-state-like znodes in
transactions, as the controller writes ISR changes; the reader's client reaches ZooKeeper
through a TcpProxy cut for a fifth of the session up to nearly twice it, so its connection drops
(kazoo drops every watch and sends each watcher a NONE event) and its session expires (kazoo
fails what was queued with SessionExpiredError, a new session is CONNECTED). When the writer
stops and the link heals, every watch's function must have seen its node's last version and
every node must be watched again (a change after that is seen too).

The interleaving that lost a change here (a reader getting to an answer failed with the expired
session only after it had read nodes on the new session) is rare in a run like this one:
tests/unit/cluster/test_zk_cache_reads_sessions.py makes it step by step. This run holds the
reader to the real client's behaviour on the ordinary paths.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from support.proxy import TcpProxy

from odradek.cli.zookeeper_server import ZooKeeperServer
from odradek.cluster.zk_cache_reads import DataWatches
from odradek.cluster.zk_client import connect

# serial, the whole module: cuts timed against a 2 s ZooKeeper session: a second cluster's load
# would expire sessions the test means to keep
pytestmark = [pytest.mark.cluster, pytest.mark.serial]

SESSION_MS = 2000
NODES = 200
FAULT_S = 20.0


@pytest.fixture
def zookeeper(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk", tick_ms=250).start()
    yield server
    server.stop()


def test_every_change_is_seen_through_cuts_and_expired_sessions(zookeeper):
    rnd = random.Random(20261128)
    proxy = TcpProxy(("127.0.0.1", zookeeper.port)).start()
    writer = connect(zookeeper.connect, 10000, 10000)
    reader = connect(f"127.0.0.1:{proxy.port}", SESSION_MS, 10000)
    stop = threading.Event()
    try:
        paths = [f"/brokers/topics/t/partitions/{p}/state" for p in range(NODES)]
        for p in paths:
            writer.create(p, b"0", makepath=True)
        seen: dict[str, int | None] = {}
        lock = threading.Lock()

        def func_of(path: str):
            def changed(_data, stat) -> None:
                with lock:
                    seen[path] = None if stat is None else stat.version

            return changed

        states: list[str] = []
        reader.add_listener(states.append)
        watches = DataWatches(reader)
        watches.watch([(p, func_of(p)) for p in paths])
        writes = 0

        def write() -> None:
            nonlocal writes
            while not stop.is_set():
                t = writer.transaction()
                for p in rnd.sample(paths, rnd.randint(1, 40)):
                    t.set_data(p, b"isr")
                    writes += 1
                t.commit()
                time.sleep(rnd.uniform(0, 0.05))

        w = threading.Thread(target=write, daemon=True)
        w.start()
        end = time.monotonic() + FAULT_S
        while time.monotonic() < end:
            time.sleep(rnd.uniform(0.2, 1.5))
            proxy.cut()
            time.sleep(rnd.choice([0.2, 0.5, 1.0, 1.5, 2.5, 3.5]))
            proxy.heal()
        stop.set()
        w.join(10)

        def stale() -> list[str]:
            truth = {p: writer.exists(p).version for p in paths}
            with lock:
                return [f"{p}: v{seen.get(p)} (ZooKeeper v{truth[p]})" for p in paths if seen.get(p) != truth[p]]

        deadline = time.monotonic() + 20
        while stale() and time.monotonic() < deadline:
            time.sleep(0.2)
        summary = f"{writes} writes, states {states.count('SUSPENDED')} suspended, {states.count('LOST')} lost"
        assert states.count("LOST") >= 1, summary  # a session expired under the reads
        assert not stale(), f"{summary}; stale: {stale()[:5]}"
        for p in rnd.sample(paths, 20):  # still watched: a change now is seen
            writer.set(p, b"after")
        deadline = time.monotonic() + 10
        while stale() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not stale(), f"{summary}; not watched again: {stale()[:5]}"
    finally:
        stop.set()
        for c in (reader, writer):
            c.stop()
            c.close()
        proxy.stop()
