"""Watches that fire together are read together, many reads in flight, not one blocking round
trip per event on kazoo's callback thread.

A broker killed at 10,000 partitions makes the controller write thousands of ISR changes in a
few transactions; every broker's cache then gets thousands of watch events at once. kazoo's
`DataWatch` (and `DataWatches` until now) reads each node again on the callback thread, one
round trip after another, while the next events wait behind it: at 10,000 partitions the ISRs
were not full again after 9 minutes (Kafka 3.9: 174 s). Here a client that behaves as kazoo's
(events delivered one after another on one callback thread, answers a round trip after the
request, `handler.spawn` a thread) fires 400 watches at once: the reads go out ten at a time
and each function sees its node's newest contents."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from odradek.cluster.zk_cache_reads import DataWatches

RTT_S = 0.003
N = 400


class _Answer:
    def __init__(self, client: _Client, value: object, error: Exception | None) -> None:
        self.client, self.value, self.error = client, value, error
        self.ready_at = time.monotonic() + RTT_S
        self.received = False

    def get(self) -> object:
        time.sleep(max(0.0, self.ready_at - time.monotonic()))
        with self.client.lock:
            if not self.received:
                self.received = True
                self.client.in_flight -= 1
        if self.error is not None:
            raise self.error
        return self.value


class _Handler:
    @staticmethod
    def sleep_func(seconds: float) -> None:
        time.sleep(seconds)

    @staticmethod
    def spawn(func, *args) -> threading.Thread:
        t = threading.Thread(target=func, args=args, daemon=True)
        t.start()
        return t


class _Client:
    """kazoo's client as DataWatches uses it: znodes with a version, one-shot watches."""

    handler = _Handler()
    state = KazooState.CONNECTED

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.watches: dict[str, object] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.reads = 0

    def add_listener(self, _listener) -> None:
        return None

    def _sent(self, path: str, watch, value: object, error: Exception | None) -> _Answer:
        with self.lock:
            self.watches[path] = watch
            self.in_flight += 1
            self.reads += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return _Answer(self, value, error)

    def get_async(self, path: str, watch=None) -> _Answer:
        node = self.nodes.get(path)
        if node is None:
            return self._sent(path, watch, None, NoNodeError())
        data, version = node
        return self._sent(path, watch, (data, SimpleNamespace(mzxid=version, version=version)), None)

    def exists_async(self, path: str, watch=None) -> _Answer:
        node = self.nodes.get(path)
        return self._sent(path, watch, None if node is None else SimpleNamespace(mzxid=node[1]), None)

    def set_all(self, paths: list[str], data: bytes) -> None:
        """Change every node, then deliver their watch events one after another on one thread
        (kazoo's callback thread: the next event waits for the previous watcher to return)."""
        fired = []
        for path in paths:
            _old, version = self.nodes[path]
            self.nodes[path] = (data, version + 1)
            fired.append((path, self.watches.pop(path)))
        for path, watch in fired:
            watch(WatchedEvent(EventType.CHANGED, KazooState.CONNECTED, path))


def test_watches_firing_together_are_read_many_at_a_time():
    client = _Client()
    paths = [f"/brokers/topics/t/partitions/{p}/state" for p in range(N)]
    for path in paths:
        client.nodes[path] = (b"isr=1,2,3", 1)
    seen: dict[str, bytes] = {}
    all_seen = threading.Event()

    def func_of(path: str):
        def changed(data, stat):
            seen[path] = data
            if len(seen) == N and all(v == b"isr=1,3" for v in seen.values()):
                all_seen.set()

        return changed

    watches = DataWatches(client, max_in_flight=10)
    watches.watch([(path, func_of(path)) for path in paths])
    assert set(seen) == set(paths)
    client.max_in_flight = 0
    reads_before = client.reads

    t0 = time.monotonic()
    client.set_all(paths, b"isr=1,3")  # broker 2 killed: every ISR shrinks at once
    fired_s = time.monotonic() - t0
    assert all_seen.wait(30), f"{sum(v == b'isr=1,3' for v in seen.values())} of {N} seen"
    took = time.monotonic() - t0
    print(f"{N} events delivered in {fired_s:.3f} s, all read in {took:.3f} s, most in flight {client.max_in_flight}")
    assert client.max_in_flight == 10  # one at a time before
    assert fired_s < N * RTT_S / 4  # the callback thread is not held a round trip per event
    assert took < N * RTT_S / 2, took  # ~N/10 round trips, not N
    assert client.reads - reads_before == N  # each node read once
    assert client.in_flight == 0


def test_a_watch_firing_while_its_node_is_read_is_read_again():
    client = _Client()
    path = "/brokers/topics/t/partitions/0/state"
    client.nodes[path] = (b"v1", 1)
    seen: list[bytes] = []
    watches = DataWatches(client, max_in_flight=10)
    watches.watch([(path, lambda data, stat: seen.append(data))])
    client.set_all([path], b"v2")
    deadline = time.monotonic() + 10
    while path not in client.watches and time.monotonic() < deadline:  # its re-read sent (set its watch)
        time.sleep(0.0005)
    client.set_all([path], b"v3")  # fires again while that re-read is on its way (a round trip)
    deadline = time.monotonic() + 10
    while (not seen or seen[-1] != b"v3") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen[0] == b"v1" and seen[-1] == b"v3", seen
    assert seen == sorted(seen)  # never an older contents after a newer one
