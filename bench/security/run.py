"""What TLS and SASL cost the broker (issue #27): produce and consume over PLAINTEXT, SSL and
SASL_SSL (SCRAM-SHA-512), odradek beside Apache Kafka 4.4, in one run; and idle TLS connections.

Brokers (single node on 127.0.0.1, started at once, up for the whole run): ``odradek`` (this
checkout) and ``kafka4`` (Apache Kafka 4.4, KRaft, Kafka's own JVM flags: bench/broker/brokers.py),
each with three listeners configured alike: PLAINTEXT (also the admin's and inter-broker),
SSL and SASL_SSL, both TLS listeners with the same PEM keystore (an EC P-256 key and a
certificate for 127.0.0.1 signed by a CA made for the run, tests/support/tls.py) and PEM
truststore, ``ssl.client.auth=none``, SASL_SSL enabling SCRAM-SHA-512 only, with one SCRAM
user created through AlterUserScramCredentials. The TLS version and cipher suite each TLS
listener negotiates with an OpenSSL client offering its defaults are printed and recorded
(both brokers must agree, or the run says so).

Workloads (the same clients for both brokers: librdkafka through confluent-kafka):
  * produce: --records records of 100 B, acks=1, no compression, linger.ms=5, fed by
    produce_batch (``odradek perf produce --driver confluent --native-batch``, as the
    bench/broker rows), into a fresh topic of --partitions partitions;
  * consume: that topic from the start (consume.py: ``odradek perf consume``'s librdkafka
    consumer, with the listener's client settings);
each over each protocol, --repeats times, brokers and protocols taking turns in a rotating
order, after one unmeasured produce and consume per protocol (--warmup-records; the JVM's JIT).
  * idle (--idle N): N idle connections to each broker's SSL listener (and --idle-plaintext: to
    its PLAINTEXT one first), each a TLS handshake and one ApiVersions, held --idle-seconds:
    the broker's RSS growth per connection and its CPU while they idle
    (bench/broker/idle_conns.py --tls, through bench/broker/workloads.IdleConnections), and its
    RSS once they are closed. Memory a phase leaves behind is reused by the next one, so the
    second phase's RSS per connection reads low: measure TLS alone (without --idle-plaintext)
    for its figure.

Every row: records/s, the broker's CPU-seconds per million records (utime+stime of the broker
process over the load's run, every thread), its memory, the command (bench/broker/runner.py).
The report gives medians, each protocol's CPU per record as a multiple of the same broker's
plaintext, odradek's as a multiple of Kafka's over the same protocol, and what TLS adds per
million records on each broker (the goal: no more on odradek than on Kafka).

    /work/wt/heavy .venv/bin/python bench/security/run.py --records 200000 --repeats 1     # smoke
    /work/wt/heavy .venv/bin/python bench/security/run.py                                   # throughput
    /work/wt/heavy .venv/bin/python bench/security/run.py --workloads idle --idle 2000 --idle-plaintext
    /work/wt/heavy .venv/bin/python bench/security/run.py --brokers odradek --repeats 1 --profile /tmp/prof  # py-spy

Writes bench/security/results/latest.json and latest.md (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench" / "broker"))

import brokers as brokers_mod  # noqa: E402
import workloads as wl  # noqa: E402
from runner import Runner, log, perf_cmd, rotation  # noqa: E402
from support.apache_kafka import ApacheKafka  # noqa: E402
from support.broker import BrokerProcess, free_port  # noqa: E402
from support.tls import Pki  # noqa: E402

HERE = Path(__file__).resolve().parent
CONSUME = str(HERE / "consume.py")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
USER, PASSWORD = "bench", "bench-Secret-512"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
BROKERS = ("odradek", "kafka4")


def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="odradek,kafka4", help="comma list of odradek, kafka4")
    ap.add_argument("--workloads", default="produce,consume", help="comma list of produce, consume, idle")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="comma list of PLAINTEXT, SSL, SASL_SSL")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per produce run (100 B each)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--native-batch", type=int, default=10000, help="records per produce_batch() call")
    ap.add_argument("--warmup-records", type=int, default=300_000, help="unmeasured run per protocol first (0: none)")
    ap.add_argument("--idle", type=int, default=2000, help="idle TLS connections per broker (workload idle)")
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument("--idle-plaintext", action="store_true", help="the same number of plaintext ones first")
    ap.add_argument("--profile", default=None, help="a directory: py-spy profiles of odradek's measured rows there")
    ap.add_argument("--py-spy", default=None, help="py-spy (default: beside the interpreter, else /tmp/pyspy/bin)")
    ap.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    a = ap.parse_args(argv)
    a.brokers = [b for b in a.brokers.split(",") if b]
    a.workloads = {w for w in a.workloads.split(",") if w}
    a.protocols = [p for p in a.protocols.split(",") if p]
    for b in a.brokers:
        if b not in BROKERS:
            raise SystemExit(f"unknown broker {b}; known: {', '.join(BROKERS)}")
    return a


# ---------------------------------------------------------------------------------- brokers


def listener_settings(pki: Pki, broker) -> dict[str, str]:
    """The TLS and SASL settings both brokers get (their listeners named as their protocols)."""
    return {
        **pki.broker_settings(broker, "SSL"),
        **pki.broker_settings(broker, "SASL_SSL"),
        "sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": SCRAM_JAAS,
    }


class SecurePeer(brokers_mod.Peer):
    """A started broker and the address of each of its listeners, by security protocol."""

    listeners: dict[str, str]


def start(name: str, tmp: Path, secure: dict[str, str]) -> SecurePeer:
    ports = {p: free_port() for p in PROTOCOLS}
    addresses = {p: f"127.0.0.1:{port}" for p, port in ports.items()}
    listeners = ",".join(f"{p}://{addr}" for p, addr in addresses.items())
    settings = {"num.partitions": 1, **brokers_mod.SHARED_SETTINGS, **secure}
    if name == "odradek":
        handle: object = BrokerProcess(
            tmp / name,
            {**settings, "listeners": listeners, "inter.broker.listener.name": "PLAINTEXT"},
            port=ports["PLAINTEXT"],
        )
        version = "this checkout"
    else:
        k = ApacheKafka(tmp / name, line="4", heap="1g", jvm=brokers_mod.KAFKA_JVM, overrides=settings)
        node = k.nodes[0]
        # the fixture's node listens on PLAINTEXT at node.port: ours instead, and SSL, SASL_SSL
        addresses["PLAINTEXT"] = node.bootstrap
        listeners = ",".join(f"{p}://{addr}" for p, addr in addresses.items())
        node.configure(
            {
                **node.properties,
                "listeners": f"{listeners},CONTROLLER://{node.host}:{node.controller_port}",
                "advertised.listeners": listeners,
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            }
        )
        handle = k
        version = k.version
    handle.start(timeout=120)  # type: ignore[attr-defined]
    peer = SecurePeer(name, handle, version)
    peer.listeners = addresses
    return peer


def create_scram_user(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap})
    up = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(timeout=30)


def client_settings(protocol: str, ca: Path) -> dict[str, str]:
    """librdkafka's settings for a listener of `protocol`."""
    if protocol == "PLAINTEXT":
        return {}
    conf = {"security.protocol": protocol, "ssl.ca.location": str(ca)}
    if protocol == "SASL_SSL":
        conf |= {"sasl.mechanism": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD}
    return conf


def negotiated(address: str, ca: Path) -> dict[str, str]:
    """The TLS version and cipher suite a listener picks for an OpenSSL client with its default
    offer (the OpenSSL librdkafka's Python wheel and this Python use alike)."""
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            name, version, bits = s.cipher() or ("?", "?", 0)
            return {"version": s.version() or "?", "cipher": name, "bits": str(bits)}


# ---------------------------------------------------------------------------------- workloads


@contextlib.contextmanager
def profiled(r: Runner, a, name: str, rep: int):
    """py-spy (raw collapsed stacks, 200 Hz, --nonblocking) on odradek's broker while the block
    runs, when --profile is given (not in the warm-up): bench/broker/profile_top.py summarises
    the file."""
    if not a.profile or r.name != "odradek" or rep < 0:
        yield
        return
    exe = a.py_spy or next(
        (str(p) for p in (Path(sys.executable).with_name("py-spy"), Path("/tmp/pyspy/bin/py-spy")) if p.exists()),
        "py-spy",
    )
    out = Path(a.profile) / f"profile-{name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [exe, "record", "-p", str(r.pid), "-r", "200", "--nonblocking", "-f", "raw", "-o", str(out)]
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def x_options(conf: dict[str, str]) -> list[str]:
    return [o for k, v in conf.items() for o in ("-X", f"{k}={v}")]


def produce_and_consume(r: Runner, peer: SecurePeer, protocol: str, a, n: int, rep: int, ca: Path) -> None:
    topic = f"sec-{protocol.lower()}-{rep}-{uuid.uuid4().hex[:6]}"
    r.create_topic(topic, a.partitions)  # over the PLAINTEXT listener, as every admin call here
    address, conf = peer.listeners[protocol], client_settings(protocol, ca)
    meta = {"protocol": protocol, "partitions": a.partitions, "rep": rep}
    written = None
    if "produce" in a.workloads or "consume" in a.workloads:
        cmd = perf_cmd(
            "produce", "-b", address, "-t", topic, "-n", str(n), "-s", "100", "--acks", "1", "-z", "none",
            "--linger-ms", "5", "--driver", "confluent", "--native-batch", str(a.native_batch), *x_options(conf),
        )  # fmt: skip
        with profiled(r, a, f"produce-{protocol.lower()}-{rep}", rep):
            written = r.run(cmd, {"workload": "produce", **meta})
        brokers_mod.settle(r.pid)
    if "consume" in a.workloads:
        if written is None:
            r.results.append({"broker": r.name, "workload": "consume", **meta, "error": "its topic was not written"})
        else:
            cmd = [sys.executable, CONSUME, address, topic, "-n", str(n), *x_options(conf)]
            with profiled(r, a, f"consume-{protocol.lower()}-{rep}", rep):
                r.run(cmd, {"workload": "consume", **meta})
    r.delete_topic(topic)


def warm_up(runners: list[Runner], peers: dict[str, SecurePeer], a, ca: Path) -> None:
    for r in runners:
        for protocol in a.protocols:
            produce_and_consume(r, peers[r.name], protocol, a, a.warmup_records, -1, ca)
        r.results.clear()
        brokers_mod.settle(r.pid)


def run_throughput(runners: list[Runner], peers: dict[str, SecurePeer], a, ca: Path) -> None:
    if a.warmup_records > 0:
        warm_up(runners, peers, a, ca)
    for rep in range(a.repeats):
        k = rep % len(a.protocols)
        for protocol in a.protocols[k:] + a.protocols[:k]:
            for r in rotation(runners, rep):
                produce_and_consume(r, peers[r.name], protocol, a, a.records, rep, ca)


def run_idle(runners: list[Runner], peers: dict[str, SecurePeer], a, ca: Path) -> list[dict]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < a.idle * len(runners) + 256:
        log(f"RLIMIT_NOFILE hard limit {hard}: fewer than {a.idle} connections per broker fit")
    rows = wl.idle_baseline(runners, min(a.idle_seconds, 10.0))
    kinds = (["PLAINTEXT"] if a.idle_plaintext else []) + ["SSL"]
    for protocol in kinds:
        opts = ("--tls", str(ca)) if protocol == "SSL" else ()

        def address(r: Runner, p: str = protocol) -> str:
            return peers[r.name].listeners[p]

        idle = wl.IdleConnections(runners, a.idle, a.idle_seconds, address, opts)
        try:
            got = idle.open()
        finally:
            idle.close()
        for r in runners:
            brokers_mod.settle(r.pid, timeout=30)
        # what the broker keeps once they are gone (a later phase's "before")
        after = {r.name: brokers_mod.proc_memory(r.pid).get("rss_mb") for r in runners}
        rows += [{**row, "protocol": protocol, "rss_after_close_mb": after[row["broker"]]} for row in got]
    return rows


# ---------------------------------------------------------------------------------- report


def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def report(rows: list[dict], meta: dict) -> str:
    out = [
        f"Run {meta['when']} on {meta['cpus']} CPUs, load average at start {meta['load']:.2f}; "
        f"{meta['records']:,} records of 100 B per run, {meta['partitions']} partition(s), acks=1, "
        f"median of {meta['repeats']}; clients: librdkafka {meta['librdkafka']}; versions: {meta['versions']}",
        "",
        "TLS negotiated (an OpenSSL client's default offer): "
        + "; ".join(f"{b} {p}: {t['version']} {t['cipher']}" for b, ts in meta["tls"].items() for p, t in ts.items()),
        "",
    ]
    work = [r for r in rows if r.get("workload") in ("produce", "consume")]
    if work:
        med: dict[tuple[str, str, str], dict] = {}
        for key in {(r["broker"], r["workload"], r["protocol"]) for r in work}:
            rs = [r for r in work if (r["broker"], r["workload"], r["protocol"]) == key and "error" not in r]
            errs = [r["error"] for r in work if (r["broker"], r["workload"], r["protocol"]) == key and "error" in r]
            med[key] = {
                "rate": _median(rs, "records_per_s"),
                "cpu": _median(rs, "broker_cpu_s_per_m"),
                "rss": _median(rs, "rss_mb"),
                "runs": len(rs),
                "error": errs[-1].strip().splitlines()[-1][:120].replace("|", "/") if errs and not rs else None,
            }
        out += [
            "| workload | protocol | broker | records/s | broker CPU-s / M records | × own plaintext | "
            "TLS adds CPU-s / M | × Kafka (CPU / record) | RSS MiB | runs |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for workload in ("produce", "consume"):
            for protocol in PROTOCOLS:
                for broker in BROKERS:
                    m = med.get((broker, workload, protocol))
                    if m is None:
                        continue
                    if m["error"]:
                        out.append(f"| {workload} | {protocol} | {broker} | failed: {m['error']} | | | | | | 0 |")
                        continue
                    plain = med.get((broker, workload, "PLAINTEXT"), {}).get("cpu")
                    kafka = med.get(("kafka4", workload, protocol), {}).get("cpu")
                    cpu = m["cpu"]
                    own = f"{cpu / plain:.2f}" if cpu and plain else ""
                    tls = cpu is not None and plain is not None and protocol != "PLAINTEXT"
                    adds = f"{cpu - plain:+.2f}" if tls else ""
                    vs = f"{cpu / kafka:.2f}" if cpu and kafka and broker != "kafka4" else ""
                    out.append(
                        f"| {workload} | {protocol} | {broker} | {m['rate'] or 0:,.0f} | {cpu or 0:.2f} | {own} | "
                        f"{adds} | {vs} | {m['rss'] or 0:.0f} | {m['runs']} |"
                    )
        out.append("")
    idle = [r for r in rows if r.get("workload") == "idle"]
    if idle:
        out += [
            "| idle connections | broker | opened | failed | RSS before → after MiB | KiB per connection | "
            "CPU opening them (s) | idle CPU, % of a core | RSS once closed, MiB |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in idle:
            what = f"{r['idle_conns']} {r.get('protocol', '')}" if r.get("idle_conns") else "none"
            per, before, opening = r.get("rss_per_conn_kib"), r.get("rss_before_mb"), r.get("open_cpu_s")
            rss = f"{r.get('rss_mb') or 0:.0f}" if before is None else f"{before:.0f} → {r.get('rss_mb') or 0:.0f}"
            out.append(
                f"| {what} | {r['broker']} | {r.get('opened', '')} | {r.get('failed', '')} | {rss} | "
                + ("" if per is None else f"{per:.1f}")
                + " | "
                + ("" if opening is None else f"{opening:.2f}")
                + f" | {r['idle_cpu_per_s'] * 100:.2f} | "
                + ("" if r.get("rss_after_close_mb") is None else f"{r['rss_after_close_mb']:.0f}")
                + " |"
            )
        out.append("")
    return "\n".join(out)


def main(argv=None) -> None:
    a = options(argv)
    import confluent_kafka

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # brokers inherit it: 2,000 connections each
    meta = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
        "records": a.records,
        "partitions": a.partitions,
        "repeats": a.repeats,
        "workloads": sorted(a.workloads),
        "librdkafka": confluent_kafka.libversion()[0],
        "versions": {},
        "tls": {},
    }
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp:
        pki = Pki.create(Path(tmp) / "pki")
        broker_id = pki.identity("broker", "/CN=localhost", hosts=("127.0.0.1", "localhost"))
        secure = listener_settings(pki, broker_id)
        peers: dict[str, SecurePeer] = {}
        try:
            for name in a.brokers:
                reason = brokers_mod.available(name) if name != "odradek" else None
                if reason:
                    log(f"{name}: {reason}; left out")
                    continue
                peers[name] = start(name, Path(tmp), secure)
                create_scram_user(peers[name].bootstrap)
                meta["versions"][name] = peers[name].version
                meta["tls"][name] = {p: negotiated(peers[name].listeners[p], pki.ca) for p in ("SSL", "SASL_SSL")}
                log(f"[{name}] listeners {peers[name].listeners}; TLS {meta['tls'][name]}")
            suites = {(t["version"], t["cipher"]) for ts in meta["tls"].values() for t in ts.values()}
            if len(suites) > 1:
                log(f"the brokers negotiate different TLS: {sorted(suites)}")
            runners = [Runner(p, a) for p in peers.values()]
            for r in runners:
                brokers_mod.settle(r.pid)
            if {"produce", "consume"} & a.workloads:
                run_throughput(runners, peers, a, pki.ca)
            rows = [row for r in runners for row in r.results]
            if "idle" in a.workloads:
                rows += run_idle(runners, peers, a, pki.ca)
        finally:
            for p in peers.values():
                p.stop()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    text = report(rows, meta)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
