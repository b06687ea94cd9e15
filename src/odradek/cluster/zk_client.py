"""Connecting to ZooKeeper: `zookeeper.connect` (HOST:PORT[,HOST:PORT...][/chroot]) and the cluster id."""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from odradek.cluster import zk_layout as L

log = logging.getLogger("odradek.cluster.zk")


class ZooKeeperUnavailable(Exception):
    pass


def split_connect(connect: str) -> tuple[str, str]:
    """("host:port,host:port", "/chroot" or "")."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if slash else ""


def connect(connect_string: str, session_timeout_ms: int, connection_timeout_ms: int) -> KazooClient:
    """A started client (blocking). The chroot is created if missing, as Kafka does."""
    hosts, chroot = split_connect(connect_string)
    timeout_s = connection_timeout_ms / 1000
    if chroot:
        root = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000)
        _start(root, hosts, timeout_s)
        try:
            root.ensure_path(chroot)
        finally:
            root.stop()
            root.close()
    zk = KazooClient(
        hosts=connect_string,
        timeout=session_timeout_ms / 1000,
        connection_retry=KazooRetry(max_tries=-1, max_delay=2.0),
        command_retry=KazooRetry(max_tries=-1, max_delay=2.0, deadline=max(timeout_s, 10.0)),
    )
    _start(zk, connect_string, timeout_s)
    return zk


def _start(zk: KazooClient, where: str, timeout_s: float) -> None:
    try:
        zk.start(timeout=timeout_s)
    except KazooTimeoutError:
        zk.stop()
        zk.close()
        raise ZooKeeperUnavailable(
            f"cannot connect to ZooKeeper at {where} within zookeeper.connection.timeout.ms ({timeout_s * 1000:.0f} ms)"
        ) from None


def connection_ended(zk: KazooClient) -> bool:
    """Whether kazoo's connection thread has ended though the client was not stopped: it died
    of an exception it does not retry (an OSError from a sleep between reconnect attempts,
    under libfaketime 0.9.10) or gave up retrying. kazoo then reports the session LOST (its
    CLOSED state) and never connects again on its own: every request fails from then on.
    A client without kazoo's connection handler (the simulator's) never ends this way."""
    connection = getattr(zk, "_connection", None)
    stopped = getattr(zk, "_stopped", None)
    if connection is None or stopped is None:
        return False
    return bool(connection.connection_stopped.is_set() and not stopped.is_set())


def start_again(zk: KazooClient, connection_timeout_ms: int) -> None:
    """Start `zk` again with a new session (blocking), as Kafka's ZooKeeperClient.reinitialize
    makes a new ZooKeeper client when its session is no longer alive. Its listeners and
    watch recipes stay; they see CONNECTED. Raises ZooKeeperUnavailable when ZooKeeper does
    not answer within the connection timeout (the client is stopped then: call again)."""
    _start(zk, "ZooKeeper", connection_timeout_ms / 1000)


def cluster_id(zk: KazooClient, proposed: str) -> str:
    """The cluster's id from /cluster/id, created with `proposed` by the first broker."""
    try:
        zk.create(L.CLUSTER_ID, L.encode_cluster_id(proposed), makepath=True)
        log.info("created cluster id %s in ZooKeeper", proposed)
        return proposed
    except NodeExistsError:
        data, _ = zk.get(L.CLUSTER_ID)
        return L.decode_cluster_id(data)
