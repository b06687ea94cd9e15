"""The record codec's hot loops in process: decode_records and build_batch of one v2 batch.

    .venv/bin/python bench/protocol/records_micro.py [--src DIR] [-n 2000]

Prints microseconds per batch (best of 7 rounds, CPU time) for 500 records with keys, values and two
headers each, uncompressed. `--src` points at another checkout's src/ to compare before/after
a change in one run of each (on a shared machine, alternate the runs and compare the best).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--src", default=str(Path(__file__).resolve().parents[2] / "src"))
ap.add_argument("-n", type=int, default=2000)
args = ap.parse_args()
sys.path.insert(0, args.src)

from odradek.protocol import records  # noqa: E402

recs = [
    records.Record(i, 1_700_000_000_000 + i, b"key-%d" % i, b"v" * (50 + i % 200), [("h1", b"a"), ("trace", b"x" * 20)])
    for i in range(500)
]
batch = records.build_batch(recs)


def timed(name: str, fn, n: int) -> None:
    best = float("inf")
    for _ in range(7):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - t0)
    print(f"{name:14s} {best / n * 1e6:9.1f} µs/batch  ({records.__file__})")


assert records.decode_records(batch) == [r._replace(headers=list(r.headers)) for r in recs]
timed("decode_records", lambda: records.decode_records(batch), args.n // 4)
timed("build_batch", lambda: records.build_batch(recs), args.n // 4)
