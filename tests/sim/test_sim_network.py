"""The simulated network: connections, latency, cuts that hold bytes, kill and power cuts; and one
real broker (single-node mode) served over it to the real client."""

from __future__ import annotations

import asyncio

import pytest

from odradek.client.aio import AIOConsumer, AIOProducer
from odradek.testing.sim.broker import BrokerHost
from odradek.testing.sim.loop import NODE, Node, SimLoop, simulated_world
from odradek.testing.sim.net import Network
from odradek.testing.sim.trace import Trace


def run(coro_fn, seed: int = 1):
    loop = SimLoop()
    asyncio.set_event_loop(loop)
    net = Network(loop, seed, Trace())
    try:
        with simulated_world(loop, seed):
            return loop.run_until_complete(coro_fn(loop, net))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def as_node(node: Node, coro) -> asyncio.Task:
    token = NODE.set(node)
    try:
        return asyncio.ensure_future(coro)
    finally:
        NODE.reset(token)


class Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.lost: list = []

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc) -> None:
        self.lost.append(exc)


async def echo_server(net: Network, node: Node, port: int = 7) -> None:
    """Echoes what it reads until end of stream, through the broker-side transport."""
    from odradek.testing.sim.net import SimTransport

    listener = net.listen(node, node.name, port)
    loop = net.loop
    while True:
        ep = await listener.accept()
        t = SimTransport(net, ep)
        buf = bytearray(1 << 16)

        def readable(t=t, buf=buf):
            try:
                n = t.recv_into(memoryview(buf))
            except BlockingIOError:
                return
            if n == 0:
                loop.remove_reader(t.fd)
                t.close()
                return
            asyncio.ensure_future(t.write([bytes(buf[:n])]))

        loop.add_reader(t.fd, readable)


def test_connect_is_refused_where_nothing_listens():
    async def main(loop, net):
        async def client():
            return await loop.create_connection(Collect, "nowhere", 1)

        with pytest.raises(ConnectionRefusedError):
            await as_node(Node("c"), client())

    run(main)


def test_bytes_flow_both_ways_with_latency_and_in_order():
    async def main(loop, net):
        server, client = Node("s"), Node("c")
        as_node(server, echo_server(net, server))

        async def talk():
            t, p = await loop.create_connection(Collect, "s", 7)
            started = loop.elapsed
            for i in range(100):
                t.write(b"%03d," % i)
            while len(p.data) < 400:
                await asyncio.sleep(0.0001)
            return bytes(p.data), loop.elapsed - started

        data, took = await as_node(client, talk())
        assert data == b"".join(b"%03d," % i for i in range(100))
        assert 0.0002 < took < 0.01  # a round trip of 0.1-1 ms links plus jitter

    run(main)


def test_a_cut_holds_the_bytes_until_it_heals_and_a_one_way_cut_holds_one_direction():
    async def main(loop, net):
        server, client = Node("s"), Node("c")
        as_node(server, echo_server(net, server))

        async def talk():
            t, p = await loop.create_connection(Collect, "s", 7)
            net.cut_link("c", "s", both=False)
            t.write(b"held")
            await asyncio.sleep(30)
            assert p.data == b""  # not even to the server
            net.heal("c", "s")
            await asyncio.sleep(0.05)
            assert p.data == b"held"
            net.cut_link("s", "c", both=False)  # the answers are held, the requests go through
            t.write(b"again")
            await asyncio.sleep(30)
            assert p.data == b"held"
            net.heal()
            await asyncio.sleep(0.05)
            return bytes(p.data)

        assert await as_node(client, talk()) == b"heldagain"

    run(main)


def test_connecting_across_a_cut_hangs_until_the_callers_timeout():
    async def main(loop, net):
        server, client = Node("s"), Node("c")
        as_node(server, echo_server(net, server))
        net.cut_link("c", "s")

        async def connect():
            return await asyncio.wait_for(loop.create_connection(Collect, "s", 7), 5)

        with pytest.raises(TimeoutError):
            await as_node(client, connect())
        assert loop.elapsed == pytest.approx(5, abs=0.01)
        net.heal()
        t, _p = await as_node(client, connect())
        assert not t.is_closing()

    run(main)


def test_kill_sends_fin_and_refuses_new_connections_a_power_cut_sends_nothing():
    async def main(loop, net):
        client = Node("c")
        s1, s2 = Node("s1"), Node("s2")
        as_node(s1, echo_server(net, s1))
        as_node(s2, echo_server(net, s2))

        async def connect(host: str):
            return await loop.create_connection(Collect, host, 7)

        _t1, p1 = await as_node(client, connect("s1"))
        _t2, p2 = await as_node(client, connect("s2"))
        loop.kill(s1)
        net.kill(s1)
        loop.kill(s2)
        net.kill(s2, power=True)
        await asyncio.sleep(1)
        assert p1.lost == [None]  # end of stream from the dead process's kernel
        assert p2.lost == []  # nothing from a host without power
        with pytest.raises(ConnectionRefusedError):
            await as_node(client, connect("s1"))
        with pytest.raises(TimeoutError):
            await as_node(client, asyncio.wait_for(connect("s2"), 3))

    run(main)


def test_a_host_back_from_a_power_cut_resets_the_connections_it_forgot():
    """A restarted host's kernel knows none of the old connections: a segment on one (sent while it
    was down and retransmitted, or sent after it is back) is answered with RST; while it is
    down, nothing answers."""

    async def main(loop, net):
        client = Node("c")
        s1 = Node("s")
        as_node(s1, echo_server(net, s1))

        async def connect():
            return await loop.create_connection(Collect, "s", 7)

        t_early, p_early = await as_node(client, connect())
        t_late, p_late = await as_node(client, connect())
        loop.kill(s1)
        net.kill(s1, power=True)
        t_early.write(b"while it is down")
        await asyncio.sleep(5)
        assert p_early.lost == [] and p_late.lost == []  # retransmitted into the void
        s2 = Node("s")
        net.restart_host("s")
        as_node(s2, echo_server(net, s2))
        await asyncio.sleep(0.05)
        assert [type(e) for e in p_early.lost] == [ConnectionResetError]
        assert p_late.lost == []  # nothing sent on it yet: nothing tells it
        t_late.write(b"after it is back")
        await asyncio.sleep(0.05)
        assert [type(e) for e in p_late.lost] == [ConnectionResetError]
        assert p_early.data == p_late.data == b""
        t_new, p_new = await as_node(client, connect())  # the new incarnation serves new connections
        t_new.write(b"hello")
        await asyncio.sleep(0.05)
        assert p_new.data == b"hello"

    run(main)


def test_one_broker_serves_the_real_client_over_the_simulated_network(tmp_path):
    """Single-node mode: a producer's 200 records acknowledged, a group consumer reads them all."""

    async def main(loop, net):
        host = BrokerHost(
            loop,
            net,
            None,
            1,
            str(tmp_path / "b1"),
            {"num.partitions": "2", "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"},
        )
        await host.start()
        assert host.running

        async def produce():
            p = await AIOProducer({"bootstrap.servers": "b1:9092"}).start()
            futs = [await p.send("t", b"v%d" % i, key=b"%d" % (i % 7)) for i in range(200)]
            acks = [await f for f in futs]
            await p.close()
            return acks

        async def consume():
            c = AIOConsumer({"bootstrap.servers": "b1:9092", "group.id": "g", "auto.offset.reset": "earliest"})
            await c.start()
            c.subscribe(["t"])
            got = []
            while len(got) < 200:
                got.extend(await c.poll(0.5))
            await c.close()
            return got

        acks = await as_node(Node("producer"), produce())
        got = await as_node(Node("consumer"), consume())
        await host.stop()
        assert sorted((a.partition, a.offset) for a in acks) == sorted((r.partition, r.offset) for r in got)
        assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(200))
        assert loop.elapsed < 60

    run(main)
