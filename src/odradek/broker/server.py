"""The broker process: build the parts from the settings and wire them, listen, shut down gracefully.

One asyncio event loop owns all broker state (docs/architecture.md). Startup order: log
directories (each locked by its ``.lock``: a second broker refuses to start on it) and
meta.properties, the metadata store (and, in cluster mode, this broker's
controller), storage recovery, then every part built from the settings, each given what it
uses (`_build_services`; the handlers see them as `BrokerServices`); the dynamic settings,
the replica manager and the coordinators listen to the store, which then publishes what it
holds, so every hosted partition is opened and led, and every coordinator shard loaded,
through the same path a later change takes; then the listeners are bound, the broker
registers its endpoint, and connections are accepted (nothing is served before recovery is
done). Shutdown reverses it: the controlled shutdown (cluster mode), stop accepting, let
in-flight requests finish, stop the coordinators, the controller, the store and the replica
manager, close the inter-broker connections, flush and checkpoint, write the clean-shutdown
marker, unlock the log directories.

The simulator (odradek/testing/sim) subclasses `Broker` and overrides `_join_cluster`,
`_bind`, `_accept_loop` and `_advertised_endpoint` to run brokers on a simulated network
and ZooKeeper: keep their names and meaning.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import gc
import logging
import os
import signal
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.config_admin import ConfigAdmin
from odradek.broker.connection import Connection
from odradek.broker.controlled_shutdown import controlled_shutdown
from odradek.broker.coordinator_fence import CoordinatorFence
from odradek.broker.dynamic_config import DynamicConfigListener
from odradek.broker.fetch_session import FetchSessionCache
from odradek.broker.interbroker.add_partitions_to_txn import AddPartitionsToTxnManager
from odradek.broker.interbroker.channels import ChannelPolicy, NodeChannels
from odradek.broker.interbroker.forwarding import ForwardingManager
from odradek.broker.interbroker.marker_channel import TransactionMarkerChannel
from odradek.broker.interbroker.sasl_login import InterBrokerLogin, inter_broker_login
from odradek.broker.internal_topics import InternalTopics
from odradek.broker.metrics import (
    BrokerMetrics,
    connection_gauges,
    controller_gauges,
    group_gauges,
    log_dir_gauges,
    purgatory_gauges,
    replication_gauges,
)
from odradek.broker.producer_ids import LocalBlocks, NextBlock, ProducerIdAllocator
from odradek.broker.quotas.manager import ClientQuotas
from odradek.broker.registry import load_handlers, preload_schemas
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication.alter_partition import AlterPartitionSender
from odradek.broker.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from odradek.broker.security.acl_store import AclManager
from odradek.broker.security.authorizer import Authorizer, parse_super_users
from odradek.broker.security.sasl import SaslServer
from odradek.broker.security.scram_users import scram_credential
from odradek.broker.security.tls import TLS_PROTOCOLS, ListenerTls, NoMatchingRule, TlsConfigError, client_context
from odradek.broker.security.tls_reload import TlsListeners
from odradek.broker.services import BrokerServices
from odradek.broker.topic_admin import TopicAdmin
from odradek.broker.topic_configs import TopicConfigs
from odradek.broker.transport import PlaintextTransport, TlsTransport
from odradek.broker.txn_markers import write_marker_here
from odradek.broker.txn_verification import TxnVerification
from odradek.cluster import zk_client
from odradek.cluster.acls import LocalAclStore
from odradek.cluster.controller import Controller, ControllerConfig
from odradek.cluster.kafka_dir import AdoptionError
from odradek.cluster.local import LocalMetadataStore
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.store import MetadataStore
from odradek.cluster.zk_acls import ZooKeeperAclStore
from odradek.cluster.zookeeper import ZooKeeperMetadataStore
from odradek.coordinator.group import GroupConfig, GroupCoordinator
from odradek.coordinator.txn import TransactionCoordinator, TxnConfig
from odradek.storage import FileSystem, LogConfig, LogDirInUseError, LogDirLocks, LogManager, OSFileSystem
from odradek.storage.checkpoint import CLEAN_SHUTDOWN, RECOVERY_POINT
from odradek.storage.config import LogManagerConfig

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


def prepare_log_dirs(config: BrokerConfig, fs: FileSystem, cluster_id: str | None = None) -> str:
    """Create the log directories, check they belong to this node and one cluster, write
    meta.properties where missing; returns the cluster id (`cluster_id`: the one the
    cluster's metadata holds, which the directories must belong to or be new for)."""
    node_id = config["node.id"]
    dirs = config["log.dirs"]
    cluster_ids = set()
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        meta = read_meta_properties(d)
        # version 1: odradek's and Kafka's KRaft mode (node.id); 0: Kafka's ZooKeeper mode (broker.id)
        owner_key = {"1": "node.id", "0": "broker.id"}.get(meta.get("version", "1"))
        if meta and owner_key is None:
            raise ConfigError(
                f"log directory {d}: meta.properties version {meta.get('version')} is not one odradek "
                "can open (0: Kafka's ZooKeeper mode, 1: Kafka's KRaft mode and odradek)"
            )
        owner = meta.get(owner_key or "node.id")
        if owner and int(owner) != node_id:
            raise ConfigError(f"log directory {d} belongs to node {owner}, not node.id={node_id}")
        if meta.get("cluster.id"):
            cluster_ids.add(meta["cluster.id"])
    if len(cluster_ids) > 1:
        raise ConfigError(f"log directories disagree on the cluster id: {sorted(cluster_ids)}")
    configured = config["cluster.id"]
    if configured and cluster_ids and configured not in cluster_ids:
        raise ConfigError(f"cluster.id={configured} but the log directories belong to cluster {cluster_ids.pop()}")
    if cluster_id is not None:
        if cluster_ids and cluster_id not in cluster_ids:
            raise ConfigError(
                f"the log directories ({', '.join(dirs)}) belong to cluster {cluster_ids.pop()}, but ZooKeeper at "
                f"{config['zookeeper.connect']} holds cluster {cluster_id}: a data directory from single-node mode "
                "or from another cluster cannot join this one (start this broker with empty log.dirs)"
            )
    else:
        cluster_id = configured or (cluster_ids.pop() if cluster_ids else new_cluster_id())
    for d in dirs:
        meta = read_meta_properties(d)
        if meta.get("cluster.id") != cluster_id or not meta.get("directory.id"):
            directory_id = meta.get("directory.id") or new_cluster_id()
            body = f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\ndirectory.id={directory_id}\n"
            fs.write_file_atomic(os.path.join(d, "meta.properties"), body.encode())
    return cluster_id


BOOT_ID = "/proc/sys/kernel/random/boot_id"
HOST_BOOT = ".odradek-host-boot"  # in each log directory: the boot id of the host's boot it last started in


def note_host_boot(fs: FileSystem, dirs: Sequence[str], boot_id: str) -> bool:
    """Whether this broker's logs may lack what a previous run had not flushed: a run stopped
    without a clean shutdown (no clean-shutdown marker in a directory that has run before) and
    the host has booted since (a power cut or an OS crash loses the page cache; a kill -9 does
    not). Kept while runs keep stopping uncleanly (a run after the loss may not have copied
    back what was lost); a clean shutdown ends it. Records this boot for the next run. Unknown
    boot ids (no /proc) answer False."""
    lost = False
    for d in dirs:
        path = os.path.join(d, HOST_BOOT)
        before = fs.read_file(path).decode().split() if fs.exists(path) else []
        unclean = fs.exists(os.path.join(d, RECOVERY_POINT)) and not fs.exists(os.path.join(d, CLEAN_SHUTDOWN))
        if unclean and len(before) == 2 and boot_id and (before[0] not in ("-", boot_id) or before[1] == "lost"):
            lost = True
    for d in dirs:
        fs.makedirs(d)
        fs.write_file_atomic(os.path.join(d, HOST_BOOT), f"{boot_id or '-'} {'lost' if lost else 'kept'}\n".encode())
    return lost


class Broker:
    def __init__(self, config: BrokerConfig, *, fs: FileSystem | None = None) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.fs = fs or OSFileSystem()
        self.cluster_id = ""
        self.services: BrokerServices | None = None
        self.log_manager: LogManager | None = None
        self.dir_locks: LogDirLocks | None = None  # held from the start of `start` to the end of `stop`
        self.connections: set[Connection] = set()
        self.bound: list[tuple[str, int]] = []
        self._servers: list[tuple[str, socket.socket]] = []
        self._tasks: list[asyncio.Task] = []
        self._conn_tasks: set[asyncio.Task] = set()
        self._stopping = False
        self.zk: KazooClient | None = None
        self.controller: Controller | None = None
        self.fence: CoordinatorFence | None = None  # coordinators stop while the ZooKeeper session may be lost
        self.channels: NodeChannels | None = None
        self.tls = TlsListeners()  # the TLS listeners' contexts (replaced by a dynamic keystore update)
        self.inter_broker_tls: ssl.SSLContext | None = None  # to the others' inter-broker listener, if TLS
        self.inter_broker_sasl: InterBrokerLogin | None = None  # this broker's login there, if SASL
        self._handshakes: set[asyncio.Task] = set()  # TLS connections not yet handed to a Connection

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> BrokerServices:
        """Build the parts from the settings (`_metadata_store`, `_log_manager`, `_build_services`),
        start them in the order of the module doc, then bind, register and accept."""
        load_handlers()
        config = self.config
        self._check_listeners()
        # before anything reads or writes them (Kafka's LogManager.lockLogDirs)
        self.dir_locks = LogDirLocks.acquire(self.fs, config["log.dirs"])
        cluster = await self._join_cluster() if config["zookeeper.connect"] else None
        self.cluster_id = prepare_log_dirs(config, self.fs, cluster[1] if cluster else None)
        topic_configs = TopicConfigs(config)
        store, next_block = self._metadata_store(cluster[0] if cluster is not None else None)
        registration: dict[str, Any] = {}
        if isinstance(store, ZooKeeperMetadataStore):  # before recovery consumes the clean-shutdown marker
            dirs = tuple(d for d in (read_meta_properties(d).get("directory.id") for d in config["log.dirs"]) if d)
            lost = note_host_boot(self.fs, config["log.dirs"], self._boot_id())
            registration = {"directory_ids": dirs, "may_lack_unflushed": lost}
            await store.end_previous_registration(dirs)  # before this run follows or leads anything
        lm = self.log_manager = self._log_manager(store, topic_configs)
        await asyncio.to_thread(lm.load)
        services = self.services = self._build_services(store, next_block, topic_configs, lm)
        rm = services.replica_manager
        # The dynamic settings first (a partition's log is opened with the configs in effect).
        store.add_listener(DynamicConfigListener(self.node_id, config, topic_configs, lm, rm.reconfigure_all, self.tls))
        store.add_listener(rm)
        await services.group_coordinator.start()
        await services.txn_coordinator.start()
        await rm.start()
        await store.start()  # every hosted partition opened and led, every offsets shard loading
        await services.config_admin.reencode_passwords()  # with password.encoder.old.secret
        if services.acls is not None:
            await services.acls.start()  # before the listeners accept: no request is decided without ACLs
        if isinstance(store, ZooKeeperMetadataStore) and cluster is not None:
            coordinators = (services.group_coordinator, services.txn_coordinator)
            self.fence = CoordinatorFence(
                self.node_id, cluster[0], store, coordinators, config["zookeeper.session.timeout.ms"]
            )
            self.fence.start()
        if self.controller is not None:
            await self.controller.start()
        self._tasks.append(asyncio.ensure_future(self._run_log_manager(lm)))
        if services.metrics is not None:
            self._register_gauges(services.metrics, services, lm)
            host, port = services.metrics.serve(config["metrics.listener"])
            log.info("metrics on http://%s:%d/metrics", host, port)
        for name, lhost, lport in config.listeners:
            self._bind(name, lhost, lport)
        await store.register_broker(dataclasses.replace(self._advertised_endpoint(), **registration))
        for name, sock in self._servers:
            self._tasks.append(asyncio.ensure_future(self._accept_loop(name, sock, services)))
        self._tasks.append(asyncio.ensure_future(self._close_idle_connections()))
        self._tasks.append(asyncio.ensure_future(self._warm_up()))
        return services

    def _metadata_store(self, zk: KazooClient | None) -> tuple[MetadataStore, NextBlock]:
        """The metadata store and where producer id blocks come from: ZooKeeper's (and this
        broker's controller) in cluster mode, the first log directory's on a single node."""
        config = self.config
        if zk is None:
            first_dir = config["log.dirs"][0]
            local = LocalMetadataStore(first_dir, self.node_id, self.cluster_id, self.fs.write_file_atomic)
            return local, LocalBlocks(first_dir, self.fs.write_file_atomic)
        zk_store = ZooKeeperMetadataStore(
            zk,
            self.node_id,
            listener=config.inter_broker_listener,
            protocols={n: config.security_protocol(n) for n, _h, _p in config.advertised},
            session_timeout_ms=config["zookeeper.session.timeout.ms"],
            max_in_flight=config["zookeeper.max.in.flight.requests"],
        )
        self.controller = Controller(
            zk,
            zk_store,
            self.node_id,
            ControllerConfig(
                unclean_leader_election=config["unclean.leader.election.enable"],
                auto_leader_rebalance=config["auto.leader.rebalance.enable"],
                imbalance_check_interval_s=config["leader.imbalance.check.interval.seconds"],
                imbalance_per_broker_percentage=config["leader.imbalance.per.broker.percentage"],
            ),
        )
        return zk_store, zk_store.next_producer_id_block

    def _log_manager(self, store: MetadataStore, topic_configs: TopicConfigs) -> LogManager:
        config = self.config

        def log_config_of(topic: str) -> LogConfig | None:
            info = store.snapshot.topics.get(topic)
            return topic_configs.log_config(info.configs) if info is not None else None

        return LogManager(
            list(config["log.dirs"]),
            topic_configs.default_log_config,
            fs=self.fs,
            recovery_threads=config["num.recovery.threads.per.data.dir"],
            topic_config=log_config_of,
            config=LogManagerConfig.from_broker(config),
        )

    def _build_services(
        self, store: MetadataStore, next_block: NextBlock, topic_configs: TopicConfigs, lm: LogManager
    ) -> BrokerServices:
        """Construct every service, each given the parts it uses (docs/architecture.md), in
        dependency order: no part needs one built after it."""
        config = self.config
        metrics = BrokerMetrics() if config["metrics.listener"] else None
        replication = self.controller is not None
        policy = ChannelPolicy.from_broker(config)
        if self.inter_broker_tls is not None:
            policy = dataclasses.replace(policy, ssl_context=self.inter_broker_tls)
        if self.inter_broker_sasl is not None:
            policy = dataclasses.replace(policy, sasl=self.inter_broker_sasl)
        channels = self.channels = NodeChannels(self.node_id, lambda node: store.snapshot.broker(node), policy)
        rm = ReplicaManager(
            self.node_id,
            lm,
            topic_configs,
            metrics,
            log_dirs=config["log.dirs"],
            fetchers=ReplicaFetcherManager(self.node_id, FetcherConfig.from_broker(config), store, channels.connect)
            if replication
            else None,
            alter_isr=AlterPartitionSender(self.node_id, store, channels.connect) if replication else None,
            replica_lag_max_ms=config["replica.lag.time.max.ms"],
        )
        topics = TopicAdmin(store, topic_configs, config, node_id=self.node_id, file_cache=self.fs.file_cache)
        internal_topics = InternalTopics(config, topics)
        groups = GroupCoordinator(GroupConfig.from_broker(config), rm, internal_topics.ensure_offsets_topic)
        rm.add_leadership_listener(groups)
        producer_ids = ProducerIdAllocator(next_block)
        markers = TransactionMarkerChannel(
            self.node_id, store, channels, functools.partial(write_marker_here, rm, groups)
        )
        txns = TransactionCoordinator(
            TxnConfig.from_broker(config),
            rm,
            internal_topics.ensure_transaction_state_topic,
            producer_ids.next_id,
            markers,
        )
        rm.add_leadership_listener(txns)
        return BrokerServices(
            config=config,
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            metadata=store,
            topics=topics,
            config_admin=ConfigAdmin(self.node_id, config, topic_configs, store, topics, self.tls),
            replica_manager=rm,
            group_coordinator=groups,
            fetch_sessions=FetchSessionCache(config["max.incremental.fetch.session.cache.slots"]),
            producer_ids=producer_ids,
            txn_coordinator=txns,
            txn_verification=TxnVerification(self.node_id, store, rm, txns, AddPartitionsToTxnManager(channels)),
            metrics=metrics,
            controller=self.controller,
            forwarding=ForwardingManager(self.node_id, store, channels) if replication else None,
            acls=self._acl_manager(),
            sasl=self._sasl_server(store, metrics),
            quotas=ClientQuotas(
                config["quota.window.num"],
                config["quota.window.size.seconds"],
                config["controller.quota.window.num"],
                config["controller.quota.window.size.seconds"],
            ),
        )

    def _acl_manager(self) -> AclManager | None:
        """With `authorizer.class.name` set: the ACLs (ZooKeeper's in cluster mode, the first log
        directory's on a single node) and the authorizer deciding on them."""
        config = self.config
        if not config["authorizer.class.name"]:
            return None
        authorizer = Authorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])
        if self.zk is not None:
            return AclManager(authorizer, ZooKeeperAclStore(self.zk))
        return AclManager(authorizer, LocalAclStore(config["log.dirs"][0], self.fs.write_file_atomic))

    def _sasl_server(self, store: MetadataStore, metrics: BrokerMetrics | None) -> SaslServer | None:
        """The SASL listeners' authentication, SCRAM credentials read from the metadata store."""
        listeners = SaslServer.check_config(self.config)
        if not listeners:
            return None
        return SaslServer(listeners, lambda mechanism, user: scram_credential(store.snapshot, mechanism, user), metrics)

    def _register_gauges(self, metrics: BrokerMetrics, services: BrokerServices, lm: LogManager) -> None:
        """Each component's gauges, computed when scraped, from what it owns."""
        rm = services.replica_manager
        for collect in (
            connection_gauges(lambda: len(self.connections)),
            purgatory_gauges(rm.fetch_purgatory, rm.produce_purgatory),
            log_dir_gauges(lm, self.config["log.dirs"]),
            replication_gauges(lambda: list(rm.partitions.values())),
            controller_gauges(self.controller, lambda: services.metadata.snapshot),
            group_gauges(services.group_coordinator.metrics_snapshot),
        ):
            metrics.register(collect)
        if services.quotas is not None:
            metrics.register(services.quotas.collect)

    async def _run_log_manager(self, lm: LogManager) -> None:
        try:
            await lm.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("log manager background loop failed")

    def _check_listeners(self) -> None:
        config = self.config
        names = [n for n, _h, _p in config.listeners]
        if len(set(names)) != len(names):
            raise ConfigError(f"listeners repeat a name: {names}")
        for name in names:
            protocol = config.security_protocol(name)
            if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
                raise ConfigError(
                    f"listener {name} is {protocol}: the security protocols served are PLAINTEXT, SSL, "
                    "SASL_PLAINTEXT and SASL_SSL"
                )
            if protocol in TLS_PROTOCOLS:
                try:
                    self.tls.build(config, name)
                except TlsConfigError as e:
                    raise ConfigError(str(e)) from None
        SaslServer.check_config(config)
        self.inter_broker_sasl = inter_broker_login(config)
        advertised = {n for n, _h, _p in config.advertised}
        if advertised - set(names):
            raise ConfigError(
                f"advertised.listeners names listeners that do not exist: {sorted(advertised - set(names))}"
            )
        if config["inter.broker.listener.name"] and config.sources["security.inter.broker.protocol"] != "default":
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
            )
        if config.inter_broker_listener not in names:
            raise ConfigError(
                f"inter.broker.listener.name={config.inter_broker_listener} is not one of the listeners {names}"
            )
        if config.security_protocol(config.inter_broker_listener) in TLS_PROTOCOLS:
            try:
                self.inter_broker_tls = client_context(config)
            except TlsConfigError as e:
                raise ConfigError(str(e)) from None

    async def _join_cluster(self) -> tuple[KazooClient, str]:
        """Cluster mode: connect to ZooKeeper and learn (or, first, set) the cluster id."""
        config = self.config
        if config.sources.get("node.id") == "default" and config.sources.get("broker.id") == "default":
            raise ConfigError("cluster mode (zookeeper.connect) needs broker.id (or node.id) set for each broker")
        try:
            zk = await asyncio.to_thread(
                zk_client.connect,
                config["zookeeper.connect"],
                config["zookeeper.session.timeout.ms"],
                config["zookeeper.connection.timeout.ms"],
            )
        except zk_client.ZooKeeperUnavailable as e:
            raise ConfigError(str(e)) from None
        self.zk = zk
        existing = {cid for d in config["log.dirs"] if (cid := read_meta_properties(d).get("cluster.id"))}
        proposed = config["cluster.id"] or new_cluster_id()
        cluster_id = await asyncio.to_thread(zk_client.cluster_id, zk, proposed)
        log.info(
            "joining cluster %s through ZooKeeper at %s%s",
            cluster_id,
            config["zookeeper.connect"],
            f" (log directories of cluster {', '.join(existing)})" if existing else "",
        )
        return zk, cluster_id

    def _bind(self, name: str, host: str, port: int) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or "0.0.0.0", port))
        except OSError as e:
            sock.close()
            raise ConfigError(f"cannot listen on {name}://{host}:{port}: {e.strerror}") from None
        sock.listen(512)
        sock.setblocking(False)
        self._servers.append((name, sock))
        self.bound.append(sock.getsockname()[:2])

    def _boot_id(self) -> str:
        """The host's boot id (Linux: a new one at every boot); "" where there is none."""
        try:
            with open(BOOT_ID) as f:
                return f.read().strip()
        except OSError:
            return ""

    def _advertised_endpoint(self) -> BrokerInfo:
        """Every advertised listener (port 0, a test's free port: the port the OS chose for the
        listener of that name); host and port those of the inter-broker listener."""
        bound = {name: sock.getsockname()[:2] for name, sock in self._servers}
        endpoints = []
        for name, host, port in self.config.advertised:
            if port == 0 and name in bound:
                host, port = host or bound[name][0], bound[name][1]
            endpoints.append((name, host, port))
        inter = self.config.inter_broker_listener
        _n, host, port = next((e for e in endpoints if e[0] == inter), endpoints[0])
        return BrokerInfo(self.node_id, host, port, self.config["broker.rack"] or None, tuple(endpoints))

    async def _accept_loop(self, listener_name: str, server: socket.socket, services: BrokerServices) -> None:
        loop = asyncio.get_running_loop()
        rcv = self.config["socket.receive.buffer.bytes"]
        snd = self.config["socket.send.buffer.bytes"]
        protocol = self.config.security_protocol(listener_name)
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
            if services.metrics is not None:
                services.metrics.connection_accepted()
            peer = f"{addr[0]}:{addr[1]}"
            tls = self.tls.get(listener_name)  # taken per connection: a dynamic keystore update replaces it
            if tls is None:
                self._serve(Connection(services, PlaintextTransport(sock, loop), peer, listener_name, protocol))
            else:
                task = asyncio.ensure_future(self._serve_tls(tls, sock, peer, listener_name, protocol, services))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)

    def _serve(self, conn: Connection) -> None:
        self.connections.add(conn)
        task = asyncio.ensure_future(conn.run())
        self._conn_tasks.add(task)
        task.add_done_callback(self._connection_done(conn))

    async def _serve_tls(
        self,
        tls: ListenerTls,
        sock: socket.socket,
        peer: str,
        listener_name: str,
        protocol: str,
        services: BrokerServices,
    ) -> None:
        """The TLS handshake, within connections.max.idle.ms (a client that never finishes it is
        closed, as Kafka's idle expiry closes it), then the connection as any other, with the
        principal the client's certificate gives."""
        transport = TlsTransport(sock, asyncio.get_running_loop(), tls.context)
        try:
            await asyncio.wait_for(transport.handshake(), self.config["connections.max.idle.ms"] / 1000)
            principal = tls.principal(transport.peer_certificate())
        except asyncio.CancelledError:  # the broker stops
            transport.close()
            raise
        except (OSError, TimeoutError, NoMatchingRule, ValueError) as e:
            reason = "no handshake within connections.max.idle.ms" if isinstance(e, TimeoutError) else str(e)
            log.info("closing connection from %s on listener %s: TLS handshake failed: %s", peer, listener_name, reason)
            transport.close()
            return
        if self._stopping:
            transport.close()
            return
        self._serve(Connection(services, transport, peer, listener_name, protocol, principal=principal))

    def _connection_done(self, conn: Connection) -> Callable[[asyncio.Task], None]:
        def done(task: asyncio.Task) -> None:
            self._conn_tasks.discard(task)
            self.connections.discard(conn)

        return done

    async def _warm_up(self) -> None:
        """Warm the schema caches in the background (not on the start-up path, not in a
        request), then move everything alive so far out of the cyclic GC's reach: the
        collector then only scans what requests allocate, which keeps its pauses short."""
        await asyncio.to_thread(preload_schemas)
        gc.collect()
        gc.freeze()

    async def _close_idle_connections(self) -> None:
        """connections.max.idle.ms: close connections with no request for that long."""
        idle_ms = self.config["connections.max.idle.ms"]
        idle_s = idle_ms / 1000
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 30))
            now = time.monotonic()
            for conn in list(self.connections):
                if not conn.in_flight and now - conn.last_active > idle_s:
                    log.info("closing connection %d from %s: idle for more than %d ms", conn.id, conn.peer, idle_ms)
                    conn.stop()
                    conn.sock_shutdown()

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        log.info("shutting down")
        services = self.services
        if (
            services is not None
            and self.controller is not None
            and services.forwarding is not None
            and self.config["controlled.shutdown.enable"]
        ):
            try:
                await controlled_shutdown(
                    self.node_id,
                    lambda: services.snapshot,
                    self.controller,
                    services.forwarding,
                    self.config["controlled.shutdown.max.retries"],
                    self.config["controlled.shutdown.retry.backoff.ms"],
                )
            except Exception:
                log.exception("controlled shutdown failed")
        for _name, s in self._servers:
            s.close()
        for conn in list(self.connections):
            conn.stop()
        for handshake in list(self._handshakes):
            handshake.cancel()
        if services is not None:
            # Long-polling fetches answer now (with what they have) instead of at their max wait.
            services.replica_manager.fetch_purgatory.cancel_all()
        if self._conn_tasks:
            await asyncio.wait(list(self._conn_tasks), timeout=10)
        if self.fence is not None:
            self.fence.stop()
        if services is not None:
            try:
                await services.group_coordinator.stop()
            except Exception:
                log.exception("group coordinator failed to stop cleanly")
            try:
                await services.txn_coordinator.stop()
            except Exception:
                log.exception("transaction coordinator failed to stop cleanly")
            if self.controller is not None:
                await self.controller.stop()
            await services.metadata.stop()
            if services.acls is not None:
                await services.acls.stop()
            await services.replica_manager.stop()
        if self.channels is not None:
            self.channels.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for t in list(self._conn_tasks):
            t.cancel()
        try:
            if self.log_manager is not None:
                await asyncio.to_thread(self.log_manager.shutdown)
        finally:
            if self.dir_locks is not None:
                self.dir_locks.release()
        if services is not None and services.metrics is not None:
            services.metrics.close()
        if self.zk is not None:
            zk, self.zk = self.zk, None
            await asyncio.to_thread(_close_zookeeper, zk)
        log.info("shut down cleanly")


def _close_zookeeper(zk: KazooClient) -> None:
    """End the session now: the ephemeral registration goes at once, not at session expiry."""
    try:
        zk.stop()
        zk.close()
    except Exception:  # noqa: BLE001 - closing a session that is already lost
        pass


async def run_broker(config: BrokerConfig) -> int:
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except (ConfigError, AdoptionError, LogDirInUseError) as e:
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
