"""The broker process: storage, metadata, coordinators, listeners, graceful shutdown.

One asyncio event loop owns all broker state (docs/architecture.md). Startup
order: log directories and meta.properties, storage recovery, metadata, the
logs of every known partition, coordinators, then listeners (so nothing is
served before recovery is done). Shutdown reverses it: stop accepting, let
in-flight requests finish, stop coordinators, flush and checkpoint, write the
clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import signal
import socket
import uuid
from typing import Any

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.connection import Connection
from odradek.broker.producer_ids import ProducerIdAllocator
from odradek.broker.registry import load_handlers, preload_schemas
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.local import LocalMetadataStore, atomic_write
from odradek.cluster.metadata import BrokerInfo, TopicInfo
from odradek.storage import LogConfig, LogManager

log = logging.getLogger("odradek.broker")


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read_meta_properties(directory: str) -> dict[str, str]:
    path = os.path.join(directory, "meta.properties")
    out: dict[str, str] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, _, v = line.partition("=")
                    out[k.strip()] = v.strip()
    return out


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.cluster_id: str = ""
        self.log_manager: LogManager | None = None
        self.metadata: LocalMetadataStore | None = None
        self.replica_manager = ReplicaManager(self)
        self.group_coordinator: Any = None
        self.metrics: Any = None
        self.connections: set[Connection] = set()
        self._servers: list[socket.socket] = []
        self._tasks: list[asyncio.Task] = []
        self._conn_tasks: set[asyncio.Task] = set()
        self.bound: list[tuple[str, int]] = []
        self.default_log_config: LogConfig | None = None
        self._stopping = False

    # ------------------------------------------------------------- lifecycle
    def _prepare_dirs(self) -> None:
        dirs = self.config["log.dirs"]
        cluster_ids = set()
        for d in dirs:
            os.makedirs(d, exist_ok=True)
            meta = read_meta_properties(d)
            if meta.get("node.id") and int(meta["node.id"]) != self.node_id:
                raise ConfigError(f"log directory {d} belongs to node {meta['node.id']}, not node.id={self.node_id}")
            if meta.get("cluster.id"):
                cluster_ids.add(meta["cluster.id"])
        if len(cluster_ids) > 1:
            raise ConfigError(f"log directories disagree on the cluster id: {sorted(cluster_ids)}")
        configured = self.config["cluster.id"]
        if configured and cluster_ids and configured not in cluster_ids:
            raise ConfigError(f"cluster.id={configured} but the log directories belong to cluster {cluster_ids.pop()}")
        self.cluster_id = configured or (cluster_ids.pop() if cluster_ids else new_cluster_id())
        for d in dirs:
            meta = read_meta_properties(d)
            if meta.get("cluster.id") != self.cluster_id or not meta.get("directory.id"):
                directory_id = meta.get("directory.id") or new_cluster_id()
                body = f"version=1\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\ndirectory.id={directory_id}\n"
                atomic_write(os.path.join(d, "meta.properties"), body.encode())

    def log_config_for(self, overrides: dict[str, str]) -> LogConfig:
        assert self.default_log_config is not None
        return LogConfig.from_props(overrides, self.default_log_config) if overrides else self.default_log_config

    async def start(self) -> None:
        load_handlers()
        self._prepare_dirs()
        self.default_log_config = LogConfig.from_props(self.config.topic_defaults(), LogConfig())
        _, host, port = self.config.advertised[0]
        self.producer_ids = ProducerIdAllocator(self.config["log.dirs"][0])
        self.metadata = LocalMetadataStore(
            self.config["log.dirs"][0],
            self.node_id,
            self.cluster_id,
            BrokerInfo(self.node_id, host, port, self.config["broker.rack"] or None),
        )
        topics = self.metadata.snapshot.topics

        def topic_config(name: str) -> LogConfig | None:
            info = topics.get(name)
            return self.log_config_for(info.configs) if info is not None else None

        self.log_manager = LogManager(
            list(self.config["log.dirs"]),
            self.default_log_config,
            recovery_threads=self.config["num.recovery.threads.per.data.dir"],
            topic_config=topic_config,
        )
        lm, c = self.log_manager, self.config
        lm.retention_check_interval_ms = c["log.retention.check.interval.ms"]
        lm.checkpoint_interval_ms = c["log.flush.offset.checkpoint.interval.ms"]
        lm.cleaner_backoff_ms = c["log.cleaner.backoff.ms"]
        lm.cleaner_enabled = c["log.cleaner.enable"]
        lm.cleaner_dedupe_buffer_size = c["log.cleaner.dedupe.buffer.size"]
        lm.cleaner_io_buffer_load_factor = c["log.cleaner.io.buffer.load.factor"]
        lm.producer_id_expiration_ms = c["producer.id.expiration.ms"]
        await asyncio.to_thread(self.log_manager.load)
        for topic in topics.values():
            cfg = self.log_config_for(topic.configs)
            for p in topic.partitions:
                lg = self.log_manager.get_log(topic.name, p.partition)
                if lg is None:
                    lg = self.log_manager.create_log(topic.name, p.partition, cfg)
                # Single node: this broker is the whole ISR, so everything in the log
                # (all of it acknowledged, or recovered as whole batches) is committed.
                lg.high_watermark = lg.log_end_offset
        self._tasks.append(asyncio.ensure_future(self._run_log_manager()))
        try:
            from odradek.coordinator.group import GroupCoordinator
        except ImportError:
            GroupCoordinator = None  # noqa: N806
        if GroupCoordinator is not None:
            self.group_coordinator = GroupCoordinator(self)
            await self.group_coordinator.start()
        if self.config["metrics.listener"]:
            from odradek.broker.metrics import BrokerMetrics

            self.metrics = BrokerMetrics(self)
            host, port = self.metrics.serve(self.config["metrics.listener"])
            log.info("metrics on http://%s:%d/metrics", host, port)
        for name, lhost, lport in self.config.listeners:
            self._listen(name, lhost, lport)
        self._tasks.append(asyncio.ensure_future(self._close_idle_connections()))
        self._tasks.append(asyncio.ensure_future(self._warm_up()))
        self._advertise_bound_ports()

    async def _run_log_manager(self) -> None:
        try:
            await self.log_manager.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("log manager background loop failed")

    def _listen(self, name: str, host: str, port: int) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError as e:
            sock.close()
            raise ConfigError(f"cannot listen on {name}://{host}:{port}: {e.strerror}") from None
        sock.listen(512)
        sock.setblocking(False)
        self._servers.append(sock)
        self.bound.append(sock.getsockname()[:2])
        self._tasks.append(asyncio.ensure_future(self._accept_loop(sock)))

    def _advertise_bound_ports(self) -> None:
        # With port 0 in listeners, advertise the port the OS chose.
        adv = self.config.advertised
        if adv and adv[0][2] == 0 and self.bound:
            host = adv[0][1] or self.bound[0][0]
            self._advertised = (host, self.bound[0][1])
            self.metadata.snapshot = type(self.metadata.snapshot)(
                self.metadata.snapshot.cluster_id,
                self.node_id,
                (BrokerInfo(self.node_id, host, self.bound[0][1], self.config["broker.rack"] or None),),
                self.metadata.snapshot.topics,
            )

    def advertised_endpoint(self) -> tuple[str, int]:
        b = self.metadata.snapshot.brokers[0]
        return b.host, b.port

    async def _accept_loop(self, server: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        rcv = self.config["socket.receive.buffer.bytes"]
        snd = self.config["socket.send.buffer.bytes"]
        while not self._stopping:
            try:
                sock, addr = await loop.sock_accept(server)
            except OSError as e:
                if self._stopping:
                    return
                log.warning("accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if rcv > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcv)
            if snd > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, snd)
            conn = Connection(self, sock, f"{addr[0]}:{addr[1]}")
            if self.metrics is not None:
                self.metrics.connection_accepted()
            self.connections.add(conn)
            task = asyncio.ensure_future(conn.run())
            self._conn_tasks.add(task)
            task.add_done_callback(lambda t, c=conn: (self._conn_tasks.discard(t), self.connections.discard(c)))

    async def _warm_up(self) -> None:
        """Warm the schema caches in the background (not on the start-up path, not in a
        request), then move everything alive so far out of the cyclic GC's reach: the
        collector then only scans what requests allocate, which keeps its pauses short."""
        import gc

        await asyncio.to_thread(preload_schemas)
        gc.collect()
        gc.freeze()

    async def _close_idle_connections(self) -> None:
        """connections.max.idle.ms: close connections with no request for that long."""
        import time

        idle_s = self.config["connections.max.idle.ms"] / 1000
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 30))
            now = time.monotonic()
            for conn in list(self.connections):
                if not conn.in_flight and now - conn.last_active > idle_s:
                    log.info(
                        "closing connection %d from %s: idle for more than %d ms",
                        conn.id,
                        conn.peer,
                        self.config["connections.max.idle.ms"],
                    )
                    conn.stop()
                    conn.sock_shutdown()

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        log.info("shutting down")
        for s in self._servers:
            s.close()
        for conn in list(self.connections):
            conn.stop()
        # Long-polling fetches answer now (with what they have) instead of at their max wait.
        self.replica_manager.fetch_purgatory.cancel_all()
        if self._conn_tasks:
            await asyncio.wait(list(self._conn_tasks), timeout=10)
        if self.group_coordinator is not None:
            try:
                await self.group_coordinator.stop()
            except Exception:
                log.exception("group coordinator failed to stop cleanly")
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for t in list(self._conn_tasks):
            t.cancel()
        if self.log_manager is not None:
            await asyncio.to_thread(self.log_manager.shutdown)
        if self.metrics is not None:
            self.metrics.close()
        log.info("shut down cleanly")

    # ---------------------------------------------------------------- topics
    def leader_epoch(self, topic: str, partition: int) -> int:
        t = self.metadata.snapshot.topics.get(topic)
        if t is None or partition >= len(t.partitions):
            return 0
        return t.partitions[partition].leader_epoch

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        cfg = self.log_config_for(configs)  # validates the configs before anything is written
        info = self.metadata.create_topic(name, partitions, configs)
        for p in range(partitions):
            self.log_manager.create_log(name, p, cfg)
        log.info(
            "created topic %s with %d partitions%s", name, partitions, f" and configs {configs}" if configs else ""
        )
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.metadata.delete_topic(name)
        for p in info.partitions:
            self.log_manager.delete_log(name, p.partition)
        log.info("deleted topic %s", name)
        return info

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        info = self.metadata.add_partitions(name, total)
        cfg = self.log_config_for(info.configs)
        for p in info.partitions:
            if self.log_manager.get_log(name, p.partition) is None:
                self.log_manager.create_log(name, p.partition, cfg)
        return info

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        cfg = self.log_config_for(configs)
        info = self.metadata.set_topic_configs(name, configs)
        for p in info.partitions:
            lg = self.log_manager.get_log(name, p.partition)
            if lg is not None:
                lg.update_config(cfg)
        return info

    def broker_defaults_changed(self) -> None:
        """A dynamic broker setting changed: recompute topic defaults for every log."""
        self.default_log_config = LogConfig.from_props(self.config.topic_defaults(), LogConfig())
        for topic in self.metadata.snapshot.topics.values():
            cfg = self.log_config_for(topic.configs)
            for p in topic.partitions:
                lg = self.log_manager.get_log(topic.name, p.partition)
                if lg is not None:
                    lg.update_config(cfg)

    async def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        if name not in self.metadata.snapshot.topics:
            self.create_topic(name, partitions, configs)


async def run_broker(config: BrokerConfig) -> int:
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except ConfigError as e:
        log.error("%s", e)
        await broker.stop()
        return 2
    addrs = ", ".join(f"{h}:{p}" for h, p in broker.bound)
    log.info(
        "odradek broker %d started: listening on %s, cluster id %s, log dirs %s",
        broker.node_id,
        addrs,
        broker.cluster_id,
        ",".join(config["log.dirs"]),
    )
    await stop.wait()
    await broker.stop()
    return 0
