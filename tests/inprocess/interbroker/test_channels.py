"""The inter-broker channels' policy (broker/interbroker/channels.py): one connection per (peer,
purpose), endpoints followed from the metadata, the request timeout, the reconnect backoff and
closing; and the forwarding manager over them (ControlledShutdown's hand-written codec). Against
a tiny Kafka-speaking asyncio server on loopback in this process: it answers ApiVersions (and
holds requests a test marks, as a leader holds a Fetch) and ControlledShutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import struct

import pytest

from odradek.broker.interbroker.channels import ChannelPolicy, NodeChannels, NodeUnavailable, Purpose
from odradek.broker.interbroker.forwarding import ForwardingManager
from odradek.client.errors import RequestTimedOutError
from odradek.cluster.metadata import EMPTY_SNAPSHOT, BrokerInfo
from odradek.protocol import messages
from odradek.protocol.headers import peek_header, read_header_rest, response_header
from odradek.protocol.legacy import controlled_shutdown as cs

API_VERSIONS = 18
HOLD = "hold-me"  # client_software_name of a request the server never answers
_SIZE = struct.Struct(">i")


class Peer:
    """A broker stand-in: answers ApiVersions (the handshake, and test requests), holds one whose
    software name is HOLD (and, in order, every later one on that connection), counts
    connections and remembers each one's client id."""

    def __init__(self) -> None:
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.client_ids: list[str | None] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.shutdowns: list[cs.ControlledShutdownRequest] = []

    async def start(self, port: int = 0) -> Peer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def accepted(self) -> int:
        return len(self.client_ids)

    def drop_connections(self) -> None:
        for w in self.writers:
            w.close()
        self.writers.clear()

    async def stop(self) -> None:
        self.drop_connections()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        first, held = True, False
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, corr = peek_header(frame)
                flexible = version >= 3 if api_key == cs.API_KEY else messages.is_flexible(api_key, version)
                client_id, pos = read_header_rest(frame, flexible)
                if first:
                    self.client_ids.append(client_id)
                    first = False
                if api_key == cs.API_KEY:
                    self.shutdowns.append(cs.decode_request(version, frame, pos))
                    answer = cs.ControlledShutdownResponse(0, (("t", 0), ("u", 3)))
                    body = response_header(corr, flexible) + cs.encode_response(version, answer)
                    writer.write(_SIZE.pack(len(body)) + body)
                    continue
                assert api_key == API_VERSIONS
                req = messages.decode_request(api_key, version, frame, pos)
                if held or req.client_software_name == HOLD:
                    held = True  # answers leave in request order: everything after it waits too
                    continue
                cls = messages.response_class(api_key, version)
                ours = messages.build_entity(
                    messages.module_of(cls).ApiVersion, {"api_key": API_VERSIONS, "min_version": 0, "max_version": 3}
                )
                resp = messages.build_entity(cls, {"error_code": 0, "throttle_time": 0, "api_keys": (ours,)})
                body = response_header(corr, False) + messages.encode(resp)  # ApiVersions: header v0
                writer.write(_SIZE.pack(len(body)) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class Metadata:
    """What the channels look endpoints up in (node id -> BrokerInfo), changed by the test; and
    a metadata store's `snapshot` (its brokers and controller) for the forwarding manager."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id = -1

    def at(self, node: int, port: int) -> None:
        self.brokers[node] = BrokerInfo(node, "127.0.0.1", port)

    def __call__(self, node: int) -> BrokerInfo | None:
        return self.brokers.get(node)

    @property
    def snapshot(self):
        return dataclasses.replace(
            EMPTY_SNAPSHOT, brokers=tuple(self.brokers.values()), controller_id=self.controller_id
        )


def ask(channels: NodeChannels, node: int, purpose: str, *, hold: bool = False):
    data = {"client_software_name": HOLD if hold else "test", "client_software_version": "1"}
    return channels.request(node, purpose, API_VERSIONS, data, version=3)


def run(main):
    asyncio.run(asyncio.wait_for(main(), 30))


def test_one_connection_per_peer_and_purpose_named_in_the_client_id():
    async def main():
        peer = await Peer().start()
        md = Metadata()
        md.at(2, peer.port)
        ch = NodeChannels(1, md, ChannelPolicy())
        a = await ch.connection(2, Purpose.TXN_MARKERS)
        assert await ch.connection(2, Purpose.TXN_MARKERS) is a
        assert await ch.connect(BrokerInfo(2, "127.0.0.1", peer.port), Purpose.TXN_MARKERS) is a  # as a provider
        both = await asyncio.gather(*(ch.connection(2, Purpose.FORWARDING) for _ in range(5)))
        assert len({id(c) for c in both}) == 1 and both[0] is not a  # concurrent callers share one connect
        assert (await ask(ch, 2, Purpose.TXN_MARKERS)).error_code == 0
        assert peer.accepted == 2
        assert sorted(peer.client_ids) == ["broker-1-forwarding", "broker-1-txn-markers"]
        ch.close()
        await peer.stop()

    run(main)


def test_a_held_fetch_does_not_hold_up_another_purpose():
    """Answers come in request order on one connection: a long-polling Fetch would delay an
    AlterPartition queued behind it. On their own connections it does not."""

    async def main():
        peer = await Peer().start()
        md = Metadata()
        md.at(2, peer.port)
        ch = NodeChannels(1, md, ChannelPolicy())
        held = asyncio.ensure_future(ask(ch, 2, Purpose.replica_fetcher(0), hold=True))
        await asyncio.sleep(0.05)
        assert (await asyncio.wait_for(ask(ch, 2, Purpose.ALTER_PARTITION), 2)).error_code == 0
        assert not held.done()
        # the same request on the fetcher's connection waits behind the held one
        behind = asyncio.ensure_future(ask(ch, 2, Purpose.replica_fetcher(0)))
        await asyncio.sleep(0.2)
        assert not behind.done()
        ch.close()
        for t in (held, behind):
            with pytest.raises(Exception):  # noqa: B017 - the connection closed under them
                await t
        await peer.stop()

    run(main)


def test_request_timeout_closes_the_connection_and_the_next_request_reconnects():
    async def main():
        peer = await Peer().start()
        md = Metadata()
        md.at(2, peer.port)
        policy = ChannelPolicy(request_timeout_ms=200, replica_fetch_wait_max_ms=300, reconnect_backoff_ms=10)
        ch = NodeChannels(1, md, policy)
        assert (await ch.connection(2, Purpose.TXN_MARKERS)).request_timeout == 0.2
        assert (await ch.connection(2, Purpose.replica_fetcher(1))).request_timeout == 0.5  # + the fetch wait
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(RequestTimedOutError):
            await ask(ch, 2, Purpose.TXN_MARKERS, hold=True)
        assert 0.19 <= loop.time() - t0 < 2
        assert (await ask(ch, 2, Purpose.TXN_MARKERS)).error_code == 0  # a new connection
        assert peer.accepted == 3
        ch.close()
        await peer.stop()

    run(main)


def test_reconnect_backoff_doubles_up_to_its_maximum_and_a_success_resets_it():
    async def main():
        probe = await Peer().start()
        dead_port = probe.port
        await probe.stop()  # nothing listens there now: connects are refused
        md = Metadata()
        md.at(2, dead_port)
        policy = ChannelPolicy(reconnect_backoff_ms=40, reconnect_backoff_max_ms=160)
        ch = NodeChannels(1, md, policy, rand=lambda: 0.5)  # jitter factor exactly 1
        loop = asyncio.get_running_loop()
        waits = []
        for _ in range(5):
            t0 = loop.time()
            with pytest.raises(NodeUnavailable):
                await ch.connection(2, Purpose.TXN_MARKERS)
            waits.append(loop.time() - t0)
        assert waits[0] < 0.03  # the first attempt does not wait
        for got, want in zip(waits[1:], (0.04, 0.08, 0.16, 0.16)):
            assert want * 0.9 <= got < want + 0.15, waits
        # other purposes have backoffs of their own
        t0 = loop.time()
        with pytest.raises(NodeUnavailable):
            await ch.connection(2, Purpose.FORWARDING)
        assert loop.time() - t0 < 0.03
        # the peer comes back on the same port: the next attempt (after the backoff) succeeds ...
        peer = await Peer().start(dead_port)
        conn = await ch.connection(2, Purpose.TXN_MARKERS)
        # ... and resets the backoff: a lost connection waits the initial backoff again, not the maximum
        peer.drop_connections()
        while conn.connected:
            await asyncio.sleep(0.001)
        lost = loop.time()
        assert await ch.connection(2, Purpose.TXN_MARKERS) is not conn
        assert 0.036 <= loop.time() - lost < 0.15
        ch.close()
        await peer.stop()

    run(main)


def test_backoff_jitter_is_twenty_percent_either_way():
    p = ChannelPolicy(reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000)
    assert [p.backoff_ms(n, 0.5) for n in (1, 2, 3, 4, 5, 6, 40)] == [50, 100, 200, 400, 800, 1000, 1000]
    assert p.backoff_ms(1, 0.0) == pytest.approx(40) and p.backoff_ms(1, 0.999999) == pytest.approx(60)
    assert p.backoff_ms(5, 0.0) == pytest.approx(640) and p.backoff_ms(6, 0.0) == 1000  # capped after the jitter


def test_a_peer_that_moved_is_followed_at_once():
    async def main():
        old, new = await Peer().start(), await Peer().start()
        md = Metadata()
        md.at(2, old.port)
        ch = NodeChannels(1, md, ChannelPolicy(reconnect_backoff_ms=5000, reconnect_backoff_max_ms=5000))
        first = await ch.connection(2, Purpose.TXN_VERIFICATION)
        await old.stop()  # the broker stops ...
        await asyncio.sleep(0.05)
        assert not first.connected
        md.at(2, new.port)  # ... and registers again on another port
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert (await ask(ch, 2, Purpose.TXN_VERIFICATION)).error_code == 0
        assert loop.time() - t0 < 1  # no backoff for a new endpoint (it would be 5 s)
        assert new.accepted == 1
        # a live connection to a stale endpoint is replaced too
        third = await Peer().start()
        md.at(2, third.port)
        assert (await ask(ch, 2, Purpose.TXN_VERIFICATION)).error_code == 0
        assert third.accepted == 1
        ch.close()
        await new.stop()
        await third.stop()

    run(main)


def test_a_node_the_metadata_does_not_hold_is_unavailable_at_once():
    async def main():
        ch = NodeChannels(1, Metadata(), ChannelPolicy())
        with pytest.raises(NodeUnavailable, match="not in the metadata"):
            await ch.connection(7, Purpose.FORWARDING)

    run(main)


def test_close_closes_every_connection_and_refuses_new_ones():
    async def main():
        peer = await Peer().start()
        md = Metadata()
        md.at(2, peer.port)
        ch = NodeChannels(1, md, ChannelPolicy())
        conns = [await ch.connection(2, p) for p in (Purpose.FORWARDING, Purpose.replica_fetcher(0))]
        held = asyncio.ensure_future(ask(ch, 2, Purpose.FORWARDING, hold=True))
        await asyncio.sleep(0.05)
        ch.close()
        assert not any(c.connected for c in conns)
        with pytest.raises(Exception):  # noqa: B017 - failed by the close, not left hanging
            await asyncio.wait_for(held, 1)
        with pytest.raises(NodeUnavailable, match="closed"):
            await ch.connection(2, Purpose.FORWARDING)
        await peer.stop()

    run(main)


def test_forwarding_goes_to_the_controller_the_metadata_names_never_to_itself():
    async def main():
        peer = await Peer().start()
        md = Metadata()
        md.at(1, 1)  # this broker (never dialled)
        md.at(2, peer.port)
        ch = NodeChannels(1, md, ChannelPolicy())
        fwd = ForwardingManager(1, md, ch)  # md stands in for the metadata store (its snapshot)
        data = {"client_software_name": "test", "client_software_version": "1"}
        assert await fwd.forward(API_VERSIONS, data, 3) is None  # no controller known: NOT_CONTROLLER
        md.controller_id = 1
        assert await fwd.forward(API_VERSIONS, data, 3) is None  # this broker is the controller
        md.controller_id = 2
        assert (await fwd.forward(API_VERSIONS, data, 3)).error_code == 0
        # ControlledShutdown v3: kio has no schema; the body and the answer go through its hand-written codec
        resp = await fwd.controlled_shutdown()
        assert resp == cs.ControlledShutdownResponse(0, (("t", 0), ("u", 3)))
        assert peer.shutdowns == [cs.ControlledShutdownRequest(1, -1)]
        assert peer.accepted == 1 and peer.client_ids == ["broker-1-forwarding"]  # one connection for both
        await peer.stop()
        md.controller_id = 3  # a controller the metadata has no endpoint for
        with pytest.raises(NodeUnavailable):
            await fwd.controlled_shutdown()
        assert await fwd.forward(API_VERSIONS, data, 3) is None
        ch.close()

    run(main)
