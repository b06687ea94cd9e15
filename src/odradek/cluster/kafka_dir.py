"""Adopting a log directory that Apache Kafka wrote: its topics, read from the directory itself.

A Kafka log directory has no ``odradek-metadata.json``: Kafka keeps its topic list, partition
assignments and per-topic configs in ZooKeeper (ZooKeeper mode) or in its KRaft metadata log.
What the directory does hold is enough to serve the data: one ``<topic>-<partition>`` directory
per partition (Kafka's segment, index and checkpoint formats are odradek's), each with a
``partition.metadata`` naming the topic id, and a ``leader-epoch-checkpoint``.

:func:`discover_topics` turns that into topics for the single-node store (local.py), which
calls it when the first log directory has partition directories but no metadata file:

* a topic's partitions are its ``<topic>-<n>`` directories; partitions missing in between
  (hosted in another log directory or on another broker) are created empty, with a warning;
* its id comes from ``partition.metadata`` (all partitions must agree; a topic without any
  gets a new id, written into its directories when they are opened);
* its leader epoch is one above the highest epoch in its partitions' leader-epoch
  checkpoints, so clients that saw Kafka's epochs accept odradek as a newer leader;
* configs: a KRaft-mode directory holds Kafka's metadata log (``__cluster_metadata-0``), and the
  per-topic configs are read from it (kafka_metadata_log.py). A ZooKeeper-mode directory has
  them in ZooKeeper, not here: they are not carried over. Either way ``__consumer_offsets`` and
  ``__transaction_state`` are compacted, as Kafka creates them. Without the metadata log, set the
  configs again (AlterConfigs) after adopting, before the retention of a compacted topic could
  delete what compaction would have kept.

Refused (:class:`AdoptionError`): partitions of one topic naming different topic ids, an
unreadable ``partition.metadata``. ``__cluster_metadata`` (KRaft's own metadata log) is not a
topic and is left alone. meta.properties is checked by the broker (broker/server.py).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import uuid
from dataclasses import dataclass, field

from odradek.cluster.kafka_metadata_log import topic_configs
from odradek.cluster.metadata import topic_name_problem
from odradek.cluster.store import MetadataError

log = logging.getLogger("odradek.cluster.kafka_dir")

#: Kafka's own metadata log (KRaft), never a topic
METADATA_LOG = "__cluster_metadata"
#: configs Kafka gives its internal topics when it creates them
INTERNAL_CONFIGS = {
    "__consumer_offsets": {"cleanup.policy": "compact", "compression.type": "producer"},
    "__transaction_state": {"cleanup.policy": "compact"},
}
_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)")


class AdoptionError(MetadataError):
    """The directory holds Kafka data odradek cannot take over as it is."""


@dataclass(slots=True)
class FoundTopic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    leader_epoch: int
    configs: dict[str, str] = field(default_factory=dict)


def partition_dirs(directory: str) -> dict[str, dict[int, str]]:
    """``{topic: {partition: path}}`` for every partition directory (not deleted, future or stray
    ones, whose names end in ``-delete``, ``-future``, ``-stray``, nor Kafka's metadata log)."""
    out: dict[str, dict[int, str]] = {}
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return out
    for name in names:
        path = os.path.join(directory, name)
        m = _PARTITION_DIR.fullmatch(name)
        if m is None or not os.path.isdir(path) or m["topic"] == METADATA_LOG or topic_name_problem(m["topic"]):
            continue
        out.setdefault(m["topic"], {})[int(m["partition"])] = path
    return out


def read_topic_id(partition_dir: str) -> uuid.UUID | None:
    """The topic id in Kafka's ``partition.metadata`` (``version: 0`` / ``topic_id: <base64>``)."""
    path = os.path.join(partition_dir, "partition.metadata")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    try:
        if fields.get("version") != "0":
            raise ValueError(f"version {fields.get('version')!r}")
        raw = base64.urlsafe_b64decode(fields["topic_id"] + "=" * (-len(fields["topic_id"]) % 4))
        return uuid.UUID(bytes=raw)
    except (KeyError, ValueError) as e:
        raise AdoptionError(f"{path}: not a partition.metadata odradek can read ({e})") from None


def last_leader_epoch(partition_dir: str) -> int:
    """The highest epoch in the partition's leader-epoch-checkpoint (-1: none)."""
    path = os.path.join(partition_dir, "leader-epoch-checkpoint")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return -1
    epochs = [int(ln.split()[0]) for ln in lines[2:] if ln.strip()]
    return max(epochs, default=-1)


def discover_topics(directory: str) -> list[FoundTopic]:
    """The topics of a log directory Kafka wrote (see the module docstring)."""
    found: list[FoundTopic] = []
    dirs = partition_dirs(directory)
    if not dirs:
        return found
    from_metadata_log = topic_configs(directory)
    if from_metadata_log is None:
        log.warning(
            "%s: no readable KRaft metadata log: per-topic configs are not carried over (a ZooKeeper-mode "
            "broker keeps them in ZooKeeper); set them again (docs/storage.md)",
            directory,
        )
    else:
        log.info("%s: per-topic configs read from Kafka's metadata log (%s)", directory, METADATA_LOG)
    for name, parts in sorted(dirs.items()):
        ids = {p: read_topic_id(path) for p, path in parts.items()}
        known = {i for i in ids.values() if i is not None}
        if len(known) > 1:
            raise AdoptionError(
                f"{directory}: the partitions of topic {name!r} name different topic ids "
                f"({', '.join(f'{p}: {i}' for p, i in sorted(ids.items()))})"
            )
        count = max(parts) + 1
        missing = sorted(set(range(count)) - set(parts))
        if missing:
            log.warning("%s: topic %s has no directory for partitions %s; they start empty", directory, name, missing)
        epoch = max(last_leader_epoch(path) for path in parts.values())
        topic_id = known.pop() if known else uuid.uuid4()
        configs = dict(INTERNAL_CONFIGS.get(name, {})) | (from_metadata_log or {}).get(name, {})
        found.append(FoundTopic(name, topic_id, count, epoch + 1, configs))
    return found
