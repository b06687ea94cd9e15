"""`odradek cluster up|status`: a local development cluster, and what a cluster looks like.

    odradek cluster up --brokers 3 [--dir DIR]      # a private ZooKeeper + N brokers on loopback; ^C stops all
    odradek cluster up --secure                      # the same with TLS, SCRAM-SHA-512 and ACLs (secure_cluster.py)
    odradek cluster status --zookeeper HOST:PORT     # brokers, controller, partitions (leader, replicas, ISR)

`up` starts ZooKeeper (Debian's, cli/zookeeper_server.py) on a free loopback port with its
data under DIR/zookeeper, then brokers 1..N (`odradek broker` processes with
`zookeeper.connect` and `broker.id`, data under DIR/broker-<id>, logs in
DIR/broker-<id>.log) on ports 9092.. when free, prints the bootstrap servers and keeps a
table of the cluster's state on screen until Ctrl-C, which stops the brokers (SIGTERM:
they shut down cleanly) and then ZooKeeper. `status` reads ZooKeeper once. With `--secure` the
clients' listener is SASL_SSL and the brokers talk over mutual TLS (cli/secure_cluster.py); `up`
prints the path of the clients' settings file (DIR/secure/client.properties).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from odradek.cluster.metadata import ClusterSnapshot
from odradek.cluster.zk_cache import read_view
from odradek.cluster.zookeeper import build_snapshot


@click.group()
def cluster() -> None:
    """A local cluster for development, and the state of any cluster."""


def _snapshot(connect: str) -> ClusterSnapshot:
    from odradek.cluster.zk_client import connect as zk_connect

    zk = zk_connect(connect, 10000, 10000)
    try:
        return build_snapshot(read_view(zk))
    finally:
        zk.stop()
        zk.close()


def render(snap: ClusterSnapshot, *, topics: bool = True) -> Group:
    """Rich tables of a snapshot: brokers (controller marked) and every partition."""
    brokers = Table(title=f"cluster {snap.cluster_id or '(none)'}", title_justify="left")
    for col in ("broker", "endpoint", "rack", "controller"):
        brokers.add_column(col)
    for b in snap.brokers:
        brokers.add_row(
            str(b.node_id), f"{b.host}:{b.port}", b.rack or "", "yes" if b.node_id == snap.controller_id else ""
        )
    parts = []
    if topics:
        t = Table(title="partitions", title_justify="left")
        for col in ("topic", "partition", "leader", "leader epoch", "replicas", "isr", "state"):
            t.add_column(col)
        for name in sorted(snap.topics):
            for p in snap.topics[name].partitions:
                state = "offline" if p.leader < 0 else "under-replicated" if len(p.isr) < len(p.replicas) else ""
                t.add_row(
                    name,
                    str(p.partition),
                    str(p.leader),
                    str(p.leader_epoch),
                    ",".join(map(str, p.replicas)),
                    ",".join(map(str, p.isr)),
                    state,
                )
        parts.append(t)
    return Group(brokers, *parts)


@cluster.command("status")
@click.option("--zookeeper", "connect", required=True, metavar="HOST:PORT[/chroot]", help="zookeeper.connect")
@click.option("--brokers-only", is_flag=True, help="Leave the partitions out.")
def status(connect: str, brokers_only: bool) -> None:
    """Print brokers, the controller, and partitions with leader, replicas and ISR."""
    try:
        snap = _snapshot(connect)
    except Exception as e:  # noqa: BLE001 - a CLI reports, it does not crash
        raise click.ClickException(str(e)) from None
    Console().print(render(snap, topics=not brokers_only))


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _ports(n: int, first: int) -> list[int]:
    from odradek.cli.zookeeper_server import free_port

    wanted = list(range(first, first + n))
    return wanted if all(_port_free(p) for p in wanted) else [free_port() for _ in range(n)]


@cluster.command("up")
@click.option("--brokers", "count", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option("--dir", "directory", default="odradek-cluster", show_default=True, type=click.Path(file_okay=False))
@click.option("--port", "first_port", default=9092, show_default=True, help="First broker's port (free ones if taken).")
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="A broker setting for every broker (repeatable).",
)
@click.option(
    "--secure",
    is_flag=True,
    help="TLS and SCRAM-SHA-512 (SASL_SSL for clients, mutual TLS between brokers), ACLs, an admin user; "
    "prints the clients' settings file.",
)
def up(count: int, directory: str, first_port: int, overrides: tuple[str, ...], secure: bool) -> None:
    """Start a private ZooKeeper and N brokers on loopback; Ctrl-C stops them all."""
    from odradek.cli import secure_cluster
    from odradek.cli.zookeeper_server import ZooKeeperServer, ZooKeeperServerError, free_port

    base = Path(directory).resolve()
    base.mkdir(parents=True, exist_ok=True)
    console = Console()
    files = None
    if secure:
        try:
            files = secure_cluster.make_pki(base / "secure")
        except secure_cluster.SecureSetupError as e:
            raise click.ClickException(str(e)) from None
    zk = ZooKeeperServer(base / "zookeeper")
    try:
        zk.start()
    except ZooKeeperServerError as e:
        raise click.ClickException(str(e)) from None
    procs: dict[int, subprocess.Popen[bytes]] = {}
    ports = _ports(count, first_port)
    internal_ports = [free_port() for _ in ports] if secure else []
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        for i, port in enumerate(ports, start=1):
            cmd = [
                sys.executable,
                "-m",
                "odradek",
                "broker",
                "--override",
                f"zookeeper.connect={zk.connect}",
                "--override",
                f"broker.id={i}",
                "--override",
                f"log.dirs={base / f'broker-{i}'}",
            ]
            if files is None:
                listeners = [f"listeners=PLAINTEXT://127.0.0.1:{port}"]
            else:
                listeners = secure_cluster.broker_overrides(files, port, internal_ports[i - 1])
            for o in listeners:
                cmd += ["--override", o]
            for o in overrides:
                cmd += ["--override", o]
            with open(base / f"broker-{i}.log", "ab") as log:
                procs[i] = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
                )
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        console.print(f"ZooKeeper: [bold]{zk.connect}[/]   data and logs: {base}")
        if files is not None:
            internal = ",".join(f"127.0.0.1:{p}" for p in internal_ports)
            try:
                password = secure_cluster.create_admin(files, internal)
            except secure_cluster.SecureSetupError as e:
                raise click.ClickException(f"{e} (see the brokers' logs in {base})") from None
            props = secure_cluster.write_client_properties(files, password)
            console.print(f"SASL_SSL, SCRAM-SHA-512 as user {secure_cluster.ADMIN_USER} (a super user); CA {files.ca}")
            console.print(f"client settings: {props}", soft_wrap=True)
        console.print(f"bootstrap servers: [bold green]{bootstrap}[/]   (Ctrl-C stops the cluster)")
        with Live(console=console, refresh_per_second=1, transient=False) as live:
            while not stop:
                dead = [i for i, p in procs.items() if p.poll() is not None]
                try:
                    view = render(_snapshot(zk.connect), topics=True)
                except Exception as e:  # noqa: BLE001 - the display retries
                    view = Group(f"(reading ZooKeeper: {e})")
                if dead:
                    view = Group(view, f"[red]exited: broker {', '.join(map(str, dead))} (see its log)[/]")
                live.update(view)
                for _ in range(20):
                    if stop:
                        break
                    time.sleep(0.1)
    finally:
        console.print("stopping brokers ...")
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        zk.stop()
        console.print("stopped")
