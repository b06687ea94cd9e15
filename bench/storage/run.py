"""Storage benchmark: Log.append / Log.read+sendfile vs plain os.write / os.sendfile.

    python bench/storage/run.py [--mib 512] [--batch-kib 1024] [--dir /tmp]

Both sides run in the same process on the same file system, alternating, so the ratios
are meaningful even on a noisy machine. Appends are validated (CRC32C) and patched as the
broker does; no fsync on either side.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import threading
import time

from odradek.protocol.records import Record, build_batch
from odradek.storage import LogConfig, LogManager


def _drain(sock: socket.socket) -> None:
    buf = bytearray(1 << 20)
    while sock.recv_into(buf):
        pass


def sendfile_all(out_fd: int, in_fd: int, pos: int, length: int) -> None:
    while length:
        n = os.sendfile(out_fd, in_fd, pos, length)
        pos += n
        length -= n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--batch-kib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    payload = os.urandom(1000)
    nrec = args.batch_kib * 1024 // 1020
    batch = build_batch([Record(-1, int(time.time() * 1000), None, payload) for _ in range(nrec)])
    count = args.mib * 1024 * 1024 // len(batch)
    total = count * len(batch)

    base = tempfile.mkdtemp(dir=args.dir)
    results = {"append": [], "write": [], "read": [], "sendfile": []}
    try:
        for r in range(args.rounds):
            # -- odradek append
            d = os.path.join(base, f"log{r}")
            mgr = LogManager([d], LogConfig())
            mgr.load()
            lg = mgr.create_log("bench", 0, LogConfig())
            t = time.perf_counter()
            for _ in range(count):
                lg.append(batch)
            results["append"].append(time.perf_counter() - t)
            lg.high_watermark = lg.log_end_offset

            # -- plain os.write
            p = os.path.join(base, f"plain{r}")
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            t = time.perf_counter()
            for _ in range(count):
                os.write(fd, batch)
            results["write"].append(time.perf_counter() - t)
            os.close(fd)

            # -- reads to a socket: odradek regions vs plain sendfile of the same file
            a, b = socket.socketpair()
            th = threading.Thread(target=_drain, args=(b,), daemon=True)
            th.start()
            t = time.perf_counter()
            off = 0
            while off < lg.log_end_offset:
                res = lg.read(off, 1 << 20)
                for reg in res.regions:
                    sendfile_all(a.fileno(), reg.fd, reg.position, reg.length)
                off += nrec * max(1, res.size // len(batch))
            results["read"].append(time.perf_counter() - t)
            fd = os.open(p, os.O_RDONLY)
            t = time.perf_counter()
            pos = 0
            while pos < total:
                n = min(len(batch), total - pos)
                sendfile_all(a.fileno(), fd, pos, n)
                pos += n
            results["sendfile"].append(time.perf_counter() - t)
            os.close(fd)
            a.shutdown(socket.SHUT_WR)
            th.join()
            a.close()
            b.close()
            mgr.shutdown()
            shutil.rmtree(d, ignore_errors=True)
            os.remove(p)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def mbps(key):
        return total / min(results[key]) / 1e6

    print(f"{count} batches of {len(batch)} bytes ({total / 2**20:.0f} MiB), best of {args.rounds} rounds")
    print(f"{'operation':<34}{'MB/s':>10}{'ratio':>10}")
    print(f"{'Log.append (validate+patch+write)':<34}{mbps('append'):>10.0f}{mbps('append') / mbps('write'):>10.2f}")
    print(f"{'os.write':<34}{mbps('write'):>10.0f}{'':>10}")
    print(f"{'Log.read + sendfile regions':<34}{mbps('read'):>10.0f}{mbps('read') / mbps('sendfile'):>10.2f}")
    print(f"{'os.sendfile':<34}{mbps('sendfile'):>10.0f}{'':>10}")


if __name__ == "__main__":
    main()
