"""Hold many idle client connections open to one or more brokers.

Each connection sends one ApiVersions request (v0: every broker answers it before anything
else) and reads the answer, then stays open and silent. With --tls CAFILE each connection is
TLS first (the handshake verifies the broker's certificate against CAFILE and its address), for
a listener whose security protocol is SSL. Prints one JSON line once all are
established (``{"opened": {bootstrap: n, ...}, "failed": {...}, "seconds": s}``), then holds
them until stdin closes or SIGTERM/SIGINT arrives.

    .venv/bin/python bench/broker/idle_conns.py -n 2000 127.0.0.1:9092 127.0.0.1:9093
    .venv/bin/python bench/broker/idle_conns.py -n 2000 --tls ca.pem 127.0.0.1:9094
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import ssl
import struct
import sys
import time

_API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"
_REQUEST = struct.pack(">i", len(_API_VERSIONS_V0)) + _API_VERSIONS_V0


async def _open(
    host: str, port: int, gate: asyncio.Semaphore, tls: ssl.SSLContext | None
) -> asyncio.StreamWriter | None:
    async with gate:  # a few at a time: a listen backlog of 50 (Kafka's default) drops a burst of SYNs
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=tls), 30)
            writer.write(_REQUEST)
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))
            await asyncio.wait_for(reader.readexactly(size), 30)
            return writer
        except (TimeoutError, OSError, asyncio.IncompleteReadError):  # ssl.SSLError is an OSError
            return None


async def main(n: int, bootstraps: list[str], parallel: int, cafile: str | None = None) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < n * len(bootstraps) + 64:
        raise SystemExit(f"RLIMIT_NOFILE hard limit {hard} < {n * len(bootstraps)} connections")
    gate = asyncio.Semaphore(parallel)
    tls = ssl.create_default_context(cafile=cafile) if cafile else None
    t0 = time.monotonic()
    held: dict[str, list[asyncio.StreamWriter]] = {}
    failed: dict[str, int] = {}
    for b in bootstraps:
        host, port = b.rsplit(":", 1)
        got = await asyncio.gather(*(_open(host, int(port), gate, tls) for _ in range(n)))
        held[b] = [w for w in got if w is not None]
        failed[b] = n - len(held[b])
    print(
        json.dumps(
            {"opened": {b: len(w) for b, w in held.items()}, "failed": failed, "seconds": time.monotonic() - t0}
        ),
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.buffer.read1(1) else None)
    await stop.wait()
    for ws in held.values():
        for w in ws:
            w.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="connections per broker")
    ap.add_argument("--parallel", type=int, default=32, help="connections being opened at once")
    ap.add_argument("--tls", metavar="CAFILE", default=None, help="connect with TLS, trusting this CA (PEM)")
    ap.add_argument("bootstrap", nargs="+")
    a = ap.parse_args()
    asyncio.run(main(a.n, a.bootstrap, a.parallel, a.tls))
