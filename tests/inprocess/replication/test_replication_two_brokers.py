"""Two brokers' replica managers on one event loop, replicating over real sockets.

Broker 1 (the leader, and the controller) answers on a loopback listener with the real
handlers (Fetch, ListOffsets, ApiVersions, over the protocol's ServerConnection and the
handlers' own codecs); broker 2 follows with the real replica fetcher (fetcher state, leader
endpoint, the asyncio loop) and the real client connection. The controller's decisions are
played by `Hub`, in the test: it holds the metadata, answers AlterPartition as Kafka's
controller does (leader epoch, partition epoch, KIP-903 broker epochs) and delivers every new
snapshot to both replica managers, as ZooKeeper's watches would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from support.batches import batch

from odradek.broker.config import BrokerConfig
from odradek.broker.connection import served_apis
from odradek.broker.connection_state import ConnectionState
from odradek.broker.fetch_session import FetchSessionCache
from odradek.broker.registry import REGISTRY, RequestContext, load_handlers, make
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication import alter_partition
from odradek.broker.replication.alter_partition import AlterPartitionSender
from odradek.broker.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from odradek.broker.services import BrokerServices
from odradek.broker.topic_configs import TopicConfigs
from odradek.cluster.metadata import BrokerInfo, ClusterSnapshot, MetadataDelta, PartitionInfo, TopicInfo
from odradek.protocol import messages
from odradek.protocol.connection import NEED_DATA, ImmediateResponse, ServerConnection
from odradek.protocol.errors import ErrorCode
from odradek.storage import LogConfig, LogManager

ALTER_PARTITION = 56
EPOCHS = {1: 0x1000001, 2: 0x1000002}  # each broker's registration (its broker epoch)

Override = Callable[[Any, int], Awaitable[Any]]


class PeerServer:
    """A broker's listener: the real handlers over `services`; an API key in `overrides` is
    answered by the test's coroutine instead (None: close the connection unanswered)."""

    def __init__(self, services: BrokerServices, overrides: dict[int, Override]) -> None:
        self.services = services
        self.overrides = overrides
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self._ids = 0

    async def start(self) -> int:
        load_handlers()
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._ids += 1
        proto = ServerConnection(served_apis(), 1 << 28, authenticated=True)
        state = ConnectionState(self._ids, "peer")
        try:
            while data := await reader.read(1 << 16):
                proto.receive_data(data)
                while (event := proto.next_event()) is not NEED_DATA:
                    if isinstance(event, ImmediateResponse):
                        writer.write(event.data)
                        continue
                    override = self.overrides.get(event.api_key)
                    if override is not None:
                        response = await override(event.request, event.api_version)
                        if response is None:
                            return
                        writer.write(proto.send(event, response))
                    else:
                        handler = REGISTRY[event.api_key]
                        ctx = RequestContext(
                            self.services, state, event.api_key, event.api_version, event.correlation_id, "peer"
                        )
                        response = await handler.fn(ctx, event.request)
                        chunks, size = handler.encode_response(event.api_version, response)
                        for c in proto.send_chunks(event, chunks, size):
                            writer.write(c if isinstance(c, bytes | bytearray | memoryview) else _region(c))
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _region(r: Any) -> bytes:
    return r if isinstance(r, bytes) else os.pread(r.fd, r.length, r.position)


class Hub:
    """The metadata both brokers see and the controller's answers to AlterPartition."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.managers: list[ReplicaManager] = []
        self.requests: list[Any] = []  # the AlterPartition requests received
        self.drop_answers = 0  # apply, then close the connection without answering (a lost answer)

    def add_listener(self, listener: Any) -> None:
        pass

    async def publish(self, after: ClusterSnapshot) -> None:
        before, self.snapshot = self.snapshot, after
        for rm in self.managers:
            await rm.on_metadata(MetadataDelta(before, after))

    def partition(self, topic: str, p: int) -> PartitionInfo:
        return self.snapshot.topics[topic].partitions[p]

    async def set_partition(self, topic: str, info: PartitionInfo) -> None:
        t = self.snapshot.topics[topic]
        parts = tuple(info if q.partition == info.partition else q for q in t.partitions)
        topics = {**self.snapshot.topics, topic: dataclasses.replace(t, partitions=parts)}
        await self.publish(dataclasses.replace(self.snapshot, topics=topics))

    async def set_configs(self, topic: str, configs: dict[str, str]) -> None:
        t = self.snapshot.topics[topic]
        topics = {**self.snapshot.topics, topic: dataclasses.replace(t, configs=configs)}
        await self.publish(dataclasses.replace(self.snapshot, topics=topics))

    async def alter_partition(self, req: Any, version: int) -> Any:
        self.requests.append(req)
        cls = messages.response_class(ALTER_PARTITION, version)
        mod = messages.module_of(cls)
        topics = []
        for t in req.topics:
            name = self.snapshot.topic_by_id(t.topic_id).name
            parts = []
            for p in t.partitions:
                cur = self.partition(name, p.partition_index)
                new_isr = tuple(int(b.broker_id) for b in p.new_isr_with_epochs)
                if p.leader_epoch != cur.leader_epoch:
                    code = ErrorCode.fenced_leader_epoch
                elif p.partition_epoch != cur.partition_epoch:
                    code = ErrorCode.invalid_update_version
                elif any(b.broker_epoch not in (-1, EPOCHS[int(b.broker_id)]) for b in p.new_isr_with_epochs):
                    code = ErrorCode.ineligible_replica  # KIP-903: not its current registration
                else:
                    code = ErrorCode.none
                    cur = dataclasses.replace(cur, isr=new_isr, partition_epoch=cur.partition_epoch + 1)
                    await self.set_partition(name, cur)
                parts.append(
                    make(
                        mod.PartitionData,
                        partition_index=p.partition_index,
                        error_code=code,
                        leader_id=cur.leader,
                        leader_epoch=cur.leader_epoch,
                        isr=cur.isr,
                        leader_recovery_state=0,
                        partition_epoch=cur.partition_epoch,
                    )
                )
            topics.append(make(mod.TopicData, topic_id=t.topic_id, partitions=tuple(parts)))
        if self.drop_answers:
            self.drop_answers -= 1
            return None
        return make(cls, throttle_time=0, error_code=0, topics=tuple(topics))


class TwoBrokers:
    def __init__(self, tmp_path, topics: dict[str, tuple[int, dict[str, str]]]) -> None:
        self.tmp = tmp_path
        ids = {name: uuid.uuid4() for name in topics}
        self.hub = Hub(
            ClusterSnapshot(
                "c",
                1,
                (BrokerInfo(1, "127.0.0.1", 1, epoch=EPOCHS[1]), BrokerInfo(2, "127.0.0.1", 2, epoch=EPOCHS[2])),
                {
                    name: TopicInfo(
                        name, ids[name], tuple(PartitionInfo(p, 1, (1, 2), (1,)) for p in range(n)), configs
                    )
                    for name, (n, configs) in topics.items()
                },
            )
        )
        self.config = BrokerConfig({"log.dirs": str(tmp_path), "replica.fetch.backoff.ms": "100"})
        self.fetcher_config = FetcherConfig(wait_max_ms=100, backoff_ms=100)
        self.logs: list[LogManager] = []
        self.server: PeerServer | None = None

    def manager(self, node: int, dirs: int = 1, **kw: Any) -> ReplicaManager:
        lm = LogManager([str(self.tmp / f"b{node}-{d}") for d in range(dirs)], LogConfig())
        lm.load()
        self.logs.append(lm)
        rm = ReplicaManager(node, lm, TopicConfigs(self.config), log_dirs=lm.log_dirs, **kw)
        self.hub.managers.append(rm)
        return rm

    async def start_leader(self) -> ReplicaManager:
        rm = self.manager(1, alter_isr=AlterPartitionSender(1, self.hub), replica_lag_max_ms=60_000)
        services = BrokerServices(
            config=self.config,
            node_id=1,
            cluster_id="c",
            metadata=self.hub,  # type: ignore[arg-type]
            topics=None,  # type: ignore[arg-type]
            replica_manager=rm,
            group_coordinator=None,  # type: ignore[arg-type]
            fetch_sessions=FetchSessionCache(100),
            producer_ids=None,  # type: ignore[arg-type]
            config_admin=None,  # type: ignore[arg-type]
            txn_coordinator=None,  # type: ignore[arg-type]
            txn_verification=None,  # type: ignore[arg-type]
        )
        self.server = PeerServer(services, {ALTER_PARTITION: self.hub.alter_partition})
        port = await self.server.start()
        brokers = tuple(dataclasses.replace(b, port=port) if b.node_id == 1 else b for b in self.hub.snapshot.brokers)
        self.hub.snapshot = dataclasses.replace(self.hub.snapshot, brokers=brokers)
        await rm.on_metadata(MetadataDelta(dataclasses.replace(self.hub.snapshot, topics={}), self.hub.snapshot))
        await rm.start()
        return rm

    async def start_follower(self, dirs: int = 1) -> ReplicaManager:
        rm = self.manager(2, dirs, fetchers=ReplicaFetcherManager(2, self.fetcher_config, self.hub))
        await rm.on_metadata(MetadataDelta(dataclasses.replace(self.hub.snapshot, topics={}), self.hub.snapshot))
        return rm

    async def close(self) -> None:
        for rm in self.hub.managers:
            await rm.stop()
        if self.server is not None:
            await self.server.stop()
        for lm in self.logs:
            lm.shutdown()

    async def wait(self, what: str, condition: Callable[[], bool], timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.02)


def in_isr(hub: Hub, topic: str) -> list[int]:
    return [p.partition for p in hub.snapshot.topics[topic].partitions if 2 in p.isr]


def same_log(leader: ReplicaManager, follower: ReplicaManager, topic: str, p: int) -> bool:
    a, b = leader.partitions[(topic, p)].log, follower.partitions[(topic, p)].log
    end = a.log_end_offset
    return b.log_end_offset == end and a.read_bytes(0, 1 << 30, max_offset=end) == b.read_bytes(
        0, 1 << 30, max_offset=end
    )


def test_a_follower_refetching_batches_larger_than_a_lowered_max_message_bytes(tmp_path):
    """The reproduction of issue 25: topic `big` had max.message.bytes 200 KB when its ~150 KB
    batches were written; it is lowered to 50 KB; broker 2 (a new replica, or one whose disk was
    replaced) then copies everything. Every partition, `big`'s and the 6 of `t` fetched by the
    same fetcher, catches up, returns to the ISR and holds the leader's bytes."""

    async def main() -> None:
        c = TwoBrokers(tmp_path, {"big": (1, {"max.message.bytes": "200000"}), "t": (6, {})})
        try:
            leader = await c.start_leader()
            for _ in range(4):
                (r,) = await leader.append_records([("big", 0, batch(10, size=150_000))], 1, 1000)
                assert r.error_code == 0
            await c.hub.set_configs("big", {"max.message.bytes": "50000"})
            for p in range(6):
                for _ in range(3):
                    (r,) = await leader.append_records([("t", p, batch(5))], 1, 1000)
                    assert r.error_code == 0
            follower = await c.start_follower()
            assert follower.partitions[("big", 0)].log.config.max_message_bytes == 50000
            await c.wait(
                "every partition back in the ISR", lambda: in_isr(c.hub, "big") == [0] and len(in_isr(c.hub, "t")) == 6
            )
            assert same_log(leader, follower, "big", 0)
            assert all(same_log(leader, follower, "t", p) for p in range(6))
            # the ISR {1, 2} now holds acks=all writes back until the follower has them
            (r,) = await leader.append_records([("t", 0, batch(1))], -1, 5000)
            assert r.error_code == 0 and follower.partitions[("t", 0)].log_end_offset == 16
            proposals = [p for req in c.hub.requests for t in req.topics for p in t.partitions]
            assert {(int(b.broker_id), int(b.broker_epoch)) for p in proposals for b in p.new_isr_with_epochs} == {
                (1, EPOCHS[1]),
                (2, EPOCHS[2]),  # learnt from broker 2's Fetch v15
            }
        finally:
            await c.close()

    asyncio.run(main())


def test_a_failed_log_directory_on_the_follower_parks_only_its_partitions(tmp_path):
    """JBOD: one of the follower's two log directories fails. Its partitions stop (parked: the
    replica is offline here); the others, fetched by the same fetcher, stay in sync."""

    async def main() -> None:
        c = TwoBrokers(tmp_path, {"t": (6, {})})
        try:
            leader = await c.start_leader()
            follower = await c.start_follower(dirs=2)
            await c.wait("all in the ISR", lambda: len(in_isr(c.hub, "t")) == 6)
            bad_dir = follower.partitions[("t", 0)].log.dir_state
            bad_dir.fail(OSError(5, "Input/output error"))
            on_bad = [p for p in range(6) if follower.partitions[("t", p)].log.dir_state is bad_dir]
            on_good = [p for p in range(6) if p not in on_bad]
            assert on_bad and on_good
            for p in range(6):
                (r,) = await leader.append_records([("t", p, batch(4))], 1, 1000)
                assert r.error_code == 0
            await c.wait(
                "the healthy partitions caught up", lambda: all(same_log(leader, follower, "t", p) for p in on_good)
            )
            fetcher = next(iter(follower.fetchers.fetchers.values()))
            await c.wait(
                "the failed ones parked", lambda: all(fetcher.state.partitions[("t", p)].parked for p in on_bad)
            )
            for p in on_bad:
                assert "KafkaStorageError" in fetcher.state.partitions[("t", p)].parked
            for p in on_good:
                assert fetcher.state.partitions[("t", p)].parked is None
        finally:
            await c.close()

    asyncio.run(main())


def test_an_isr_expansion_whose_answer_is_lost_stays_pending_until_the_metadata_says(tmp_path, monkeypatch):
    """Audit §7: the controller applies the leader's expansion but its answer is lost (the
    connection closes). The sender sends it again; the retry is refused (INVALID_UPDATE_VERSION:
    the first attempt was applied). Meanwhile the proposal stays pending, so the high watermark
    counts the follower, and ends when the metadata brings the state the controller wrote."""
    monkeypatch.setattr(alter_partition, "RETRY_S", 0.05)

    async def main() -> None:
        c = TwoBrokers(tmp_path, {"t": (1, {})})
        c.hub.drop_answers = 1
        published: list[PartitionInfo] = []
        publish = c.hub.publish

        async def held(after: ClusterSnapshot) -> None:  # the watch is slow: hold the new state back
            published.append(after.topics["t"].partitions[0])
            c.hub.snapshot = after

        try:
            leader = await c.start_leader()
            c.hub.publish = held  # type: ignore[method-assign]
            await c.start_follower()
            part = leader.partitions[("t", 0)]
            await c.wait("two AlterPartition attempts", lambda: len(c.hub.requests) >= 2)
            await asyncio.sleep(0.2)
            assert [p.isr for p in published] == [(1, 2)]  # applied once
            assert part.isr == (1,) and part.pending_isr == (1, 2)  # answer lost, retry refused: pending
            assert len(c.hub.requests) == 2  # not sent again after the refusal
            (r,) = await leader.append_records([("t", 0, batch(1))], 1, 1000)
            await asyncio.sleep(0.3)
            assert part.high_watermark == part.log_end_offset  # the follower (counted) fetched it
            c.hub.publish = publish  # type: ignore[method-assign]
            before = dataclasses.replace(c.hub.snapshot, topics={})
            for rm in c.hub.managers:  # the watch delivers at last
                await rm.on_metadata(MetadataDelta(before, c.hub.snapshot))
            assert part.pending is None and part.isr == (1, 2) and part.partition_epoch == 1
        finally:
            await c.close()

    asyncio.run(main())


def test_the_follower_fetches_in_a_session_naming_only_partitions_that_moved(tmp_path, monkeypatch):
    """KIP-227 between brokers: after the first (full) Fetch the follower's requests are
    incremental in one session and name only the partitions whose position moved; the idle
    topic's partitions are not named again, yet stay in the ISR (the leader reads them on from
    the session). When the leader loses the session (restarted, evicted) the follower opens a new
    one with a full request, and replication goes on."""
    seen: list[tuple[int, int, list[tuple[object, int]], list[tuple[object, int]]]] = []
    resolve = FetchSessionCache.resolve

    def recording(self, session_id, epoch, requested, forgotten, *, sessions_allowed):  # noqa: ANN001, ANN202
        seen.append((session_id, epoch, [(k, p) for k, p, _cp in requested], list(forgotten)))
        return resolve(self, session_id, epoch, requested, forgotten, sessions_allowed=sessions_allowed)

    monkeypatch.setattr(FetchSessionCache, "resolve", recording)

    async def main() -> None:
        c = TwoBrokers(tmp_path, {"t": (2, {}), "idle": (4, {})})
        try:
            leader = await c.start_leader()
            follower = await c.start_follower()
            await c.wait("all in the ISR", lambda: len(in_isr(c.hub, "t")) == 2 and len(in_isr(c.hub, "idle")) == 4)
            t_id, idle_id = (c.hub.snapshot.topics[n].topic_id for n in ("t", "idle"))
            await c.wait("a second Fetch", lambda: len(seen) >= 3)
            assert seen[0][:2] == (0, 0) and len(seen[0][2]) == 6  # the first: full, opening a session
            session_ids = {s for s, e, _r, _f in seen if e > 0}
            assert len(session_ids) == 1 and 0 not in session_ids
            mark = len(seen)
            for _ in range(5):
                (r,) = await leader.append_records([("t", 0, batch(3))], -1, 5000)  # acks=all: the follower has it
                assert r.error_code == 0
            await c.wait("t-0 copied", lambda: same_log(leader, follower, "t", 0))
            later = seen[mark:]
            assert later and all(e > 0 and s in session_ids for s, e, _r, _f in later)
            named = {kp for _s, _e, r, _f in later for kp in r}
            assert named == {(t_id.int, 0)}, named  # never t-1 nor the idle topic (ids keyed by their integer)
            assert all(not f for _s, _e, _r, f in later)
            assert len(in_isr(c.hub, "idle")) == 4
            (sid,) = session_ids
            assert set(c.server.services.fetch_sessions.sessions[sid].partitions) == {  # type: ignore[union-attr]
                *((t_id.int, p) for p in range(2)),
                *((idle_id.int, p) for p in range(4)),
            }

            c.server.services.fetch_sessions.sessions.clear()  # type: ignore[union-attr]
            mark = len(seen)
            (r,) = await leader.append_records([("t", 1, batch(4))], -1, 5000)
            assert r.error_code == 0
            await c.wait("t-1 copied", lambda: same_log(leader, follower, "t", 1))
            again = seen[mark:]
            full = [i for i, (s, e, _r, _f) in enumerate(again) if (s, e) == (0, 0)]
            assert full and len(again[full[0]][2]) == 6  # a new session, all partitions named again
            assert len(in_isr(c.hub, "t")) == 2 and len(in_isr(c.hub, "idle")) == 4
        finally:
            await c.close()

    asyncio.run(main())


def seed_log(tmp_path, node: int, epochs: list[tuple[int, bytes | None]]) -> None:
    """Broker `node`'s log of t-0 before it starts: `epochs` as (leader epoch, the batch written
    in it); None: an epoch its leader began without writing (a leader records its epoch when
    elected)."""
    lm = LogManager([str(tmp_path / f"b{node}-0")], LogConfig())
    lm.load()
    lg = lm.create_log("t", 0, LogConfig())
    for epoch, records in epochs:
        if records is None:
            lg.assign_epoch_start_offset(epoch, lg.log_end_offset)
        else:
            lg.append(records, leader_epoch=epoch)
    lm.shutdown()


def test_a_follower_told_twice_where_its_log_diverges_truncates_twice_and_rejoins_the_isr(tmp_path):
    """KIP-320 in a fetch session, two steps (Kafka's rule: a follower without the leader's
    diverging epoch truncates to the end of its own epoch below it, and the next fetch says
    where the logs meet). The leader wrote 8 records in epoch 0, 2 in epoch 1, and leads epoch
    3 from offset 10; the follower has 10 records of epoch 0 and 2 of epoch 2. Its first
    Fetch (at 12, epoch 2) diverges at (1, 10): it truncates to 10, the end of its epoch 0.
    The next (at 10, epoch 0, incremental) diverges at (0, 8), the high watermark unchanged:
    the leader must say so again, else the follower waits for news forever, out of the ISR."""

    async def main() -> None:
        c = TwoBrokers(tmp_path, {"t": (1, {})})
        info = dataclasses.replace(c.hub.partition("t", 0), leader_epoch=3)
        t = c.hub.snapshot.topics["t"]
        c.hub.snapshot = dataclasses.replace(c.hub.snapshot, topics={"t": dataclasses.replace(t, partitions=(info,))})
        both = batch(8)  # epoch 0's first 8 records, copied by both
        seed_log(tmp_path, 1, [(0, both), (1, batch(2))])
        seed_log(tmp_path, 2, [(0, both), (0, batch(2)), (2, batch(2))])
        try:
            leader = await c.start_leader()
            assert leader.partitions[("t", 0)].log.log_end_offset == 10
            follower = await c.start_follower()
            await c.wait("the follower in the ISR", lambda: in_isr(c.hub, "t") == [0], 10)
            assert same_log(leader, follower, "t", 0)
        finally:
            await c.close()

    asyncio.run(main())


def test_a_long_polled_follower_fetch_records_the_followers_position_once(tmp_path, monkeypatch):
    """As Kafka (ReplicaManager.fetchMessages reads with updateFetchState, DelayedFetch's read
    after the wake-up without): each follower Fetch records the follower's position once, on
    arrival, whether it is answered at once, woken by an acks=all append, or after its max wait."""
    from odradek.broker.partition import Partition

    fetches: list[int] = []
    recorded: list[int] = []
    resolve, record = FetchSessionCache.resolve, Partition._record_fetch

    def counting_resolve(self, session_id, epoch, requested, forgotten, *, sessions_allowed):  # noqa: ANN001, ANN202
        fetches.append(epoch)
        return resolve(self, session_id, epoch, requested, forgotten, sessions_allowed=sessions_allowed)

    def counting_record(self, st, fetch_offset, leader_leo, broker_epoch, now_ms):  # noqa: ANN001, ANN202
        recorded.append(fetch_offset)
        return record(self, st, fetch_offset, leader_leo, broker_epoch, now_ms)

    monkeypatch.setattr(FetchSessionCache, "resolve", counting_resolve)
    monkeypatch.setattr(Partition, "_record_fetch", counting_record)

    async def main() -> None:
        c = TwoBrokers(tmp_path, {"t": (1, {})})
        try:
            leader = await c.start_leader()
            follower = await c.start_follower()
            await c.wait("in the ISR", lambda: in_isr(c.hub, "t") == [0])
            for i in range(10):
                await asyncio.sleep(0.03 if i % 2 else 0.15)  # the follower's poll woken, or timed out (100 ms)
                (r,) = await leader.append_records([("t", 0, batch(1))], -1, 5000)
                assert r.error_code == 0
            await c.wait("t-0 copied", lambda: same_log(leader, follower, "t", 0))
            assert len(fetches) > 12
            # each Fetch read on arrival (recorded) and, if it waited, again (not recorded)
            assert len(recorded) == len(fetches), (len(recorded), len(fetches))
            assert leader.partitions[("t", 0)].followers[2].log_end_offset == recorded[-1]
        finally:
            await c.close()

    asyncio.run(main())
