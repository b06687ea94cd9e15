"""The TLS Fetch write path alone: what `TlsTransport.write` does with a file region's bytes,
and what each step costs, beside `PlaintextTransport.write` (sendfile) of the same regions.

One process, no broker: a segment-like file of --mib MiB of random bytes; the broker side is
this checkout's transport (broker/transport.py) over one end of a socketpair, on an asyncio
loop, with the listener's server context built from the test certificates
(tests/support/tls_certs, ssl.keystore.type=PEM); a child process at the other end reads and
drops everything (a blocking TLS client for the TLS case), so that it takes neither this
process's CPU nor its GIL. Each response is one Fetch-like write:
a small header (bytes) and --region-kib of file region.

Prints, per transport: the loop thread's CPU per MiB of file bytes sent (thread_time), and,
for TLS, from cProfile over the same writes (its timer the thread's CPU time, not the wall
clock): how many bytes came into Python objects per file byte by `os.pread` (plaintext: the
copy through Python) and by `MemoryBIO.read` (ciphertext taken from OpenSSL), and the CPU in
each builtin step (pread, SSLObject.write = encryption, MemoryBIO.read, socket.send).

    .venv/bin/python bench/security/fetch_copies.py [--mib 256] [--region-kib 1024] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import os
import pstats
import socket
import ssl
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from odradek.broker import transport as transport_mod  # noqa: E402
from odradek.broker.transport import PlaintextTransport, TlsTransport  # noqa: E402
from odradek.client.tls import ssl_context  # noqa: E402

CERTS = ROOT / "tests" / "support" / "tls_certs"


@dataclass
class Region:
    fd: int
    position: int
    length: int


def _drain(sock: socket.socket, tls: bool, total: int) -> None:
    s: socket.socket | ssl.SSLSocket = sock
    if tls:
        ctx = ssl.create_default_context(cafile=str(CERTS / "ca.pem"))
        s = ctx.wrap_socket(sock, server_hostname="localhost")
    got = 0
    buf = bytearray(1 << 20)
    while got < total:
        n = s.recv_into(buf)
        if not n:
            break
        got += n


class _CountedBio:
    """The outgoing MemoryBIO as the transport sees it, counting what read() hands out."""

    def __init__(self, bio: ssl.MemoryBIO) -> None:
        self.bio = bio
        self.read = Counted(bio.read)

    @property
    def pending(self) -> int:
        return self.bio.pending


async def _serve(tls: bool, fd: int, size: int, region: int, profile: cProfile.Profile | None) -> dict:
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    header = b"\0" * 64
    regions = [Region(fd, pos, min(region, size - pos)) for pos in range(0, size, region)]
    total = len(regions) * len(header) + size  # plaintext bytes the reader gets
    reader = multiprocessing.get_context("fork").Process(target=_drain, args=(b, tls, total), daemon=True)
    reader.start()
    b.close()
    if tls:
        ctx = ssl_context(
            {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(CERTS / "broker.keystore.pem")}, server=True
        )
        t: TlsTransport | PlaintextTransport = TlsTransport(a, loop, ctx)
        await t.handshake()  # type: ignore[union-attr]
    else:
        t = PlaintextTransport(a, loop)
    counts: dict[str, Counted] = {}
    if profile is not None:  # count the bytes each step hands to Python too
        counts["pread"] = Counted(os.pread)
        transport_mod.os = types.SimpleNamespace(pread=counts["pread"], sendfile=os.sendfile)  # type: ignore[assignment]
        if isinstance(t, TlsTransport):
            counted = _CountedBio(t.outgoing)
            counts["MemoryBIO.read"] = counted.read
            t.outgoing = counted  # type: ignore[assignment]
        profile.enable()
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    try:
        for r in regions:
            await t.write([header, r])
    finally:
        cpu1, wall1 = time.thread_time(), time.perf_counter()
        if profile is not None:
            profile.disable()
            transport_mod.os = os  # type: ignore[assignment]
    await loop.run_in_executor(None, reader.join, 60)
    t.close()
    mib = size / 2**20
    return {
        "cpu_s_per_mib": (cpu1 - cpu0) / mib,
        "wall_s": wall1 - wall0,
        "mib": mib,
        "writes": len(regions),
        "bytes_per_file_byte": {k: c.bytes / size for k, c in counts.items()},
    }


STEPS = {
    "<built-in method posix.pread>": "pread (file -> Python bytes)",
    "<method 'write' of '_ssl._SSLSocket' objects>": "SSLObject.write (encrypt into the BIO)",
    "<method 'read' of '_ssl.MemoryBIO' objects>": "MemoryBIO.read (ciphertext -> Python bytes)",
    "<method 'send' of '_socket.socket' objects>": "socket.send",
}


def _steps(profile: cProfile.Profile) -> dict:
    out: dict[str, dict] = {}
    for (file, _line, func), (_cc, nc, tt, _ct, _callers) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        if file == "~" and func in STEPS:
            out[STEPS[func]] = {"calls": nc, "seconds": tt}
    return out


class Counted:
    """Counts the bytes a function returns (or, for send, takes): what came through Python."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.bytes = 0

    def __call__(self, *args):
        r = self.fn(*args)
        self.bytes += r if isinstance(r, int) else len(r)
        return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--region-kib", type=int, default=1024, help="file bytes per response (a 1 MiB partition fetch)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    size = a.mib * 2**20
    with tempfile.NamedTemporaryFile(prefix="segment-") as f:
        f.write(os.urandom(size))
        f.flush()
        fd = os.open(f.name, os.O_RDONLY)
        try:
            out: dict = {}
            for name, tls in (("plaintext", False), ("tls", True)):
                out[name] = asyncio.run(_serve(tls, fd, size, a.region_kib * 1024, None))
            prof = cProfile.Profile(time.thread_time)
            out["tls profiled"] = asyncio.run(_serve(True, fd, size, a.region_kib * 1024, prof))
            out["tls profiled"]["steps"] = _steps(prof)
        finally:
            os.close(fd)
    if a.json:
        print(json.dumps(out))
        return
    for name in ("plaintext", "tls"):
        r = out[name]
        print(
            f"{name:10s} {r['cpu_s_per_mib'] * 1000:7.3f} ms CPU per MiB ({r['mib']:.0f} MiB in {r['writes']} writes)"
        )
    prof = out["tls profiled"]
    print(
        "TLS, bytes handed to Python per file byte: "
        + ", ".join(f"{k} {v:.3f}" for k, v in prof["bytes_per_file_byte"].items())
    )
    print(f"TLS write path, cProfile ({prof['cpu_s_per_mib'] * 1000:.3f} ms CPU per MiB with its overhead):")
    for label, d in prof["steps"].items():
        print(f"  {label:46s} {d['calls']:6d} calls {d['seconds'] * 1000 / a.mib:7.3f} ms per MiB")


if __name__ == "__main__":
    main()
