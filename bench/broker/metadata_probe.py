"""Metadata round trips over a raw socket: the time from sending a Metadata request (v12, for
one topic or for all topics) to the last byte of its answer, nothing decoded in between, so
the figure is the broker's (and the loopback's), not a client library's.

    .venv/bin/python bench/broker/metadata_probe.py -b 127.0.0.1:9092 -t my-topic -n 200 --json
    .venv/bin/python bench/broker/metadata_probe.py -b 127.0.0.1:9092 --all-topics -n 200

Prints one JSON line with ``--json``: requests, response bytes, latency percentiles (ms).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from odradek.protocol import messages  # noqa: E402
from odradek.protocol.headers import encode_request_header  # noqa: E402

_SIZE = struct.Struct(">i")
VERSION = 12


def metadata_request(topic: str | None) -> bytes:
    from odradek.broker.registry import make

    cls = messages.request_class(3, VERSION)
    mod = messages.module_of(cls)
    topics = None if topic is None else (make(mod.MetadataRequestTopic, topic_id=None, name=topic),)
    req = make(cls, topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    body = encode_request_header(3, VERSION, 1, "metadata-probe", True) + messages.encode(req)
    return _SIZE.pack(len(body)) + body


def recv_frame(sock: socket.socket) -> int:
    """Read one response frame whole; returns its size."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        head += chunk
    (size,) = _SIZE.unpack(head)
    left = size
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while left:
        got = sock.recv_into(view, min(left, len(buf)))
        if not got:
            raise ConnectionError("broker closed the connection")
        left -= got
    return size


def percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, max(0, int(q * len(sorted_ms) + 0.5) - 1))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-b", "--bootstrap", required=True)
    ap.add_argument("-t", "--topic", default=None)
    ap.add_argument("--all-topics", action="store_true")
    ap.add_argument("-n", type=int, default=200, help="timed requests (after --warmup untimed ones)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if (a.topic is None) == (not a.all_topics):
        ap.error("give -t TOPIC or --all-topics")
    host, port = a.bootstrap.split(",")[0].rsplit(":", 1)
    frame = metadata_request(None if a.all_topics else a.topic)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lat: list[float] = []
    size = 0
    for i in range(a.warmup + a.n):
        t0 = time.perf_counter()
        sock.sendall(frame)
        size = recv_frame(sock)
        if i >= a.warmup:
            lat.append((time.perf_counter() - t0) * 1000)
    sock.close()
    s = sorted(lat)
    res = {
        "workload": "metadata",
        "requests": a.n,
        "records": a.n,
        "response_bytes": size,
        "latency_ms": {
            "count": a.n,
            "avg": sum(s) / len(s),
            "p50": percentile(s, 0.5),
            "p99": percentile(s, 0.99),
            "max": s[-1],
        },
    }
    if a.json:
        print(json.dumps(res))
    else:
        lt = res["latency_ms"]
        print(f"{a.n} Metadata requests, {size:,} B each: p50 {lt['p50']:.2f} ms, p99 {lt['p99']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
