"""Apache Kafka itself, beside odradek: the reference broker for tests and benchmarks.

The jars come from Maven (``scripts/install-test-deps.sh``, poms in ``scripts/maven/``)::

    .deps/kafka-3.9/libs   Apache Kafka 3.9.2 (the last line with ZooKeeper mode; also KRaft)
    .deps/kafka-4/libs     Apache Kafka 4.4.0 (KRaft only)

Each broker is a plain JVM process, ``java -Xmx512m -cp '<libs>/*' kafka.Kafka server.properties``,
on free 127.0.0.1 ports, with its data, config and log file under the work directory it is given.

Surface (the same as :class:`support.broker.BrokerProcess` where the two overlap)::

    k = ApacheKafka(workdir, line="4", brokers=1, zookeeper=False, overrides=None, heap="512m", jvm=())
    k.start(timeout=90) -> k        # returns once every broker is in the cluster's metadata
    k.bootstrap                     # "127.0.0.1:p1,127.0.0.1:p2,..."
    k.stop() / k.kill()             # SIGTERM (SIGKILL after a timeout) / SIGKILL, all nodes
    k.log_tail(lines=40) -> str     # the tail of every node's log (and ZooKeeper's)
    k.nodes                         # [KafkaNode]: each has bootstrap, node_id, port, log_path,
                                    #   data_dir, properties, start()/stop()/kill() of its own
    k.zookeeper                     # ZooKeeperProcess | None
    k.version / k.line / k.mode     # "4.4.0" / "4" / "kraft" | "zookeeper"
    k.tool_command("DumpLogSegments", "--files", path) -> argv for the tool, same classpath

Modes: ``line="3.9"`` or ``"4"``; ``zookeeper=True`` (3.9 only) starts a private ZooKeeper
(the ZooKeeper 3.8.4 server that Kafka 3.9 itself depends on, from the same classpath, so it
needs nothing from Debian's package and is the version Kafka 3.9 is built against); without it
every node is a combined KRaft broker+controller and ``brokers`` nodes form the controller quorum
(``controller.quorum.voters``, storage formatted with Kafka's StorageTool before the first start).
Settings for a fast start and for a small cluster are in :func:`base_properties`;
``overrides`` adds to or replaces them, for every node.

Tools: :func:`tool_command` (``ProducerPerformance``, ``ConsumerPerformance``,
``EndToEndLatency``, ``DumpLogSegments``, ``StorageTool``, or a main class name) gives the argv
that runs one from a line's classpath with logging to stderr at WARN.

:func:`unavailable_reason` says why a line cannot run here (None when it can).

(Named ``apache_kafka``, not ``kafka``: pytest puts tests/support itself on sys.path when it
collects the tests there, and a ``kafka.py`` would shadow the kafka-python package.)
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from support.broker import DEPS, BrokerStartError, _Process, _tail, free_port

LINES = {"3.9": DEPS / "kafka-3.9" / "libs", "4": DEPS / "kafka-4" / "libs"}

#: main classes of Kafka's tools, by line (DumpLogSegments moved from core to kafka-tools in 4.0)
TOOLS = {
    "ProducerPerformance": {"3.9": "org.apache.kafka.tools.ProducerPerformance", "4": None},
    "ConsumerPerformance": {"3.9": "org.apache.kafka.tools.ConsumerPerformance", "4": None},
    "EndToEndLatency": {"3.9": "org.apache.kafka.tools.EndToEndLatency", "4": None},
    "DumpLogSegments": {"3.9": "kafka.tools.DumpLogSegments", "4": "org.apache.kafka.tools.DumpLogSegments"},
    "StorageTool": {"3.9": "kafka.tools.StorageTool", "4": None},
}

# Log to stdout (the node's log file) at INFO, as Kafka's own config/log4j files do, less the request log.
_LOG4J1 = """\
log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target={target}
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
"""
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = {target}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


#: JVM flags that start a short-lived tool faster (C1 only, serial GC); never for a broker or a benchmark
SHORT_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")


def libs(line: str) -> Path:
    if line not in LINES:
        raise ValueError(f"unknown Kafka line {line!r}; known: {sorted(LINES)}")
    return LINES[line]


def java() -> str:
    """The java to run Kafka with: $JAVA_HOME/bin/java when set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"


def unavailable_reason(line: str) -> str | None:
    if shutil.which(java()) is None:
        return "no java on PATH"
    if not any(libs(line).glob("kafka_2.13-*.jar")):
        return f"Apache Kafka {line} not installed ({libs(line)}): run scripts/install-test-deps.sh"
    return None


def version(line: str) -> str:
    """The exact version installed for a line, from its kafka_2.13-<version>.jar."""
    for jar in libs(line).glob("kafka_2.13-*.jar"):
        m = re.fullmatch(r"kafka_2\.13-(.+)\.jar", jar.name)
        if m:
            return m.group(1)
    raise FileNotFoundError(f"no kafka_2.13 jar in {libs(line)}")


def log_config(line: str, path: Path, level: str = "INFO", target: str = "System.out") -> list[str]:
    """Write a logging config for ``line`` to ``path``; returns the JVM flags that load it."""
    if line == "3.9":
        path.write_text(_LOG4J1.format(level=level, target=target))
        return [f"-Dlog4j.configuration=file:{path}"]
    path.write_text(
        _LOG4J2.format(
            level=level, target=target.replace("System.out", "SYSTEM_OUT").replace("System.err", "SYSTEM_ERR")
        )
    )
    return [f"-Dlog4j2.configurationFile={path}"]


def tool_command(line: str, tool: str, *args: str, heap: str = "256m", jvm: tuple[str, ...] = ()) -> list[str]:
    """argv to run one of Kafka's tools (a name in :data:`TOOLS`, or a main class) from a line's
    classpath, logging to stderr at WARN (the config is written to the line's directory).
    ``jvm``: more JVM flags, e.g. :data:`SHORT_JVM` for a tool that runs for a second."""
    main = tool
    if tool in TOOLS:
        main = TOOLS[tool][line] or TOOLS[tool]["3.9"]
    conf = libs(line).parent / ("tools-log4j.properties" if line == "3.9" else "tools-log4j2.properties")
    flags = log_config(line, conf, level="WARN", target="System.err")
    return [java(), f"-Xmx{heap}", *jvm, *flags, "-cp", f"{libs(line)}/*", main, *args]


def random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as Kafka's Uuid)."""
    while True:
        s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not s.startswith("-"):  # Kafka's Uuid avoids these: they read as a command-line option
            return s


def write_properties(path: Path, props: dict) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def base_properties(line: str, brokers: int, zookeeper: bool) -> dict[str, str]:
    """Kafka's defaults, except: internal topics replicated as far as the cluster allows, and no
    delay before the first rebalance of a new group (both only make a small cluster start fast)."""
    rf = min(3, brokers)
    props = {
        "num.partitions": "1",
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min(2, rf)),
        "group.initial.rebalance.delay.ms": "0",
    }
    if line != "3.9":
        props["share.coordinator.state.topic.replication.factor"] = str(rf)
        props["share.coordinator.state.topic.min.isr"] = str(min(2, rf))
    return props


class ZooKeeperProcess(_Process):
    """A private standalone ZooKeeper on 127.0.0.1 (QuorumPeerMain, from Kafka 3.9's classpath)."""

    name = "zookeeper"

    def __init__(self, workdir, port: int | None = None, heap: str = "256m"):
        super().__init__(workdir, port)
        self.heap = heap
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "zoo.cfg"

    @property
    def connect(self) -> str:
        return self.bootstrap

    def command(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = {
            "tickTime": "2000",
            "dataDir": self.data_dir,
            "clientPort": self.port,
            "clientPortAddress": self.host,
            "maxClientCnxns": "0",
            "admin.enableServer": "false",  # else its AdminServer binds :8080
        }
        write_properties(self.config_path, cfg)
        flags = log_config("3.9", self.workdir / "log4j.properties")
        return [java(), f"-Xmx{self.heap}", *flags, "-cp", f"{libs('3.9')}/*"] + [
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.config_path),
        ]

    def ready_marker(self) -> None:
        return None  # listening is ready


class KafkaNode(_Process):
    """One ``kafka.Kafka`` JVM: a combined KRaft broker+controller, or a ZooKeeper-mode broker.
    Built and formatted by :class:`ApacheKafka`; ``start()``/``stop()``/``kill()`` of one node
    (after the cluster started) restart or fail it alone."""

    name = "kafka"

    def __init__(self, workdir, line: str, node_id: int, heap: str, ports: tuple[int, int], jvm: tuple[str, ...] = ()):
        super().__init__(workdir, ports[0])
        self.line = line
        self.node_id = node_id
        self.heap = heap
        self.jvm = tuple(jvm)
        self.controller_port = ports[1]
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "server.properties"
        self.properties: dict[str, str] = {}
        self.kraft = True

    def configure(self, props: dict[str, str]) -> None:
        self.properties = dict(props)
        self.kraft = "process.roles" in props
        write_properties(self.config_path, self.properties)

    def start(self, timeout: float = 20) -> KafkaNode:
        """Start this node (again). A ZooKeeper-mode broker whose own ZooKeeper session expires
        while it starts exits ("fatal exception during startup: SessionExpiredException"; seen
        on a loaded machine with 6 s sessions): that start is made once more, as an operator's
        supervisor would. Any other failure to start is raised."""
        try:
            super().start(timeout)
        except BrokerStartError:
            if self.kraft or "SessionExpiredException" not in self.log_tail(200):
                raise
            super().start(timeout)
        return self

    def command(self) -> list[str]:
        flags = log_config(
            self.line, self.workdir / ("log4j.properties" if self.line == "3.9" else "log4j2.properties")
        )
        return [
            java(),
            f"-Xmx{self.heap}",
            "-Djava.awt.headless=true",
            *self.jvm,
            *flags,
            "-cp",
            f"{libs(self.line)}/*",
            "kafka.Kafka",
            str(self.config_path),
        ]

    def ready_marker(self) -> str:
        # KafkaRaftServer: "[KafkaRaftServer nodeId=1] Kafka Server started"; once the broker has
        # registered with the controller and caught up. ZooKeeper mode: "[KafkaServer id=1] started".
        return "Kafka Server started" if self.kraft else f"[KafkaServer id={self.node_id}] started"

    def format_command(self, cluster_id: str) -> list[str]:
        cmd = ("format", "-t", cluster_id, "-c", str(self.config_path))
        return tool_command(self.line, "StorageTool", *cmd, jvm=SHORT_JVM)


class ApacheKafka:
    """Apache Kafka, 1 or more nodes (and a private ZooKeeper in ZooKeeper mode); see the module
    docstring."""

    def __init__(
        self,
        workdir,
        line: str = "4",
        brokers: int = 1,
        zookeeper: bool = False,
        overrides: dict | None = None,
        heap: str = "512m",
        jvm: tuple[str, ...] = (),
    ):
        """``jvm``: more JVM flags for every node (e.g. those of Kafka's own start script)."""
        if zookeeper and line != "3.9":
            raise ValueError("ZooKeeper mode is only in Kafka 3.9 (4.x is KRaft only)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.line = line
        self.mode = "zookeeper" if zookeeper else "kraft"
        self.cluster_id = random_cluster_id()
        taken: set[int] = set()

        def port() -> int:
            while (p := free_port()) in taken:
                pass
            taken.add(p)
            return p

        self.zookeeper = ZooKeeperProcess(self.workdir / "zookeeper", port()) if zookeeper else None
        self.nodes = [
            KafkaNode(self.workdir / f"node{i}", line, i, heap, (port(), port()), jvm) for i in range(1, brokers + 1)
        ]
        voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes)
        for n in self.nodes:
            props = {
                "listeners": f"PLAINTEXT://{n.host}:{n.port}",
                "advertised.listeners": f"PLAINTEXT://{n.host}:{n.port}",
                "log.dirs": str(n.data_dir),
                **base_properties(line, brokers, zookeeper),
            }
            if self.zookeeper is not None:
                props |= {"broker.id": str(n.node_id), "zookeeper.connect": self.zookeeper.connect}
            else:
                props |= {
                    "process.roles": "broker,controller",
                    "node.id": str(n.node_id),
                    "controller.quorum.voters": voters,
                    "listeners": f"PLAINTEXT://{n.host}:{n.port},CONTROLLER://{n.host}:{n.controller_port}",
                    "controller.listener.names": "CONTROLLER",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                }
            props |= {k: str(v) for k, v in (overrides or {}).items()}
            n.configure(props)
        self._formatted = False
        #: seconds the last start() took, by phase: "zookeeper" or "format" (KRaft's StorageTool, first
        #: start only), "nodes" (JVMs up to their "started" line), "metadata" (all brokers listed), "total"
        self.start_times: dict[str, float] = {}

    # -- surface
    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def version(self) -> str:
        return version(self.line)

    @property
    def running(self) -> bool:
        return any(n.running for n in self.nodes)

    def tool_command(self, tool: str, *args: str, heap: str = "256m", jvm: tuple[str, ...] = ()) -> list[str]:
        return tool_command(self.line, tool, *args, heap=heap, jvm=jvm)

    def start(self, timeout: float = 90) -> ApacheKafka:
        t0 = time.monotonic()
        deadline = t0 + timeout
        try:
            if self.zookeeper is not None and not self.zookeeper.running:
                self.zookeeper.start(timeout=max(1.0, deadline - time.monotonic()))
            if self.mode == "kraft" and not self._formatted:
                self._format(deadline)
            t1 = time.monotonic()
            waiting = [n for n in self.nodes if not n.running]
            for n in waiting:  # all at once: a Raft quorum elects only once a majority is up
                n.spawn()
            for n in waiting:
                n.wait_ready(max(1.0, deadline - time.monotonic()))
            t2 = time.monotonic()
            self._wait_metadata(deadline)
        except BaseException:
            self.kill()
            raise
        t3 = time.monotonic()
        first = "zookeeper" if self.zookeeper is not None else "format"
        self.start_times = {first: t1 - t0, "nodes": t2 - t1, "metadata": t3 - t2, "total": t3 - t0}
        return self

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM every node at once, wait up to ``timeout`` s, SIGKILL what is left; then ZooKeeper."""
        live = [n for n in self.nodes if n.running]
        for n in live:
            n.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for n in live:
            try:
                n.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for n in self.nodes:
            n.stop(timeout=0.1)  # SIGKILLs a node still there; closes every log
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def kill(self) -> None:
        for n in self.nodes:
            n.kill()
        if self.zookeeper is not None:
            self.zookeeper.kill()

    def log_tail(self, lines: int = 40) -> str:
        procs = ([self.zookeeper] if self.zookeeper is not None else []) + list(self.nodes)
        return "\n".join(f"===== {p.log_path}\n{_tail(p.log_path, lines)}" for p in procs)

    def __enter__(self) -> ApacheKafka:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- start-up steps
    def _format(self, deadline: float) -> None:
        """Kafka's StorageTool ``format`` for every node, in parallel (one short JVM each)."""
        procs = []
        for n in self.nodes:
            log = open(n.workdir / "format.log", "wb")
            procs.append((n, log, subprocess.Popen(n.format_command(self.cluster_id), stdout=log, stderr=log)))
        failed = []
        for n, log, p in procs:
            try:
                code = p.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                code = p.wait()
            log.close()
            if code != 0:
                failed.append(f"node {n.node_id}: exit {code}\n{_tail(n.workdir / 'format.log')}")
        if failed:
            raise BrokerStartError("kafka-storage format failed:\n" + "\n".join(failed))
        self._formatted = True

    def _wait_metadata(self, deadline: float) -> None:
        """Until the cluster's metadata (a Metadata request, through confluent-kafka) lists every
        broker: in KRaft, a broker is listed once registered and unfenced."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        want = {n.node_id for n in self.nodes}
        seen: set[int] = set()
        while time.monotonic() < deadline:
            try:
                seen = set(admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic()))).brokers)
            except Exception:  # noqa: BLE001 - not answering yet
                seen = set()
            if seen >= want:
                return
            time.sleep(0.1)
        raise BrokerStartError(
            f"Kafka {self.line} ({self.mode}): brokers {sorted(want - seen)} not in the metadata in time;\n"
            + self.log_tail()
        )
