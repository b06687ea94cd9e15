"""Per-topic configs from a KRaft metadata log (``__cluster_metadata-0``), for adopting a log
directory Kafka wrote in KRaft mode (kafka_dir.py).

A KRaft broker keeps its metadata log in ``metadata.log.dir``, by default its first log
directory, beside the partitions: record batches in the usual format, in segments and in
snapshots (``<offset 20 digits>-<epoch 10 digits>.checkpoint``, the whole state below that
offset). Each record value is a metadata record: an unsigned-varint frame version (1), API
key and record version, then the record's fields in the flexible (compact) encoding of
Kafka's schemas (metadata/src/main/resources/common/metadata). Read here:

* TopicRecord (key 2): Name string, TopicId uuid;
* ConfigRecord (key 4): ResourceType int8 (2 = topic), ResourceName string, Name string,
  Value nullable string (null: the config was deleted);
* RemoveTopicRecord (key 9): TopicId uuid (its configs go with it).

Replay: the newest snapshot, then the log's batches from the snapshot's offset on. Nothing else
(brokers, partitions, features, ACLs) is read. When the log does not go back to the snapshot (or
to 0 without one), or a record does not parse, :func:`topic_configs` returns None: then no
configs are carried over, as for a ZooKeeper-mode directory.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

from odradek.protocol.records import CorruptRecordError, decode_records, iter_batches
from odradek.protocol.varint import read_uvarint

log = logging.getLogger("odradek.cluster.kafka_dir")

METADATA_PARTITION_DIR = "__cluster_metadata-0"
TOPIC_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD = 2, 4, 9
TOPIC_RESOURCE = 2


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.b = data
        self.pos = 0

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.b, self.pos)
        return value

    def int8(self) -> int:
        v = self.b[self.pos]
        self.pos += 1
        return v - 256 if v > 127 else v

    def uuid(self) -> uuid.UUID:
        raw = self.b[self.pos : self.pos + 16]
        if len(raw) != 16:
            raise ValueError("uuid truncated")
        self.pos += 16
        return uuid.UUID(bytes=bytes(raw))

    def string(self) -> str | None:
        n = self.uvarint() - 1  # compact string: length + 1, 0 for null
        if n < 0:
            return None
        raw = self.b[self.pos : self.pos + n]
        if len(raw) != n:
            raise ValueError("string truncated")
        self.pos += n
        return bytes(raw).decode("utf-8")


def _records(path: str, from_offset: int) -> Iterator[tuple[int, bytes]]:
    """(offset, value) of every data record at or past ``from_offset`` in a segment or snapshot file."""
    with open(path, "rb") as f:
        data = f.read()
    for h in iter_batches(data):
        if h.is_control or h.base_offset + h.last_offset_delta < from_offset:
            continue
        for r in decode_records(data, h.position):
            if r.offset >= from_offset and r.value is not None:
                yield r.offset, r.value


class _State:
    def __init__(self) -> None:
        self.names: dict[uuid.UUID, str] = {}
        self.configs: dict[str, dict[str, str]] = {}

    def apply(self, value: bytes) -> None:
        r = _Reader(value)
        frame, key, _version = r.uvarint(), r.uvarint(), r.uvarint()
        if frame != 1:
            raise ValueError(f"metadata record frame version {frame}")
        if key == TOPIC_RECORD:
            name, topic_id = r.string(), r.uuid()
            if name is None:
                raise ValueError("TopicRecord without a name")
            self.names[topic_id] = name
        elif key == REMOVE_TOPIC_RECORD:
            name = self.names.pop(r.uuid(), None)
            if name is not None:
                self.configs.pop(name, None)
        elif key == CONFIG_RECORD:
            resource_type, resource, name, val = r.int8(), r.string(), r.string(), r.string()
            if resource_type == TOPIC_RESOURCE and resource is not None and name is not None:
                configs = self.configs.setdefault(resource, {})
                if val is None:
                    configs.pop(name, None)
                else:
                    configs[name] = val


def topic_configs(log_dir: str) -> dict[str, dict[str, str]] | None:
    """``{topic: {config: value}}`` for the topics that exist at the end of the metadata log in
    ``log_dir``; None when there is no metadata log or it cannot be read whole."""
    d = os.path.join(log_dir, METADATA_PARTITION_DIR)
    if not os.path.isdir(d):
        return None
    names = os.listdir(d)
    snapshots = sorted(n for n in names if n.endswith(".checkpoint") and n[:20].isdigit())
    segments = sorted(n for n in names if n.endswith(".log") and n[:20].isdigit())
    state = _State()
    start = 0
    try:
        if snapshots:
            for _off, value in _records(os.path.join(d, snapshots[-1]), 0):
                state.apply(value)
            start = int(snapshots[-1][:20])
        if segments and int(segments[0][:20]) > start:
            log.warning("%s: the metadata log starts at %s, after its newest snapshot: not read", d, segments[0][:20])
            return None
        for seg in segments:
            for _off, value in _records(os.path.join(d, seg), start):
                state.apply(value)
    except (OSError, ValueError, IndexError, CorruptRecordError, UnicodeDecodeError) as e:
        log.warning("%s: cannot read the metadata log (%s): per-topic configs not carried over", d, e)
        return None
    live = set(state.names.values())
    return {name: configs for name, configs in state.configs.items() if name in live}
