"""Storage benchmark: the log layer alone against the plain system calls doing the same I/O.

    .venv/bin/python bench/storage/run.py [--pairs 21] [--mib 64] [--batch-kib 1024]
                                          [--read-kib 1024] [--sink tcp,unix,null] [--fsync]

Two comparisons, each made of ``--pairs`` pairs of rounds run back to back in the same
process (order alternating AB, BA, AB... so drift and page-cache state hit both sides alike):

append   odradek: ``Log.append`` of ``--mib`` MiB in ``--batch-kib`` batches into a fresh log
         (storage/validator.py: framing, magic, counts, CRC32C, then base offset and leader
         epoch written as a new 16-byte prefix (outside the CRC); producer-state check; prefix +
         untouched rest of the batch written with one ``pwritev``; index bookkeeping; segment
         roll at ``segment.bytes``).
         baseline: ``os.write`` of the same bytes into fresh plain files, starting a new file
         where odradek rolls a segment (same ``--segment-mib``).
         Neither side fsyncs unless ``--fsync``: then both fsync every file at the end of the
         round, inside the timing (``Log.flush`` vs ``os.fsync``).
read     odradek: the consumer's loop: ``Log.read(offset, --read-kib)`` then ``os.sendfile`` of
         every returned region to the sink.
         baseline: ``os.sendfile`` of exactly the same (fd, position, length) regions, recorded
         beforehand: the same bytes from the same page-cache pages to the same sink, minus the
         storage layer's lookup. Sinks: ``tcp`` (a loopback TCP connection with fixed 4 MiB
         buffers, drained by a thread with ``recv_into``: what a Fetch response does),
         ``unix`` (a socketpair, drained the same way), ``null`` (``/dev/null``: the kernel
         does almost nothing, so this shows the storage layer's per-read cost at its
         harshest). With a socket, a round ends when the reader has received every byte.

Each pair gives a ratio (baseline time / odradek time = odradek MB/s / baseline MB/s); we
print the median, the interquartile range and min-max over pairs, from wall-clock time and
from this thread's CPU time (``time.thread_time``: user+system of the calling thread, which a
busy neighbour on a shared machine disturbs less). Rounds are deleted right after they are
timed (dirty pages dropped, never written back), so every round starts from the same state.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

from odradek.protocol.records import Record, build_batch, crc32c, iter_batches
from odradek.storage import LogConfig, LogManager

_SEQ = struct.Struct(">i")
_CRC = struct.Struct(">I")


def sendfile_all(out_fd: int, in_fd: int, pos: int, length: int) -> None:
    while length:
        n = os.sendfile(out_fd, in_fd, pos, length)
        pos += n
        length -= n


class Sink:
    """Where sendfile writes: a socket drained by a thread, or /dev/null. A round ends when
    the reader has received every byte (``delivered``), so no round leaves bytes in flight
    for the next one to wait for."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._socks: list[socket.socket] = []
        self._thread = None
        self.sent = 0  # bytes handed to sendfile so far (counted per round by the caller)
        self.received = 0
        self._cond = threading.Condition()
        if kind == "null":
            self.fd = os.open(os.devnull, os.O_WRONLY)
            return
        if kind == "tcp":
            # fixed 4 MiB buffers (no autotuning drifting between rounds), no Nagle
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            srv.bind(("127.0.0.1", 0))
            srv.listen(1)
            a = socket.socket()
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            a.connect(srv.getsockname())
            b, _ = srv.accept()
            srv.close()
        elif kind == "unix":
            a, b = socket.socketpair()
        else:
            raise ValueError(f"unknown sink {kind}")
        self._socks = [a, b]
        self.fd = a.fileno()
        self._thread = threading.Thread(target=self._drain, args=(b,), daemon=True)
        self._thread.start()

    def _drain(self, sock: socket.socket) -> None:
        buf = bytearray(1 << 20)
        while n := sock.recv_into(buf):
            self.received += n
            if self.received >= self.sent:
                with self._cond:
                    self._cond.notify_all()

    def delivered(self) -> None:
        """Wait until the reader has every byte sent so far."""
        if self.kind != "null":
            with self._cond:
                self._cond.wait_for(lambda: self.received >= self.sent)

    def close(self) -> None:
        if self.kind == "null":
            os.close(self.fd)
            return
        a, b = self._socks
        a.shutdown(socket.SHUT_WR)
        self._thread.join()
        a.close()
        b.close()


def timed(fn) -> tuple[float, float]:
    c = time.thread_time()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t, time.thread_time() - c


def make_batches(nrec: int, count: int, idempotent: bool) -> list[bytes]:
    """``count`` batches of ``nrec`` 1000-byte records. Idempotent (producer id 1, epoch 0,
    consecutive sequences, as Kafka clients >= 3.0 send by default): each batch differs in
    its base sequence, so the CRC differs too; otherwise one batch object repeated."""
    now = int(time.time() * 1000)
    recs = [Record(-1, now, None, os.urandom(1000)) for _ in range(nrec)]
    if not idempotent:
        return [build_batch(recs)] * count
    first = bytearray(build_batch(recs, producer_id=1, producer_epoch=0, base_sequence=0))
    out = []
    for i in range(count):
        b = bytearray(first)
        _SEQ.pack_into(b, 53, i * nrec)
        _CRC.pack_into(b, 17, crc32c(memoryview(b)[21:]))
        out.append(bytes(b))
    return out


def time_writes(batches: list[bytes], write_one, finish, warm: bool) -> tuple[float, float]:
    """Time ``write_one(b)`` for every batch, then ``finish()``. With ``warm``, each batch is
    read (untimed) right before it is written, as a batch just received from a socket is
    in the CPU cache; then every call is timed on its own."""
    pc, tt = time.perf_counter, time.thread_time
    if not warm:
        c, t = tt(), pc()
        for b in batches:
            write_one(b)
        finish()
        return pc() - t, tt() - c
    wall = cpu = 0.0
    for b in batches:
        b.count(0)  # touch every byte
        c, t = tt(), pc()
        write_one(b)
        wall += pc() - t
        cpu += tt() - c
    c, t = tt(), pc()
    finish()
    return wall + pc() - t, cpu + tt() - c


class PlainWriter:
    """``os.write`` into plain files, starting a new file where Log rolls a segment."""

    def __init__(self, d: str, seg_bytes: int, crc: bool, fsync: bool) -> None:
        self.d, self.seg_bytes, self.crc, self.fsync = d, seg_bytes, crc, fsync
        self.fds: list[int] = []
        self.size = seg_bytes + 1  # the first write opens the first file

    def write(self, b: bytes) -> None:
        if self.crc:
            crc32c(memoryview(b)[21:])
        n = len(b)
        if self.size > self.seg_bytes - n:  # Log's roll rule: the batch would not fit
            self.fds.append(
                os.open(os.path.join(self.d, f"{len(self.fds)}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            )
            self.size = 0
        os.write(self.fds[-1], b)
        self.size += n

    def finish(self) -> None:
        if self.fsync:
            for f in self.fds:
                os.fsync(f)


class AppendBench:
    def __init__(self, base: str, batches: list[bytes], segment_bytes: int, fsync: bool, warm: bool) -> None:
        self.base = base
        self.batches = batches
        self.cfg = LogConfig(segment_bytes=segment_bytes)
        self.fsync = fsync
        self.warm = warm
        self.n = 0

    def odradek(self) -> tuple[float, float]:
        self.n += 1
        d = os.path.join(self.base, f"odr{self.n}")
        mgr = LogManager([d], self.cfg)
        mgr.load()
        lg = mgr.create_log("bench", 0, self.cfg)
        t = time_writes(self.batches, lg.append, lg.flush if self.fsync else lambda: None, self.warm)
        self.segments = len(lg.segments)
        lg.close(clean=False)  # no fsync, no snapshot: the round is thrown away
        shutil.rmtree(d, ignore_errors=True)
        return t

    def baseline(self, crc: bool = False) -> tuple[float, float]:
        """Plain writes; with ``crc``, each batch's CRC32C is computed first (the least a
        validating writer does)."""
        self.n += 1
        d = os.path.join(self.base, f"plain{self.n}")
        os.mkdir(d)
        w = PlainWriter(d, self.cfg.segment_bytes, crc, self.fsync)
        t = time_writes(self.batches, w.write, w.finish, self.warm)
        for f in w.fds:
            os.close(f)
        shutil.rmtree(d, ignore_errors=True)
        self.files = len(w.fds)
        return t


class ReadBench:
    def __init__(self, base: str, batches: list[bytes], segment_bytes: int, read_bytes: int) -> None:
        cfg = LogConfig(segment_bytes=segment_bytes)
        d = os.path.join(base, "readlog")
        self.mgr = LogManager([d], cfg)
        self.mgr.load()
        lg = self.mgr.create_log("bench", 0, cfg)
        for b in batches:
            lg.append(b)
        lg.high_watermark = lg.log_end_offset
        self.log = lg
        self.read_bytes = read_bytes
        # the consumer's fetch offsets and the regions each read returns (untimed)
        self.offsets: list[int] = []
        self.regions: list[tuple[int, int, int]] = []
        off = 0
        while off < lg.log_end_offset:
            res = lg.read(off, read_bytes)
            self.offsets.append(off)
            for r in res.regions:
                self.regions.append((r.fd, r.position, r.length))
            last = res.regions[-1]
            data = os.pread(last.fd, last.length, last.position)
            off = list(iter_batches(data, validate=False))[-1].next_offset
        self.total = sum(r[2] for r in self.regions)

    def odradek(self, sink: Sink) -> tuple[float, float]:
        out, read, offsets, rb = sink.fd, self.log.read, self.offsets, self.read_bytes
        sink.sent += self.total

        def run():
            for off in offsets:
                for r in read(off, rb).regions:
                    sendfile_all(out, r.fd, r.position, r.length)
            sink.delivered()

        return timed(run)

    def baseline(self, sink: Sink) -> tuple[float, float]:
        out, regions = sink.fd, self.regions
        sink.sent += self.total

        def run():
            for fd, pos, length in regions:
                sendfile_all(out, fd, pos, length)
            sink.delivered()

        return timed(run)

    def close(self) -> None:
        self.log.close(clean=False)


def pairs(n: int, odr, base, extra=None) -> list[tuple]:
    """n pairs (wall ratio, cpu ratio, baseline s, odradek s, extra s), order alternating;
    ratio = baseline time / odradek time. ``extra`` is timed next to the baseline."""
    out = []
    odr()
    base()  # warm-up, discarded
    for i in range(n):
        if i % 2 == 0:
            o = odr()
            b = base()
        else:
            b = base()
            o = odr()
        x = extra()[0] if extra is not None else 0.0
        out.append((b[0] / o[0], b[1] / max(o[1], 1e-9), b[0], o[0], x))
    return out


def summary(values: list[float]) -> str:
    v = sorted(values)
    q = statistics.quantiles(v, n=4) if len(v) >= 4 else [v[0], statistics.median(v), v[-1]]
    return f"{statistics.median(v):5.2f}  [{q[0]:.2f}-{q[2]:.2f}]  {v[0]:.2f}-{v[-1]:.2f}"


def report(label: str, res, total: int) -> None:
    wall = [r[0] for r in res]
    cpu = [r[1] for r in res]
    base_mbps = statistics.median(total / r[2] / 1e6 for r in res)
    odr_mbps = statistics.median(total / r[3] / 1e6 for r in res)
    print(f"{label:<30}{odr_mbps:>8.0f}{base_mbps:>8.0f}   {summary(wall)}   {summary(cpu)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=21, help="pairs of rounds per comparison")
    ap.add_argument("--mib", type=int, default=64, help="MiB per round")
    ap.add_argument("--batch-kib", type=int, default=1024)
    ap.add_argument("--read-kib", type=int, default=1024, help="max_bytes of each Log.read")
    ap.add_argument("--segment-mib", type=int, default=1024, help="segment.bytes (and the baseline's file size)")
    ap.add_argument("--sink", default="tcp,unix,null", help="comma-separated: tcp, unix, null")
    ap.add_argument("--fsync", action="store_true", help="both sides fsync at the end of each append round")
    ap.add_argument(
        "--no-idempotent",
        action="store_true",
        help="batches without producer id (default: idempotent, sequences checked)",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="append batches straight from memory (default: each batch is read just before it is "
        "written, untimed, as one just received from a socket is in the CPU cache)",
    )
    ap.add_argument("--only", choices=("append", "read"), default=None)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    nrec = max(1, args.batch_kib * 1024 // 1010)
    while nrec > 1 and len(make_batches(nrec, 1, False)[0]) > args.batch_kib * 1024:
        nrec -= 1
    size = len(make_batches(nrec, 1, False)[0])
    count = max(1, args.mib * 1024 * 1024 // size)
    batches = make_batches(nrec, count, not args.no_idempotent)
    total = sum(map(len, batches))
    seg_bytes = args.segment_mib * 1024 * 1024

    base = tempfile.mkdtemp(prefix="odradek-bench-", dir=args.dir)
    print(
        f"{count} batches of {len(batches[0])} bytes ({nrec} records"
        f"{', idempotent' if not args.no_idempotent else ''}) = {total / 2**20:.0f} MiB per round, "
        f"{args.pairs} pairs, segment.bytes {args.segment_mib} MiB, fsync {'on' if args.fsync else 'off'}, "
        f"batches {'cold' if args.cold else 'warm'}, "
        f"python {sys.version.split()[0]}"
    )
    print(f"{'':<30}{'odradek':>8}{'base':>8}   {'ratio (wall)':<30}   {'ratio (thread CPU)'}")
    print(f"{'':<30}{'MB/s':>8}{'MB/s':>8}   {'median [IQR] min-max':<30}   median [IQR] min-max")
    try:
        if args.only in (None, "append"):
            ab = AppendBench(base, batches, seg_bytes, args.fsync, not args.cold)
            # the same writes preceded by the CRC32C of each batch, timed next to every baseline
            res = pairs(args.pairs, ab.odradek, ab.baseline, lambda: ab.baseline(crc=True))
            report(f"append ({ab.segments} seg / {ab.files} files)", res, total)
            print(
                f"{'  CRC32C + os.write':<30}{statistics.median(total / r[4] / 1e6 for r in res):>8.0f}{'':>8}   "
                f"odradek / (CRC32C + write): {summary([r[4] / r[3] for r in res])}"
            )
        if args.only in (None, "read"):
            rb = ReadBench(base, batches, seg_bytes, args.read_kib * 1024)
            try:
                for kind in args.sink.split(","):
                    sink = Sink(kind)
                    try:
                        res = pairs(args.pairs, lambda sink=sink: rb.odradek(sink), lambda sink=sink: rb.baseline(sink))
                    finally:
                        sink.close()
                    report(f"read+sendfile -> {kind} ({len(rb.offsets)} reads)", res, rb.total)
            finally:
                rb.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
