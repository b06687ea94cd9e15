"""The transaction coordinator's marker channel (broker/interbroker/marker_channel.py) against
leaders that misbehave as real ones do: a connection reset under a WriteTxnMarkers (the leader's
host came back from a power cut and no longer knows it), a leader that no longer leads, a newer
coordinator. Kafka's TransactionMarkerRequestCompletionHandler re-enqueues the markers of a
disconnected request with the partitions' current leaders, retries the retriable errors, and
stops on a fenced epoch; so does the channel. The leaders are tiny Kafka-speaking asyncio servers
on loopback (ApiVersions and WriteTxnMarkers), in this process."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import uuid

from odradek.broker.interbroker.channels import ChannelPolicy, NodeChannels
from odradek.broker.interbroker.marker_channel import WRITE_TXN_MARKERS, TransactionMarkerChannel
from odradek.cluster.metadata import EMPTY_SNAPSHOT, BrokerInfo, PartitionInfo, TopicInfo
from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import peek_header, read_header_rest, response_header

API_VERSIONS = 18
_SIZE = struct.Struct(">i")
TOPIC = "t"


class Leader:
    """A partition leader stand-in. `reset_first`: the first WriteTxnMarkers it reads is answered
    by resetting its connection (RST, as a host that forgot the connection); `hold_first`: it is
    answered only once `release` is set (a silent host); each partition is answered with
    `errors` (default 0: written). Remembers every WriteTxnMarkers
    as (connection number, [(topic, partition)])."""

    def __init__(
        self, *, reset_first: bool = False, hold_first: bool = False, errors: dict[int, int] | None = None
    ) -> None:
        self.reset_first = reset_first
        self.hold_first = hold_first  # the first WriteTxnMarkers is answered once `release` is set
        self.release = asyncio.Event()
        self.errors = errors or {}
        self.received: list[tuple[int, list[tuple[str, int]]]] = []
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> Leader:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, corr = peek_header(frame)
                flexible = messages.is_flexible(api_key, version)
                _client_id, pos = read_header_rest(frame, flexible)
                req = messages.decode_request(api_key, version, frame, pos)
                cls = messages.response_class(api_key, version)
                m = messages.module_of(cls)
                if api_key == API_VERSIONS:
                    keys = tuple(
                        messages.build_entity(m.ApiVersion, {"api_key": k, "min_version": lo, "max_version": hi})
                        for k, lo, hi in ((API_VERSIONS, 0, 3), (WRITE_TXN_MARKERS, 1, 1))
                    )
                    resp = messages.build_entity(cls, {"error_code": 0, "throttle_time": 0, "api_keys": keys})
                    body = response_header(corr, False) + messages.encode(resp)  # ApiVersions: header v0
                else:
                    assert api_key == WRITE_TXN_MARKERS
                    tps = [(t.name, int(p)) for mk in req.markers for t in mk.topics for p in t.partition_indexes]
                    self.received.append((number, tps))
                    if self.reset_first:
                        self.reset_first = False
                        sock = writer.get_extra_info("socket")
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        writer.transport.abort()  # with SO_LINGER 0: RST
                        return
                    if self.hold_first:
                        self.hold_first = False
                        await self.release.wait()
                    results = tuple(self._results(m, mk) for mk in req.markers)
                    resp = messages.build_entity(cls, {"markers": results})
                    body = response_header(corr, flexible) + messages.encode(resp)
                writer.write(_SIZE.pack(len(body)) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _results(self, m, marker):  # m: the response's kio module; marker: one of the request's
        def partition(p: int):
            fields = {"partition_index": p, "error_code": self.errors.get(int(p), 0)}
            return messages.build_entity(m.WritableTxnMarkerPartitionResult, fields)

        topics = tuple(
            messages.build_entity(
                m.WritableTxnMarkerTopicResult,
                {"name": t.name, "partitions": tuple(partition(p) for p in t.partition_indexes)},
            )
            for t in marker.topics
        )
        return messages.build_entity(m.WritableTxnMarkerResult, {"producer_id": marker.producer_id, "topics": topics})


class Metadata:
    """The coordinator's metadata: brokers at their ports, each partition of TOPIC led by a node."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.leaders: dict[int, int] = {}

    def broker_at(self, node: int, port: int) -> None:
        self.brokers[node] = BrokerInfo(node, "127.0.0.1", port)

    def endpoint_of(self, node: int) -> BrokerInfo | None:
        return self.brokers.get(node)

    @property
    def snapshot(self):
        parts = tuple(PartitionInfo(p, leader, (leader,), (leader,)) for p, leader in sorted(self.leaders.items()))
        topics = {TOPIC: TopicInfo(TOPIC, uuid.UUID(int=1), parts)} if parts else {}
        return dataclasses.replace(EMPTY_SNAPSHOT, brokers=tuple(self.brokers.values()), topics=topics)


async def not_here(*args) -> int:
    raise AssertionError(f"no partition is led by the coordinator's own broker here: {args}")


def channel(md: Metadata, policy: ChannelPolicy, write_here=not_here) -> TransactionMarkerChannel:
    return TransactionMarkerChannel(1, md, NodeChannels(1, md.endpoint_of, policy), write_here)  # type: ignore[arg-type]


def write(ch: TransactionMarkerChannel, partitions, still_valid=lambda: True):
    return ch.write_markers(1001, 0, 0, True, frozenset((TOPIC, p) for p in partitions), still_valid)


def run(main):
    asyncio.run(asyncio.wait_for(main(), 30))


def test_markers_of_a_request_whose_connection_was_reset_go_again_on_a_new_connection():
    """The leader's host restarted and answers the old connection with RST: the markers are sent
    again at once on a new connection, not after request.timeout.ms."""

    async def main():
        leader = await Leader(reset_first=True).start()
        md = Metadata()
        md.broker_at(2, leader.port)
        md.leaders = {0: 2, 1: 2}
        ch = channel(md, ChannelPolicy(request_timeout_ms=600_000))  # a wait for it would end the test
        assert await asyncio.wait_for(write(ch, [0, 1]), 10) is True
        assert leader.received == [(1, [(TOPIC, 0), (TOPIC, 1)]), (2, [(TOPIC, 0), (TOPIC, 1)])]
        ch.channels.close()
        await leader.stop()

    run(main)


def test_a_partition_its_leader_no_longer_leads_goes_to_the_leader_the_metadata_names_next():
    async def main():
        old = await Leader(errors={1: int(ErrorCode.not_leader_or_follower)}).start()
        new = await Leader().start()
        md = Metadata()
        md.broker_at(2, old.port)
        md.broker_at(3, new.port)
        md.leaders = {0: 2, 1: 2}
        ch = channel(md, ChannelPolicy())
        task = asyncio.ensure_future(write(ch, [0, 1]))
        while len(old.received) < 2:  # p1 refused and retried while the metadata is old
            await asyncio.sleep(0.01)
        md.leaders = {0: 2, 1: 3}
        assert await asyncio.wait_for(task, 10) is True
        assert old.received[0] == (1, [(TOPIC, 0), (TOPIC, 1)])
        assert all(tps == [(TOPIC, 1)] for _n, tps in old.received[1:])  # p0 was written the first time
        assert new.received == [(1, [(TOPIC, 1)])]
        ch.channels.close()
        await old.stop()
        await new.stop()

    run(main)


def test_a_request_waiting_on_one_leader_does_not_hold_back_the_retries_of_another():
    """p1's leader does not answer (its host went silent); p0's leader moved away meanwhile. As
    Kafka's queue per broker, p0 goes to its new leader at once, not once p1's request ends."""

    async def main():
        silent = await Leader(hold_first=True).start()
        old = await Leader(errors={0: int(ErrorCode.not_leader_or_follower)}).start()
        new = await Leader().start()
        md = Metadata()
        md.broker_at(2, silent.port)
        md.broker_at(3, old.port)
        md.broker_at(4, new.port)
        md.leaders = {0: 3, 1: 2}
        ch = channel(md, ChannelPolicy(request_timeout_ms=600_000))
        task = asyncio.ensure_future(write(ch, [0, 1]))
        while not old.received or not silent.received:
            await asyncio.sleep(0.01)
        md.leaders = {0: 4, 1: 2}
        await asyncio.wait_for(_until(lambda: new.received), 10)
        assert new.received == [(1, [(TOPIC, 0)])]
        assert not task.done()
        silent.release.set()
        assert await asyncio.wait_for(task, 10) is True
        assert silent.received == [(1, [(TOPIC, 1)])]  # sent once: never in two requests at once
        ch.channels.close()
        for leader in (silent, old, new):
            await leader.stop()

    run(main)


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_a_fenced_coordinator_gives_up_and_a_moved_shard_stops_the_retries():
    async def main():
        fenced = await Leader(errors={0: int(ErrorCode.transaction_coordinator_fenced)}).start()
        md = Metadata()
        md.broker_at(2, fenced.port)
        md.leaders = {0: 2}
        ch = channel(md, ChannelPolicy())
        assert await asyncio.wait_for(write(ch, [0]), 10) is False
        assert len(fenced.received) == 1

        md.leaders = {0: -1}  # no leader: retried until the coordinator's shard moves
        valid = [True]
        task = asyncio.ensure_future(write(ch, [0], still_valid=lambda: valid[0]))
        await asyncio.sleep(0.5)
        assert not task.done()
        valid[0] = False
        assert await asyncio.wait_for(task, 10) is False
        assert len(fenced.received) == 1
        ch.channels.close()
        await fenced.stop()

    run(main)


def test_markers_for_partitions_led_here_are_written_here():
    async def main():
        md = Metadata()
        md.leaders = {0: 1, 1: 1}
        written: list[tuple] = []

        async def write_here(topic, p, pid, epoch, coordinator_epoch, commit, timeout_ms):
            written.append((topic, p, pid, epoch, coordinator_epoch, commit, timeout_ms))
            return 0

        ch = channel(md, ChannelPolicy(request_timeout_ms=1234), write_here)
        assert await write(ch, [0, 1]) is True
        assert sorted(written) == [(TOPIC, 0, 1001, 0, 0, True, 1234), (TOPIC, 1, 1001, 0, 0, True, 1234)]

    run(main)
