"""The e2e workload's broker cycle, measured without a client library in the way.

One connection produces single-record batches (Produce v10, acks=1, what librdkafka 2.16
sends with linger.ms=0) one at a time; a second connection keeps one Fetch (v16, in an
incremental fetch session, max wait 500 ms) parked at the log end, so every append wakes it
— the broker's work per record in the e2e benchmark: Produce request -> append -> purgatory
wake -> Fetch response -> next Fetch. Reports the broker's CPU per cycle (utime+stime from
/proc, so the broker must run on this machine) and the round-trip latency percentiles seen by
this client (send of the Produce -> the Fetch response carrying it).

    .venv/bin/python bench/broker/pingpong.py                       # starts its own broker
    .venv/bin/python bench/broker/pingpong.py -b 127.0.0.1:9092 --pid 1234 -n 20000
    .venv/bin/python bench/broker/pingpong.py --rate 5000           # paced, like the e2e run
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from odradek.protocol import messages, records  # noqa: E402
from odradek.protocol.headers import encode_request_header  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
_SIZE = struct.Struct(">i")


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0
        self.buf = b""

    def send(self, api_key: int, version: int, req) -> int:
        self.corr += 1
        body = encode_request_header(
            api_key, version, self.corr, "pingpong", messages.is_flexible(api_key, version)
        ) + messages.encode(req)
        self.sock.sendall(_SIZE.pack(len(body)) + body)
        return self.corr

    def recv(self, api_key: int, version: int):
        while True:
            if len(self.buf) >= 4:
                (n,) = _SIZE.unpack_from(self.buf)
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    flexible = messages.is_flexible(api_key, version) and api_key != 18
                    return messages.decode_response(api_key, version, frame, 5 if flexible else 4)
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.buf += data


def build(api_key: int, version: int, /, **fields):
    from odradek.broker.registry import make

    cls = messages.request_class(api_key, version)
    return make(cls, **fields)


def nested(api_key: int, version: int, class_name: str, /, **fields):
    from odradek.broker.registry import make

    mod = messages.module_of(messages.request_class(api_key, version))
    return make(getattr(mod, class_name), **fields)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-b", "--bootstrap", default=None, help="host:port of a running broker (default: start one)")
    ap.add_argument("--pid", type=int, default=None, help="broker pid (for CPU), with -b")
    ap.add_argument("-n", type=int, default=20000, help="records (cycles)")
    ap.add_argument("--rate", type=float, default=0, help="records/s (0: back to back)")
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="broker setting when starting one"
    )
    a = ap.parse_args(argv)
    broker = None
    tmp = None
    if a.bootstrap is None:
        from support.broker import BrokerProcess

        tmp = tempfile.TemporaryDirectory(prefix="odradek-pingpong-")
        broker = BrokerProcess(Path(tmp.name), {"num.partitions": 1, **dict(o.split("=", 1) for o in a.override)})
        broker.start(timeout=60)
        a.bootstrap, a.pid = broker.bootstrap, broker.proc.pid
        last = proc_cpu(a.pid)  # let the background warm-up (schema caches, full GC) finish
        for _ in range(40):
            time.sleep(0.5)
            now = proc_cpu(a.pid)
            if now - last < 0.02:
                break
            last = now
    host, port = a.bootstrap.rsplit(":", 1)
    try:
        return run(a, host, int(port))
    finally:
        if broker is not None:
            broker.stop()
            tmp.cleanup()


def run(a, host: str, port: int) -> int:
    topic = f"pingpong-{uuid.uuid4().hex[:8]}"
    admin = Conn(host, port)
    admin.send(
        19,
        7,
        build(
            19,
            7,
            topics=(
                nested(
                    19,
                    7,
                    "CreatableTopic",
                    name=topic,
                    num_partitions=1,
                    replication_factor=1,
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=10000,
            validate_only=False,
        ),
    )
    admin.recv(19, 7)
    admin.send(
        3,
        12,
        build(
            3,
            12,
            topics=(nested(3, 12, "MetadataRequestTopic", topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    md = admin.recv(3, 12)
    topic_id = md.topics[0].topic_id
    prod, fetch = Conn(host, port), Conn(host, port)
    value = b"x" * 100

    def produce_req():
        batch = records.build_batch([records.Record(timestamp=int(time.time() * 1000), value=value)])
        pd = nested(0, 10, "PartitionProduceData", index=0, records=batch)
        td = nested(0, 10, "TopicProduceData", name=topic, partition_data=(pd,))
        return build(0, 10, transactional_id=None, acks=1, timeout=30000, topic_data=(td,))

    session_id, epoch = 0, 0

    def fetch_req(offset: int):
        fp = nested(
            1,
            16,
            "FetchPartition",
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1048576,
        )
        ft = nested(1, 16, "FetchTopic", topic_id=topic_id, partitions=(fp,))
        return build(
            1,
            16,
            cluster_id=None,
            replica_state=nested(1, 16, "ReplicaState", replica_id=-1, replica_epoch=-1),
            max_wait=500,
            min_bytes=1,
            max_bytes=52428800,
            isolation_level=0,
            session_id=session_id,
            session_epoch=epoch,
            topics=(ft,),
            forgotten_topics_data=(),
            rack_id="",
        )

    offset = 0
    fetch.send(1, 16, fetch_req(0))
    lat: list[float] = []
    total = a.warmup + a.n
    start = time.perf_counter()
    cpu0 = None
    for i in range(total):
        if i == a.warmup:
            cpu0 = proc_cpu(a.pid) if a.pid else None
            t_measure = time.perf_counter()
            start = t_measure
        if a.rate > 0:
            target = start + (i - (a.warmup if i >= a.warmup else 0)) / a.rate
            d = target - time.perf_counter()
            if d > 0:
                time.sleep(d)
        req = produce_req()
        t0 = time.perf_counter()
        prod.send(0, 10, req)
        # the parked fetch answers with the new record (or, rarely, times out empty: ask again)
        while True:
            resp = fetch.recv(1, 16)
            if session_id == 0 and resp.session_id:
                session_id = resp.session_id
            epoch = epoch + 1 if session_id else 0
            got = [p for t in resp.responses for p in t.partitions if p.records]
            if got:
                offset += 1
                fetch.send(1, 16, fetch_req(offset))
                break
            fetch.send(1, 16, fetch_req(offset))
        lat.append(time.perf_counter() - t0)
        prod.recv(0, 10)
    wall = time.perf_counter() - t_measure
    cpu = proc_cpu(a.pid) - cpu0 if a.pid else None
    m = sorted(lat[a.warmup :])
    pct = lambda q: m[min(len(m) - 1, int(q * len(m)))] * 1000  # noqa: E731
    print(
        f"{a.n} cycles in {wall:.2f} s ({a.n / wall:,.0f}/s); "
        + (f"broker CPU {cpu:.2f} s = {cpu / a.n * 1e6:.1f} us per produce+fetch cycle; " if cpu is not None else "")
        + f"produce->fetched p50 {pct(0.5):.3f} p99 {pct(0.99):.3f} p99.9 {pct(0.999):.3f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
