"""A private ZooKeeper server for a local cluster (`odradek cluster up`) and for tests.

Runs Debian's ZooKeeper (`apt-get install zookeeper`: /usr/share/java/zookeeper.jar) as a
plain JVM process, standalone, bound to 127.0.0.1 on a free port, with its own data
directory; `ODRADEK_ZOOKEEPER_CLASSPATH` points elsewhere. The AdminServer is off (it
would bind :8080). A short `tick_ms` allows short session timeouts (ZooKeeper accepts
sessions of 2 to 20 ticks).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

DEBIAN_JAR = "/usr/share/java/zookeeper.jar"


class ZooKeeperServerError(RuntimeError):
    pass


def classpath() -> str:
    cp = os.environ.get("ODRADEK_ZOOKEEPER_CLASSPATH")
    if cp:
        return cp
    if os.path.exists(DEBIAN_JAR):
        return DEBIAN_JAR
    raise ZooKeeperServerError(
        f"no ZooKeeper found: install Debian's package (apt-get install zookeeper, {DEBIAN_JAR}) "
        "or set ODRADEK_ZOOKEEPER_CLASSPATH"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ZooKeeperServer:
    def __init__(self, directory: str | os.PathLike[str], port: int = 0, *, tick_ms: int = 2000, heap: str = "256m"):
        self.directory = Path(directory)
        self.host = "127.0.0.1"
        self.port = port or free_port(self.host)
        self.tick_ms = tick_ms
        self.heap = heap
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.directory / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        self.directory.mkdir(parents=True, exist_ok=True)
        data = self.directory / "data"
        data.mkdir(exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
        )
        log4j = self.directory / "log4j.properties"
        log4j.write_text(
            "log4j.rootLogger=INFO, stdout\n"
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
        return [
            os.environ.get("JAVA", "java"),
            f"-Xmx{self.heap}",
            f"-Dlog4j.configuration=file:{log4j}",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            classpath(),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ]

    def start(self, timeout: float = 30) -> ZooKeeperServer:
        if self.running:
            return self
        cmd = self.command()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperServerError(f"ZooKeeper exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise ZooKeeperServerError(f"ZooKeeper did not listen on {self.connect} within {timeout:.0f} s")

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"<no log: {e}>"
