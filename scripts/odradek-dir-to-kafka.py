#!/usr/bin/env python3
"""Prepare an odradek log directory for Apache Kafka 3.9 in ZooKeeper mode (docs/storage.md,
"Moving data between Kafka and odradek").

odradek writes Kafka's on-disk format (segments, indexes, checkpoints, partition.metadata), but
Kafka keeps its topic list in ZooKeeper, not in the directory, and refuses partitions whose
topic id differs from the one ZooKeeper holds. This script, run while no broker uses the
directory and before Kafka's first start against the ZooKeeper given:

1. writes ``meta.properties`` as Kafka's ZooKeeper mode wants it (``version=0``, ``broker.id``,
   ``cluster.id``; odradek's ``version=1`` file is kept as ``meta.properties.odradek``);
2. creates in ZooKeeper ``/cluster/id`` (odradek's cluster id, which Kafka checks against
   meta.properties), and for every topic of ``odradek-metadata.json`` ``/brokers/topics/<t>``
   (its partitions on this broker, with odradek's topic id) and ``/config/topics/<t>`` (its
   per-topic configs).

Then start Kafka with ``broker.id`` = odradek's node.id, ``log.dirs`` = the directory and
``zookeeper.connect`` = the same ZooKeeper: it loads the logs and serves them, committed group
offsets included (``__consumer_offsets`` is one of the topics). Needs ``kazoo`` (pip).

    python scripts/odradek-dir-to-kafka.py --log-dir /var/lib/odradek/data --zookeeper 127.0.0.1:2181
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import uuid


def read_properties(path: str) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, _, v = line.partition("=")
                out[k.strip()] = v.strip()
    return out


def kafka_uuid(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def partition_topic_id(path: str) -> str | None:
    try:
        with open(os.path.join(path, "partition.metadata"), encoding="utf-8") as f:
            fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
    except FileNotFoundError:
        return None
    return fields.get("topic_id")


def prepare(log_dir: str, zookeeper: str) -> list[str]:
    """Does steps 1 and 2; returns the topics created in ZooKeeper."""
    from kazoo.client import KazooClient

    meta_path = os.path.join(log_dir, "meta.properties")
    meta = read_properties(meta_path)
    if meta.get("version") == "0":
        broker_id = meta["broker.id"]
    elif meta.get("version") == "1":
        broker_id = meta["node.id"]
    else:
        raise SystemExit(f"{meta_path}: no meta.properties odradek wrote (version {meta.get('version')!r})")
    cluster_id = meta["cluster.id"]
    with open(os.path.join(log_dir, "odradek-metadata.json"), encoding="utf-8") as f:
        topics = json.load(f)["topics"]
    # every partition directory must name the topic id ZooKeeper will hold (Kafka refuses others)
    for t in topics:
        want = kafka_uuid(uuid.UUID(t["id"]))
        for p in range(t["partitions"]):
            have = partition_topic_id(os.path.join(log_dir, f"{t['name']}-{p}"))
            if have not in (None, want):
                raise SystemExit(f"{t['name']}-{p}: partition.metadata has topic id {have}, the metadata {want}")

    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=30)
    try:
        if zk.exists("/cluster/id"):
            existing = json.loads(zk.get("/cluster/id")[0])["id"]
            if existing != cluster_id:
                raise SystemExit(f"ZooKeeper belongs to cluster {existing}, the directory to {cluster_id}")
        else:
            zk.create("/cluster/id", json.dumps({"version": "1", "id": cluster_id}).encode(), makepath=True)
        for t in topics:
            if zk.exists(f"/brokers/topics/{t['name']}"):
                raise SystemExit(f"topic {t['name']} already exists in ZooKeeper")
        for t in topics:
            assignment = {"version": 3, "topic_id": kafka_uuid(uuid.UUID(t["id"]))}
            assignment |= {"partitions": {str(p): [int(broker_id)] for p in range(t["partitions"])}}
            assignment |= {"adding_replicas": {}, "removing_replicas": {}}
            zk.create(
                f"/config/topics/{t['name']}",
                json.dumps({"version": 1, "config": t["configs"]}).encode(),
                makepath=True,
            )
            zk.create(f"/brokers/topics/{t['name']}", json.dumps(assignment).encode(), makepath=True)
    finally:
        zk.stop()
        zk.close()

    if meta.get("version") != "0":
        os.replace(meta_path, meta_path + ".odradek")
        with open(meta_path, "w", encoding="utf-8") as f:
            f.write(f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")
    return [t["name"] for t in topics]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-dir", required=True, help="the odradek log directory (its first log.dirs entry)")
    ap.add_argument("--zookeeper", required=True, help="host:port of the ZooKeeper Kafka will use")
    args = ap.parse_args(argv)
    names = prepare(args.log_dir, args.zookeeper)
    print(f"{args.log_dir}: meta.properties version 0; {len(names)} topics in ZooKeeper: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
