"""`odradek cluster up --secure` run as a process: two brokers and ZooKeeper with a local CA,
SASL_SSL (SCRAM-SHA-512) for clients, mutual TLS between brokers and the authorizer on. With the
settings file it prints, odradek's client creates a replicated topic, produces and reads back in a
group, and Kafka 4.4's kafka-console-producer writes with the same file (--producer.config); a
client without the settings is not served; ^C stops everything."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from support.apache_kafka import tool_command, unavailable_reason
from support.broker import free_port

from odradek.broker.config import parse_properties

pytestmark = pytest.mark.cluster


class ClusterUp:
    def __init__(self, directory: Path) -> None:
        env = dict(os.environ, COLUMNS="400", NO_COLOR="1", TERM="dumb")
        cmd = [sys.executable, "-m", "odradek", "cluster", "up", "--secure", "--brokers", "2",
               "--dir", str(directory), "--port", str(free_port())]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} in the output:\n" + "\n".join(self.lines[-60:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._reader.join(5)
        return self.proc.returncode


def test_cluster_up_secure_prints_settings_clients_use(tmp_path):
    from odradek.client import Admin, Consumer, Producer
    from odradek.client import errors as E

    up = ClusterUp(tmp_path / "cluster")
    try:
        props_path = up.wait_for(r"client settings: (\S+)", 150).group(1)
        bootstrap = up.wait_for(r"bootstrap servers: (\S+)", 10).group(1)
        assert oct(Path(props_path).stat().st_mode & 0o777) == "0o600"
        settings = parse_properties(Path(props_path).read_text())
        assert settings["security.protocol"] == "SASL_SSL" and settings["sasl.mechanism"] == "SCRAM-SHA-512"
        conf = {"bootstrap.servers": bootstrap, **settings}
        topic = f"secure-{uuid.uuid4().hex[:8]}"
        with Admin(conf) as admin:
            admin.create_topic(topic, 2, 2)
        with Producer({**conf, "acks": "all"}) as p:
            for i in range(100):
                p.send(topic, b"v%d" % i, key=b"k%d" % (i % 10))
            p.flush(30)

        java = unavailable_reason("4")
        if java is None:
            tool = tool_command(
                "4", "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bootstrap, "--topic", topic,
                "--producer.config", props_path,
            )  # fmt: skip
            r = subprocess.run(tool, input="java-1\njava-2\n", capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-3000:]

        expected = {b"v%d" % i for i in range(100)} | ({b"java-1", b"java-2"} if java is None else set())
        got: set[bytes] = set()
        with Consumer(topic, config=conf, group_id="g", auto_offset_reset="earliest") as c:
            deadline = time.monotonic() + 60
            while got != expected and time.monotonic() < deadline:
                got |= {r.value for r in c.poll(0.5)}
        assert got == expected

        # without the settings the clients' listener serves nothing
        with pytest.raises((E.KafkaError, OSError)):
            Admin({"bootstrap.servers": bootstrap, "request.timeout.ms": 3000, "default.api.timeout.ms": 3000})
    finally:
        code = up.stop()
    assert code == 0, "\n".join(up.lines[-60:])
    assert any("stopped" in line for line in up.lines)
