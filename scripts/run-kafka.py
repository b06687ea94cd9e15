"""Run Apache Kafka (the reference broker of the tests) by hand, beside odradek, until ^C.

    .venv/bin/python scripts/run-kafka.py [--line 4|3.9] [--brokers N] [--zookeeper]
                                          [--dir DIR] [--override key=value ...]

Uses tests/support/apache_kafka.py (jars from `bash scripts/install-test-deps.sh`): free 127.0.0.1
ports, data and logs under --dir (a new temporary directory by default, kept afterwards).
Prints the bootstrap address and where the logs are; ^C stops Kafka cleanly.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.apache_kafka import ApacheKafka, unavailable_reason  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--line", default="4", choices=["3.9", "4"])
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--zookeeper", action="store_true", help="3.9 only: ZooKeeper mode, with a private ZooKeeper")
    ap.add_argument("--dir", help="work directory (default: a new one under /tmp)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a broker setting")
    ap.add_argument("--heap", default="512m")
    args = ap.parse_args()
    reason = unavailable_reason(args.line)
    if reason:
        sys.exit(reason)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix=f"kafka-{args.line}-"))
    overrides = dict(o.split("=", 1) for o in args.override)
    k = ApacheKafka(workdir, args.line, args.brokers, args.zookeeper, overrides, args.heap)
    print(f"starting Apache Kafka {k.version} ({k.mode}, {args.brokers} node(s)) in {workdir} ...", flush=True)
    k.start()
    print(f"bootstrap: {k.bootstrap}", flush=True)
    for n in k.nodes:
        print(f"  node {n.node_id}: {n.bootstrap}  config {n.config_path}  log {n.log_path}", flush=True)
    if k.zookeeper is not None:
        print(f"  zookeeper: {k.zookeeper.connect}  log {k.zookeeper.log_path}", flush=True)
    print("^C to stop", flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a shell's background job ignores it otherwise
        signal.signal(sig, lambda *_: sys.exit(0))
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        print("stopping ...", flush=True)
        k.stop()


if __name__ == "__main__":
    main()
