"""`odradek cluster up --brokers N`: the local form of one broker per core (docs/cluster.md,
"Using more than one core"). The command is run as a user runs it; the bootstrap servers it
prints reach every broker, a replicated topic's leaders spread over the brokers, each broker
reports the `broker.rack` given with `--override` (the host name, as one rack per host is set),
and Ctrl-C stops the brokers cleanly and then ZooKeeper."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support import proto
from support.broker import free_port
from support.raw import RawConnection

pytestmark = pytest.mark.cluster


def _wait(cond, timeout: float, what: str):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout} s for {what}")


def _leftovers(base: Path) -> list[int]:
    """Processes (brokers, ZooKeeper) whose command line names the cluster's directory."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if str(base).encode() in cmdline and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def test_cluster_up_two_brokers_bootstrap_spreads_leaders_and_stops_cleanly(tmp_path):
    base = tmp_path / "cluster"
    out = tmp_path / "up.out"
    host = socket.gethostname()
    cmd = [sys.executable, "-m", "odradek", "cluster", "up", "--brokers", "2", "--dir", str(base)]
    cmd += ["--port", str(free_port()), "--override", f"broker.rack={host}"]
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    with open(out, "wb") as f:
        up = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        line = _wait(
            lambda: re.search(r"bootstrap servers: (\S+)", out.read_text(errors="replace")), 60, "the bootstrap line"
        )
        bootstrap = line.group(1)
        assert len(bootstrap.split(",")) == 2

        admin = AdminClient({"bootstrap.servers": bootstrap})
        _wait(lambda: len(admin.list_topics(timeout=5).brokers) == 2, 60, "both brokers registered")
        admin.create_topics([NewTopic("spread", 4, 2)], operation_timeout=30)["spread"].result(60)

        def placed():  # noqa: ANN202
            t = admin.list_topics("spread", timeout=5).topics["spread"]
            parts = list(t.partitions.values())
            ok = len(parts) == 4 and all(p.leader > 0 and len(p.isrs) == 2 for p in parts)
            return parts if ok else None

        parts = _wait(placed, 60, "every partition led with a full ISR")
        assert {p.leader for p in parts} == {1, 2}
        assert sorted(p.leader for p in parts) == [1, 1, 2, 2]
        assert all(sorted(p.replicas) == [1, 2] for p in parts)

        for b in bootstrap.split(","):  # every printed address answers, and every broker has the host as rack
            with RawConnection(b) as conn:
                r = proto.metadata(conn, [])
                assert {int(x.node_id): x.rack for x in r.brokers} == {1: host, 2: host}

        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(4):
            p.produce("spread", f"v{i}".encode(), partition=i)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        c.subscribe(["spread"])
        got: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value())
        c.close()
        assert got == {b"v0", b"v1", b"v2", b"v3"}

        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
        text = out.read_text(errors="replace")
        assert "stopped" in text
        for i in (1, 2):
            log = (base / f"broker-{i}.log").read_text(errors="replace")
            assert "Traceback" not in log, log[-2000:]
        assert _leftovers(base) == []
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
        for pid in _leftovers(base):
            os.kill(pid, signal.SIGKILL)
