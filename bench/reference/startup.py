"""Start-up and stop time of the Apache Kafka reference fixtures (tests/support/apache_kafka.py).

    .venv/bin/python bench/reference/startup.py [--repeats 3] [--modes 3.9,4,3.9-zk,4x3,3.9-zkx3,3.9x3]

Each mode is started ``--repeats`` times from a fresh directory (so KRaft modes include
StorageTool's format), taking turns mode by mode; a start ends when every broker is listed in the
cluster's metadata. Prints the median and the range of each phase (see ApacheKafka.start_times)
and of stop() (SIGTERM to every node at once). Wall clock on a shared 2-core machine: expect the
figures to move by a third with the neighbours' load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.apache_kafka import ApacheKafka, unavailable_reason  # noqa: E402

MODES = {  # name -> ApacheKafka arguments
    "3.9": dict(line="3.9"),
    "4": dict(line="4"),
    "3.9-zk": dict(line="3.9", zookeeper=True),
    "4x3": dict(line="4", brokers=3),
    "3.9-zkx3": dict(line="3.9", brokers=3, zookeeper=True),
    "3.9x3": dict(line="3.9", brokers=3),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()
    modes = args.modes.split(",")
    for m in modes:
        reason = unavailable_reason(MODES[m]["line"])
        if reason:
            sys.exit(f"{m}: {reason}")
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.repeats):
        for m in modes:
            with tempfile.TemporaryDirectory(prefix=f"kafka-startup-{m}-") as d:
                k = ApacheKafka(d, **MODES[m])
                k.start()
                t = time.monotonic()
                k.stop()
                rows[m].append(k.start_times | {"stop": time.monotonic() - t})
    print(f"{'mode':10} {'phase':10} {'median s':>9} {'min-max s':>12}   ({args.repeats} runs)")
    for m in modes:
        for phase in rows[m][0]:
            xs = [r[phase] for r in rows[m]]
            print(f"{m:10} {phase:10} {statistics.median(xs):9.1f} {min(xs):5.1f}-{max(xs):<6.1f}")


if __name__ == "__main__":
    main()
