"""The consume load of bench/security/run.py, in its own process: librdkafka (confluent-kafka)
reads every partition of a topic from the start, with the librdkafka settings given as -X
(security.protocol, ssl.ca.location, sasl.*), until it has --num-records records or nothing new
came for --timeout s. The consumer is `odradek perf consume --driver confluent`'s (same
settings), which takes no client settings; prints one JSON line: records, seconds,
records_per_s (from the first record to the last).

    consume.py BOOTSTRAP TOPIC -n 1000000 -X security.protocol=SSL -X ssl.ca.location=ca.pem
"""

from __future__ import annotations

import argparse
import json
import time
import uuid


def consume(bootstrap: str, topic: str, n: int, timeout_s: float, conf: dict[str, str]) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"perf-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            "enable.partition.eof": False,
            "fetch.queue.backoff.ms": 0,  # as odradek perf consume: no pause when the local queue fills
            **conf,
        }
    )
    md = c.list_topics(topic, timeout=15)
    parts = sorted(md.topics[topic].partitions) if topic in md.topics else [0]
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    records = payload = 0
    first = None
    last = time.perf_counter()
    try:
        while records < n:
            msgs = c.consume(num_messages=min(10000, n - records), timeout=1.0)
            now = time.perf_counter()
            if not msgs:
                if now - last > timeout_s:
                    break
                continue
            first = first or now
            last = now
            for m in msgs:
                if m.error() is None:
                    records += 1
                    payload += len(m.value() or b"")
    finally:
        c.close()
    secs = last - first if first is not None and last > first else float("nan")
    return {
        "records": records,
        "payload_bytes": payload,
        "seconds": secs,
        "records_per_s": records / secs if secs == secs else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("-n", "--num-records", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=15.0)
    ap.add_argument("-X", dest="conf", action="append", default=[], help="a librdkafka setting KEY=VALUE")
    a = ap.parse_args()
    conf = dict(c.split("=", 1) for c in a.conf)
    out = consume(a.bootstrap, a.topic, a.num_records, a.timeout, conf)
    print(json.dumps(out), flush=True)
    if out["records"] < a.num_records:
        raise SystemExit(f"read {out['records']} of {a.num_records} records")


if __name__ == "__main__":
    main()
