"""Broker-side compression.type: what it costs, and what the default ``producer`` path costs.

    .venv/bin/python bench/storage/recompress.py cost [--mib 16] [--batch-kib 64] [--repeats 3]
    .venv/bin/python bench/storage/recompress.py producer-path [--appends 50000] [--records 10] [--repeats 7]

``cost``: ``Log.append`` of ``--mib`` MiB of records (JSON-like activity events, as the pipeline
writes them; compressible about 4-8x) in ``--batch-kib`` batches, into a topic with each
``compression.type``, from producer batches sent uncompressed and sent with lz4. Prints the CPU
time (this thread: ``time.thread_time``) per MiB of records, the same for ``producer`` (nothing
recompressed: the baseline), the difference (the recompression's cost per MiB) and the stored
size. Best of ``--repeats``.

``producer-path``: ``Log.append`` of ``--appends`` small batches (``--records`` records of about
100 bytes) with the default ``compression.type=producer``; prints microseconds of CPU per append
(best of ``--repeats``, and the median). Run it with ``PYTHONPATH`` pointing at two checkouts'
``src`` (alternately, several times) to compare the per-append cost of two versions of the
produce path; it uses only what both have.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from odradek.protocol import records as R
from odradek.storage import LogConfig, LogManager


def events(n: int, seed: int = 7) -> list[bytes]:
    rnd = random.Random(seed)
    kinds = ["view", "click", "purchase", "search", "signup"]
    pages = [f"/product/{i}" for i in range(500)]
    return [
        json.dumps(
            {
                "user": f"user-{rnd.randrange(100_000)}",
                "kind": rnd.choice(kinds),
                "page": rnd.choice(pages),
                "ts": 1_700_000_000_000 + i * 13,
                "session": f"{rnd.getrandbits(64):016x}",
                "amount": round(rnd.random() * 100, 2),
            }
        ).encode()
        for i in range(n)
    ]


def make_batches(total: int, batch_bytes: int, codec: int) -> list[bytes]:
    values = events(4096)
    out, recs, size, i, done = [], [], 0, 0, 0
    now = int(time.time() * 1000)
    while done < total:
        v = values[i % len(values)]
        recs.append(R.Record(-1, now, b"k%d" % (i % 1000), v))
        size += len(v) + 12
        done += len(v) + 12
        i += 1
        if size >= batch_bytes:
            out.append(R.build_batch(recs, compression=codec))
            recs, size = [], 0
    if recs:
        out.append(R.build_batch(recs, compression=codec))
    return out


def append_all(batches: list[bytes], props: dict[str, str]) -> tuple[float, int]:
    """CPU seconds of appending ``batches`` to a fresh log; bytes stored."""
    d = tempfile.mkdtemp(prefix="bench-recompress-")
    try:
        m = LogManager([d], LogConfig())
        m.load()
        lg = m.create_log("t", 0, LogConfig.from_props(props))
        t = time.thread_time()
        for b in batches:
            lg.append(b)
        spent = time.thread_time() - t
        stored = lg.size_bytes
        lg.close(clean=False)  # no fsync, no snapshot: the round is thrown away
        return spent, stored
    finally:
        shutil.rmtree(d, ignore_errors=True)


def cost(args) -> None:
    total = args.mib << 20
    print(f"Log.append of {args.mib} MiB of records in {args.batch_kib} KiB batches; CPU s per MiB of records")
    print(f"{'sent as':<9} {'compression.type':<16} {'CPU ms/MiB':>11} {'extra ms/MiB':>13} {'stored MiB':>11}")
    for source_name, source in (("none", R.NONE), ("lz4", R.LZ4)):
        batches = make_batches(total, args.batch_kib << 10, source)
        base = None
        for target in ("producer", "uncompressed", "lz4", "snappy", "zstd", "gzip"):
            if target == ("lz4" if source == R.LZ4 else "uncompressed"):
                continue  # same codec as sent: nothing recompressed, as producer
            runs = [append_all(batches, {"compression.type": target}) for _ in range(args.repeats)]
            spent = min(r[0] for r in runs)
            per_mib = spent / args.mib * 1000
            if base is None:
                base = per_mib
            extra = per_mib - base
            print(f"{source_name:<9} {target:<16} {per_mib:>11.1f} {extra:>13.1f} {runs[0][1] / (1 << 20):>11.2f}")


def producer_path(args) -> None:
    now = int(time.time() * 1000)
    one = R.build_batch([R.Record(-1, now, b"key-%d" % i, b"v" * 90) for i in range(args.records)])
    results = []
    for _ in range(args.repeats):
        d = tempfile.mkdtemp(prefix="bench-producer-path-")
        try:
            m = LogManager([d], LogConfig())
            m.load()
            lg = m.create_log("t", 0, LogConfig())
            append = lg.append
            t = time.thread_time()
            for _ in range(args.appends):
                append(one)
            results.append((time.thread_time() - t) / args.appends * 1e6)
            lg.close(clean=False)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    src = os.path.dirname(os.path.dirname(R.__file__))
    print(
        f"{src}: Log.append of {len(one)}-byte batches, producer path: best {min(results):.2f} us, "
        f"median {statistics.median(results):.2f} us of CPU per append ({args.repeats} runs of {args.appends})"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--mib", type=int, default=16)
    c.add_argument("--batch-kib", type=int, default=64)
    c.add_argument("--repeats", type=int, default=3)
    p = sub.add_parser("producer-path")
    p.add_argument("--appends", type=int, default=50_000)
    p.add_argument("--records", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    (cost if args.mode == "cost" else producer_path)(args)


if __name__ == "__main__":
    main(sys.argv[1:])
