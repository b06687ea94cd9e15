"""The simulated ZooKeeper: znodes, sessions and their expiry, one-shot watches under kazoo's own
recipes, multi-op transactions, and what a client sees when paused or cut; then the real
ZooKeeperMetadataStore over it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.states import KazooState

from odradek.cluster import zk_layout as L
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zookeeper import ZooKeeperMetadataStore
from odradek.testing.sim.loop import NODE, Node, SimLoop, simulated_world
from odradek.testing.sim.net import Network
from odradek.testing.sim.trace import Trace
from odradek.testing.sim.zk import SimZooKeeper


def run(coro_fn, seed: int = 1):
    loop = SimLoop()
    asyncio.set_event_loop(loop)
    trace = Trace()
    net = Network(loop, seed, trace)
    zk = SimZooKeeper(loop, net, trace)
    try:
        with simulated_world(loop, seed):
            return loop.run_until_complete(coro_fn(loop, net, zk))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def as_node(node: Node, coro) -> asyncio.Task:
    token = NODE.set(node)
    try:
        return asyncio.ensure_future(coro)
    finally:
        NODE.reset(token)


def test_znodes_versions_ephemerals_and_sequences():
    async def main(loop, net, zk):
        c = zk.client(Node("b1"), 6000)
        c.ensure_path("/a/b")
        assert c.create("/a/b/x", b"1") == "/a/b/x"
        with pytest.raises(NodeExistsError):
            c.create("/a/b/x", b"2")
        with pytest.raises(NoNodeError):
            c.create("/nope/x", b"")
        assert c.create("/deep/er/x", b"", makepath=True) == "/deep/er/x"
        stat = c.set("/a/b/x", b"2", version=0)
        assert stat.version == 1
        with pytest.raises(BadVersionError):
            c.set("/a/b/x", b"3", version=0)
        assert c.create("/a/seq-", b"", sequence=True) == "/a/seq-0000000001"
        assert c.create("/a/seq-", b"", sequence=True) == "/a/seq-0000000002"
        path = c.create("/a/eph", b"", ephemeral=True)
        assert c.get(path)[1].ephemeralOwner == c.client_id[0]
        assert c.get_children("/a") == ["b", "eph", "seq-0000000001", "seq-0000000002"]
        c.stop()  # a clean close ends the session: its ephemeral node goes at once
        other = zk.client(Node("b2"), 6000)
        assert other.exists("/a/eph") is None
        assert other.exists("/a/b/x").version == 1

    run(main)


def test_a_failed_transaction_changes_nothing_and_answers_as_kazoo():
    async def main(loop, net, zk):
        c = zk.client(Node("b1"), 6000)
        c.create("/v", b"0")
        t = c.transaction()
        t.set_data("/v", b"1", version=0)
        t.check("/v", 5)
        t.create("/w", b"")
        results = t.commit()
        assert [type(r) for r in results] == [RolledBackError, BadVersionError, RuntimeInconsistency]
        assert c.get("/v")[0] == b"0" and c.exists("/w") is None
        t = c.transaction()
        t.check("/v", 0)
        t.set_data("/v", b"1", version=0)
        t.create("/w", b"")
        results = t.commit()
        assert results[0] is True and results[1].version == 1 and results[2] == "/w"

    run(main)


def test_kazoo_recipes_see_every_change_in_order_after_the_latency():
    async def main(loop, net, zk):
        watcher, writer = Node("b1"), Node("b2")
        w = zk.client(watcher, 6000)
        seen: list = []
        children: list = []

        def setup():
            w.ensure_path("/brokers/ids")
            w.DataWatch("/controller", lambda data, stat: seen.append(data))
            w.ChildrenWatch("/brokers/ids", lambda ch: children.append(list(ch)))

        loop.call_soon_as(watcher, setup)
        await asyncio.sleep(0.01)
        c = zk.client(writer, 6000)
        c.create("/controller", b"1")
        c.create("/brokers/ids/1", b"", ephemeral=True)
        assert seen == [None] and children == [[]]  # nothing arrived yet
        await asyncio.sleep(0.05)
        c.set("/controller", b"2")
        await asyncio.sleep(0.05)
        c.delete("/controller")
        await asyncio.sleep(0.05)
        assert seen == [None, b"1", b"2", None]
        assert children == [[], ["1"]]

    run(main)


def test_a_paused_client_loses_its_session_then_gets_a_new_one():
    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 6000)
        states: list = []
        c.add_listener(states.append)
        eph = c.create("/b1", b"", ephemeral=True)
        first = c.client_id[0]
        await asyncio.sleep(21)  # pings (every 2 s) keep the session
        assert zk.nodes.get(eph) is not None
        loop.pause(node)  # the last ping was at 20 s
        await asyncio.sleep(4)
        assert eph in zk.nodes  # not yet: the session timeout is 6 s
        await asyncio.sleep(3)
        assert eph not in zk.nodes  # expired: the ephemeral node went
        loop.resume(node)
        await asyncio.sleep(0.01)
        assert states == [KazooState.LOST, KazooState.CONNECTED]
        assert c.client_id[0] != first

    run(main)


def test_a_client_cut_from_zookeeper_blocks_suspends_and_expires():
    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 6000)
        states: list = []
        c.add_listener(states.append)
        c.create("/b1", b"", ephemeral=True)
        net.cut_link("b1", "zk")

        def read():
            return c.get("/b1")[0]

        blocked = as_node(node, asyncio.to_thread(read))
        await asyncio.sleep(4.5)
        assert states == [KazooState.SUSPENDED] and not blocked.done()
        await asyncio.sleep(3)
        assert "/b1" not in zk.nodes  # the server expired the session
        net.heal()
        with pytest.raises(NoNodeError):  # ran again once connected, in the new session
            await blocked
        assert states == [KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED]

    run(main)


def test_a_one_way_cut_from_zookeeper_keeps_the_session_but_suspends_the_client():
    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 6000)
        states: list = []
        c.add_listener(states.append)
        c.create("/b1", b"", ephemeral=True)
        net.cut_link("zk", "b1", both=False)  # pings arrive, answers do not
        await asyncio.sleep(30)
        assert "/b1" in zk.nodes
        assert states == [KazooState.SUSPENDED]
        net.heal()
        await asyncio.sleep(3)
        assert states == [KazooState.SUSPENDED, KazooState.CONNECTED]

    run(main)


def test_a_connection_given_up_takes_its_watches_with_it_as_kazoo_does():
    """kazoo 2.x on a lost connection (SUSPENDED): every watcher is called once with a NONE
    event whose path is None, and none is set again on reconnect (no SetWatches), so a change
    made during the cut fires nothing; kazoo's DataWatch reads again and sees it. A cut shorter
    than the client's two thirds of its timeout loses nothing: the event arrives late."""

    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 6000)
        writer = zk.client(Node("b2"), 6000)
        writer.create("/short", b"0")
        writer.create("/long", b"0")
        raw: list = []
        recipe: list = []

        def setup():
            c.get("/short", watch=lambda e: raw.append((e.type, e.path)))
            c.get("/long", watch=lambda e: raw.append((e.type, e.path)))
            c.DataWatch("/long", lambda data, stat: recipe.append(data))

        loop.call_soon_as(node, setup)
        await asyncio.sleep(0.1)
        assert recipe == [b"0"]
        net.cut_link("b1", "zk")  # shorter than 4 s: the connection is kept
        writer.set("/short", b"1")
        await asyncio.sleep(1.5)
        assert raw == []
        net.heal()
        await asyncio.sleep(2.5)  # the next ping gets through
        assert raw == [("CHANGED", "/short")]
        net.cut_link("b1", "zk")  # long enough for SUSPENDED, short of the session timeout
        await asyncio.sleep(0.5)
        writer.set("/long", b"1")
        await asyncio.sleep(4.5)
        assert c.state == KazooState.SUSPENDED
        assert raw == [("CHANGED", "/short"), ("NONE", None)]  # /long's raw watch (the recipe's got one too)
        assert zk.exists("/long", zk.sessions[c.client_id[0]], None) is not None
        assert not any(s.client is c for s, _ in zk._data_watches.get("/long", []))
        net.heal()
        await asyncio.sleep(3)
        assert c.state == KazooState.CONNECTED and c.client_id[0] in zk.sessions  # the same session
        writer.set("/long", b"2")
        await asyncio.sleep(0.1)
        assert raw == [("CHANGED", "/short"), ("NONE", None)]  # the raw watch is gone
        assert recipe == [b"0", b"1", b"2"]  # the recipe read again and watches again

    run(main)


def test_the_real_metadata_store_registers_again_after_its_session_expired():
    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 6000)
        c.create(L.CLUSTER_ID, L.encode_cluster_id("c1"), makepath=True)
        store = ZooKeeperMetadataStore(c, 1, session_timeout_ms=6000)  # type: ignore[arg-type]
        me = BrokerInfo(1, "b1", 9092, None, (("PLAINTEXT", "b1", 9092),))

        async def start():
            await store.start()
            await store.register_broker(me)

        await as_node(node, start())
        first = store.snapshot.broker(1)
        assert first is not None and dataclasses.replace(first, epoch=-1) == me  # epoch: the czxid
        loop.pause(node)
        await asyncio.sleep(10)
        assert L.broker_path(1) not in zk.nodes
        loop.resume(node)
        loop.resume_readers()
        await asyncio.sleep(1)
        assert L.broker_path(1) in zk.nodes
        assert zk.nodes[L.broker_path(1)].owner == c.client_id[0]
        again = store.snapshot.broker(1)
        assert again is not None and dataclasses.replace(again, epoch=-1) == me
        assert again.epoch > first.epoch  # a new registration, a new broker epoch

    run(main)


def test_an_outage_longer_than_the_session_timeout_keeps_every_session():
    """The whole ensemble away for 20 s (the session timeout is 6 s): calls wait, the client goes
    SUSPENDED; when ZooKeeper is back it renews every session's timeout, so the client
    reconnects in the same session, its ephemeral node still there, and the waiting call runs."""

    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 6000)
        states: list = []
        c.add_listener(states.append)
        eph = c.create("/b1", b"x", ephemeral=True)
        first = c.client_id[0]
        zk.set_outage(True)
        blocked = as_node(node, asyncio.to_thread(lambda: c.get("/b1")[0]))
        await asyncio.sleep(20)
        assert states == [KazooState.SUSPENDED] and not blocked.done()
        assert eph in zk.nodes and zk.expired_sessions == 0
        zk.set_outage(False)
        await asyncio.sleep(3)
        assert await blocked == b"x"
        assert states == [KazooState.SUSPENDED, KazooState.CONNECTED]
        assert c.client_id[0] == first and eph in zk.nodes
        loop.pause(node)  # the renewed session still expires like any other
        await asyncio.sleep(7)
        assert eph not in zk.nodes

    run(main)


def test_a_write_commits_after_the_write_latency_and_its_watch_event_comes_after_it():
    async def main(loop, net, zk):
        writer, watcher = Node("b1"), Node("b2")
        c, w = zk.client(writer, 6000), zk.client(watcher, 6000)
        zk.extra_write_latency = 0.5  # a slow transaction log
        seen: list = []
        loop.call_soon_as(watcher, lambda: w.DataWatch("/x", lambda data, stat: seen.append((loop.elapsed, data))))
        await asyncio.sleep(0.01)
        t0 = loop.elapsed
        await as_node(writer, asyncio.to_thread(lambda: c.create("/x", b"1")))
        assert loop.elapsed - t0 >= 0.5 + zk.write_latency  # the writer waits for the commit
        t1 = loop.elapsed
        assert await as_node(writer, asyncio.to_thread(lambda: c.get("/x")[0])) == b"1"
        assert loop.elapsed - t1 < 0.01  # reads do not
        assert [d for _t, d in seen] == [None, b"1"]
        assert seen[1][0] - t0 >= 0.5  # the event left the server once committed

    run(main)


def test_a_threads_calls_take_the_links_latency_when_each_begins():
    """kazoo's blocking calls from one thread go one after the other, each a round trip at the
    link's latency when it is sent: forty reads under a 0.8 s link (1.6 s a round trip) healed
    after 2 s end shortly after the heal, not 64 s later (simulator seed 11860); a link made
    slow while they are on their way slows those not yet sent."""

    def reads(c):
        return [c.get("/x")[0] for _ in range(40)]

    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 60000)
        c.create("/x", b"1")
        for a, b in (("b1", "zk"), ("zk", "b1")):
            net.set_latency(a, b, 0.8)
        t0 = loop.elapsed
        slow = as_node(node, asyncio.to_thread(reads, c))
        await asyncio.sleep(2.0)
        assert not slow.done()
        for a, b in (("b1", "zk"), ("zk", "b1")):
            net.set_latency(a, b, None)
        assert await slow == [b"1"] * 40
        healed = loop.elapsed - t0
        t1 = loop.elapsed
        later = as_node(node, asyncio.to_thread(reads, c))
        await asyncio.sleep(0.001)
        for a, b in (("b1", "zk"), ("zk", "b1")):
            net.set_latency(a, b, 0.5)
        await later
        slowed = loop.elapsed - t1
        net.normal_latency()
        return healed, slowed

    healed, slowed = run(main)
    assert 2.0 < healed < 3.3  # the round trip under way at the heal (1.6 s), then fast ones
    assert slowed > 30 * 1.0  # most of the forty at 1 s a round trip


def test_writes_not_yet_sent_commit_at_the_logs_new_rate():
    """A zk-slow fault ends while a thread's writes are on their way: those not yet sent commit
    at the normal rate."""

    def writes(c):
        for i in range(10):
            c.set("/x", str(i).encode())

    async def main(loop, net, zk):
        node = Node("b1")
        c = zk.client(node, 60000)
        c.create("/x", b"")
        zk.extra_write_latency = 0.8
        t0 = loop.elapsed
        task = as_node(node, asyncio.to_thread(writes, c))
        await asyncio.sleep(1.0)
        zk.extra_write_latency = 0.0
        await task
        return loop.elapsed - t0

    assert 1.0 < run(main) < 2.0  # the second write (sent at 0.8 s) commits at 1.6 s, then fast
