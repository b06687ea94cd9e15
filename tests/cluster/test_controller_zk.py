"""The controller against a real ZooKeeper, in this process: one broker's metadata store and
controller (the real ones) on this test's event loop, other brokers' registrations written
directly where a test needs them.

What is checked here needs ZooKeeper's answers but not broker processes: a write refused for
one partition leaves the others written; a topic deletion is done once, and only once every
live broker has dropped the topic; AlterPartition's broker-epoch checks (KIP-903) over real
registrations; a clean answer, in bounded time, when ZooKeeper is gone.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time

import pytest
from kazoo.client import KazooClient

from odradek.cli.zookeeper_server import ZooKeeperServer
from odradek.cluster import zk_layout as L
from odradek.cluster.controller import Controller, ControllerError, IsrChange
from odradek.cluster.controller_writes import unregistered
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.store import MetadataTimeout
from odradek.cluster.zk_client import cluster_id
from odradek.cluster.zookeeper import ZooKeeperMetadataStore
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.cluster

SESSION_MS = 2000


@pytest.fixture
def zk_server(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk", tick_ms=250).start()
    yield server
    server.stop()


def client(server: ZooKeeperServer) -> KazooClient:
    zk = KazooClient(hosts=server.connect, timeout=SESSION_MS / 1000)
    zk.start()
    return zk


class Node:
    """Broker 1's store and controller, as a broker runs them."""

    def __init__(self, server: ZooKeeperServer) -> None:
        self.zk = client(server)
        cluster_id(self.zk, "cid")
        self.store = ZooKeeperMetadataStore(self.zk, 1, session_timeout_ms=SESSION_MS, wait_timeout_s=10)
        self.controller = Controller(self.zk, self.store, 1)

    async def start(self) -> Node:
        await self.store.start()
        await self.store.register_broker(BrokerInfo(1, "127.0.0.1", 9001, None, (("PLAINTEXT", "127.0.0.1", 9001),)))
        await self.controller.start()
        await self.store.wait_for(lambda s: s.controller_id == 1, "broker 1 the controller")
        return self

    async def stop(self) -> None:
        await self.controller.stop()
        await self.store.stop()
        await asyncio.to_thread(self.zk.stop)


def register(zk: KazooClient, broker: int) -> int:
    """Another broker's registration (its session is `zk`'s); returns its broker epoch."""
    zk.create(L.broker_path(broker), L.encode_broker(BrokerInfo(broker, "127.0.0.1", 9000 + broker)), ephemeral=True)
    return zk.get(L.broker_path(broker))[1].czxid


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


def test_a_refused_partition_write_leaves_the_others_written(zk_server):
    """The controller writes many partitions in one ZooKeeper transaction; when one's version
    check fails (its state changed meanwhile), the others are written all the same and only
    that one is reported, to be decided again."""

    async def main():
        node = await Node(zk_server).start()
        try:
            await node.store.create_topic("w", [(1,), (1,), (1,)], {})
            view = node.store.view
            async with node.controller._lock:
                states = node.controller._states(view)
                st = L.PartitionState(1, 1, (1,), node.controller.epoch)
                updates = [("w", p, st, states[("w", p)].version) for p in range(3)]
                updates[1] = ("w", 1, st, states[("w", 1)].version + 5)  # a stale version
                refused = await node.controller._write_states([], updates)
            assert list(refused) == [("w", 1)]
            assert unregistered(refused[("w", 1)]) == -1  # its version check, not a registration
            epochs = [
                L.decode_partition_state("w", p, node.zk.get(L.partition_state_path("w", p))[0]).leader_epoch
                for p in range(3)
            ]
            assert epochs == [1, 0, 1]
        finally:
            await node.stop()

    run(main())


def test_a_topic_deletion_waits_for_every_live_broker_and_is_done_once(zk_server):
    """Broker 2 is registered but never drops the topic (no metadata store of its own here):
    DeleteTopics times out and the topic's znodes stay; once broker 2 is gone, the
    controller completes the deletion. A step that still sees the request afterwards (its
    watch not yet caught up) does nothing, and fails nothing: a deletion is done once."""

    async def main():
        other = client(zk_server)
        node = await Node(zk_server).start()
        try:
            register(other, 2)
            await node.store.wait_for(lambda s: len(s.brokers) == 2, "broker 2 registered")
            await node.store.create_topic("gone", [(1,), (1,)], {})
            with pytest.raises(MetadataTimeout):
                await node.store.delete_topic("gone", timeout_s=1.0)
            assert "gone" not in node.store.snapshot.topics  # dropped from broker 1's metadata at once
            assert node.zk.exists(L.topic_path("gone")) and node.zk.exists(L.delete_topic_path("gone"))
            request = node.store.view.deletions["gone"]
            assert request.dropped_by == {1}
            assert L.decode_deletion("gone", node.zk.get(L.delete_topic_path("gone"))[0]) == {1}
            with pytest.raises(Exception, match="marked for deletion"):  # no topic of that name meanwhile
                await node.store.create_topic("gone", [(1,)], {})
            stale = node.store.view
            await asyncio.to_thread(other.stop)  # broker 2's session ends: it serves nothing any more
            await node.store.wait_for_view(lambda v: "gone" not in v.topics and not v.deleting, "the deletion")
            assert not node.zk.exists(L.topic_path("gone")) and not node.zk.exists(L.topic_config_path("gone"))
            async with node.controller._lock:
                assert await node.controller._reconcile(stale) is True  # nothing left to do, nothing failed
            await node.store.create_topic("gone", [(1,)], {})  # the name is free again
        finally:
            await node.stop()
            await asyncio.to_thread(other.stop)
            other.close()

    run(main())


def test_alter_partition_checks_broker_epochs_kip_903(zk_server):
    async def main():
        other = client(zk_server)
        node = await Node(zk_server).start()
        try:
            epoch2 = register(other, 2)
            await node.store.wait_for(lambda s: len(s.brokers) == 2, "broker 2 registered")
            epoch1 = node.store.view.broker_sessions[1]
            await node.store.create_topic("e", [(1, 2)], {})
            await node.store.wait_for(lambda s: s.topics["e"].partitions[0].isr == (1, 2), "ISR (1, 2)")
            info = node.store.snapshot.topics["e"].partitions[0]
            shrink = IsrChange("e", 0, info.leader_epoch, (1,), info.partition_epoch, (epoch1,))
            c = node.controller
            with pytest.raises(ControllerError) as e:
                await c.alter_partition(1, epoch1 + 1, [shrink])  # the sender's epoch is not its registration's
            assert e.value.error_code == ErrorCode.stale_broker_epoch
            with pytest.raises(ControllerError) as e:
                await c.alter_partition(3, -1, [shrink])  # not registered
            assert e.value.error_code == ErrorCode.stale_broker_epoch
            [(code, st, version)] = await c.alter_partition(1, epoch1, [shrink])
            assert code == ErrorCode.none and st is not None and st.isr == (1,)
            stale = IsrChange("e", 0, info.leader_epoch, (1, 2), version, (epoch1, epoch2 - 1))
            [(code, st, _)] = await c.alter_partition(1, epoch1, [stale])
            assert code == ErrorCode.ineligible_replica and st is not None and st.isr == (1,)
            current = IsrChange("e", 0, info.leader_epoch, (1, 2), version, (epoch1, epoch2))
            [(code, st, _)] = await c.alter_partition(1, -1, [current])
            assert code == ErrorCode.none and st is not None and st.isr == (1, 2)
        finally:
            await node.stop()
            other.stop()
            other.close()

    run(main())


@pytest.mark.serial  # timed: answered within the 2 s session plus 1 s (tests/README.md)
def test_with_zookeeper_gone_requests_get_error_codes_in_bounded_time(zk_server):
    """ZooKeeper stops under an active controller: an AlterPartition and a ControlledShutdown
    that must write are answered REQUEST_TIMED_OUT within the session timeout, never left
    hanging or failing with an internal error; once the controller stops, NOT_CONTROLLER."""

    async def main():
        other = client(zk_server)
        node = await Node(zk_server).start()
        try:
            register(other, 2)
            await node.store.wait_for(lambda s: len(s.brokers) == 2, "broker 2 registered")
            await node.store.create_topic("z", [(1, 2)], {})
            await node.store.wait_for(lambda s: s.topics["z"].partitions[0].isr == (1, 2), "ISR (1, 2)")
            info = node.store.snapshot.topics["z"].partitions[0]
            epoch1 = node.store.view.broker_sessions[1]
            await asyncio.to_thread(zk_server.stop)
            shrink = IsrChange("z", 0, info.leader_epoch, (1,), info.partition_epoch, None)
            for call in (
                lambda: node.controller.alter_partition(1, epoch1, [shrink]),
                lambda: node.controller.controlled_shutdown(1, epoch1),  # would move the leadership to 2
            ):
                started = time.monotonic()
                with pytest.raises(ControllerError) as e:
                    await call()
                assert e.value.error_code == ErrorCode.request_timed_out, e.value
                assert time.monotonic() - started < SESSION_MS / 1000 + 1
            started = time.monotonic()
            await node.controller.stop()
            assert time.monotonic() - started < 2 * SESSION_MS / 1000 + 2
            with pytest.raises(ControllerError) as e:
                await node.controller.alter_partition(1, epoch1, [shrink])
            assert e.value.error_code == ErrorCode.not_controller
        finally:
            await node.controller.stop()
            await node.store.stop()
            await asyncio.to_thread(node.zk.stop)
            await asyncio.to_thread(other.stop)

    run(main())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread made to die
def test_a_dead_zookeeper_connection_thread_is_a_lost_session_the_broker_recovers_from(zk_server, caplog):
    """A broker under libfaketime 0.9.10 (tests/cluster/test_isolation_faults.py's clock test):
    kazoo's connection thread died of an OSError (EINVAL from a sleep between reconnect
    attempts). kazoo then reports the session LOST and never connects again, and the broker ran
    on unregistered, every ZooKeeper request failing, out of every ISR. Now it starts its client
    again with a new session and registers again (Kafka's ZooKeeperClient makes a new ZooKeeper
    client whenever its session is not alive), and is the controller again. The thread is made
    to die here the same way: an OSError out of its next connection attempt, once."""
    caplog.set_level(logging.INFO, logger="odradek.cluster")

    async def main():
        node = await Node(zk_server).start()
        try:
            zk = node.zk
            session, epoch = zk.client_id[0], node.store.view.broker_sessions[1]
            conn = zk._connection
            attempt, died = conn._connect_attempt, []

            def dying_attempt(*args):
                if not died:
                    died.append(time.monotonic())
                    raise OSError(errno.EINVAL, "Invalid argument")
                return attempt(*args)

            conn._connect_attempt = dying_attempt
            conn._socket.shutdown(socket.SHUT_RDWR)  # the connection drops: kazoo tries again, and dies
            await node.store.wait_for(
                # a registration of the new session: its czxid is above the old one's (-1 while
                # unregistered: the old session's node may outlive the dead client up to its timeout)
                lambda s: (b := s.broker(1)) is not None and b.epoch > epoch and s.controller_id == 1,
                "broker 1 registered again, and the controller",
                20,
            )
            assert died and zk.connected and zk.client_id[0] != session
            _data, stat = await asyncio.to_thread(zk.get, L.broker_path(1))
            assert stat.ephemeralOwner == zk.client_id[0]  # its registration is the new session's
            assert any("connection thread ended" in r.getMessage() for r in caplog.records)
        finally:
            await node.stop()

    run(main())
