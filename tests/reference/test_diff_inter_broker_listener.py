"""Differential: the listener brokers reach each other on when `listeners` has an SSL and a
PLAINTEXT listener (SSL first) and neither `inter.broker.listener.name` nor
`security.inter.broker.protocol` is set. Two brokers of Apache Kafka 3.9 (ZooKeeper mode) and two
of odradek, each with a topic replicated on both and a record written with acks=all: the
listener each broker process has connections open to, on the other broker and on itself (the
follower's fetches, the controller's requests), read from the process's sockets, is the same
set for both: Kafka's default security.inter.broker.protocol=PLAINTEXT names the PLAINTEXT
listener, not the first one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from support.apache_kafka import ApacheKafka, unavailable_reason
from support.broker import free_port
from support.odradek_cluster import OdradekCluster

from odradek.client import Admin, Producer

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

CERTS = Path(__file__).resolve().parents[1] / "support" / "tls_certs"


def settings(ssl_port: int, plaintext_port: int) -> dict[str, str]:
    """SSL first, PLAINTEXT second; no inter-broker setting."""
    listeners = f"SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{plaintext_port}"
    return {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(CERTS / "broker.keystore.pem"),
    }


def _tree(pid: int) -> set[int]:
    """`pid` and its descendants."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    out, todo = {pid}, [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        todo += list(kids - out)
        out |= kids
    return out


def remote_ports(pid: int) -> set[int]:
    """The remote ports of the established TCP connections of process `pid` (and its children)."""
    inodes: set[str] = set()
    for p in _tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "01" and cols[9] in inodes:  # ESTABLISHED
                    ports.add(int(cols[2].rsplit(":", 1)[1], 16))
    return ports


def inter_broker_listeners(pids: dict[int, int], ports: dict[int, dict[str, int]]) -> dict[int, set[str]]:
    """Broker id -> the listener names of the brokers' ports its process is connected to."""
    by_port = {port: name for listeners in ports.values() for name, port in listeners.items()}
    return {b: {by_port[p] for p in remote_ports(pid) if p in by_port} for b, pid in pids.items()}


def replicate(bootstrap: str) -> None:
    """A topic on both brokers and a record both have (the follower fetched it from the leader)."""
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topic("replicated", 2, 2)
    with Producer(bootstrap_servers=bootstrap, acks=-1) as p:
        for part in range(2):
            p.send("replicated", b"v", partition=part).result(60)


def observed(pids, ports, bootstrap) -> dict[int, set[str]]:
    replicate(bootstrap)
    deadline = time.monotonic() + 30
    while True:  # the controller's connections come and go with its requests: until both are seen
        seen = inter_broker_listeners(pids, ports)
        if all(seen.values()) or time.monotonic() > deadline:
            return seen
        time.sleep(0.5)


class _Odradek(OdradekCluster):
    def __init__(self, directory) -> None:  # noqa: ANN001
        super().__init__(directory, brokers=2)
        self.ports: dict[int, dict[str, int]] = {}

    def _listeners(self, i: int, client: int) -> dict[str, str]:
        # the harness checks readiness on `client`: the PLAINTEXT listener's port
        self.ports[i] = {"SSL": free_port(), "PLAINTEXT": client}
        return settings(self.ports[i]["SSL"], client)


@pytest.mark.skipif(unavailable_reason("3.9") is not None, reason=str(unavailable_reason("3.9")))
def test_ssl_and_plaintext_listeners_talk_plaintext_between_brokers_as_kafka_39(tmp_path):
    kafka = ApacheKafka(tmp_path / "kafka", line="3.9", brokers=2, zookeeper=True)
    kafka_ports = {}
    for n in kafka.nodes:
        kafka_ports[n.node_id] = {"SSL": free_port(), "PLAINTEXT": n.port}
        n.configure({**n.properties, **settings(kafka_ports[n.node_id]["SSL"], n.port)})
    try:
        kafka.start(timeout=120)
        assert kafka.nodes[0].proc is not None and kafka.nodes[1].proc is not None
        theirs = observed({n.node_id: n.proc.pid for n in kafka.nodes}, kafka_ports, kafka.bootstrap)
    finally:
        kafka.stop()
    odradek = _Odradek(tmp_path / "odradek")
    try:
        odradek.start()
        ours = observed({i: b.proc.pid for i, b in odradek.brokers.items()}, odradek.ports, odradek.bootstrap)
    finally:
        odradek.stop()
    assert theirs == {1: {"PLAINTEXT"}, 2: {"PLAINTEXT"}}, theirs
    assert ours == theirs
