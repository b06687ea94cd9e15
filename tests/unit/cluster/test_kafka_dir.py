"""Adopting a log directory without odradek-metadata.json (written by Apache Kafka): topics from
the partition directories (tests/reference/test_disk_format.py does it with Kafka's own files)."""

from __future__ import annotations

import json
import uuid

import pytest

from odradek.cluster.kafka_dir import AdoptionError, discover_topics
from odradek.cluster.local import FILE_NAME, LocalMetadataStore
from odradek.storage import OSFileSystem
from odradek.storage.checkpoint import topic_id_text


def partition(root, name: str, topic_id: uuid.UUID | None, epochs=()) -> None:
    d = root / name
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"")
    if topic_id is not None:
        (d / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id_text(topic_id)}")
    if epochs:
        body = "".join(f"{e} {o}\n" for e, o in epochs)
        (d / "leader-epoch-checkpoint").write_text(f"0\n{len(epochs)}\n{body}")


def test_topics_ids_epochs_and_internal_configs_from_the_directory(tmp_path):
    a, offsets = uuid.uuid4(), uuid.uuid4()
    partition(tmp_path, "a-0", a, [(0, 0), (2, 40)])
    partition(tmp_path, "a-2", a, [(0, 0)])  # a-1 lives elsewhere: created empty
    partition(tmp_path, "__consumer_offsets-0", offsets)
    partition(tmp_path, "__consumer_offsets-1", offsets)
    partition(tmp_path, "old-0", None)  # written before topic ids (Kafka < 2.8)
    partition(tmp_path, "__cluster_metadata-0", None)  # KRaft's metadata log: not a topic
    (tmp_path / "a-1.0123456789abcdef0123456789abcdef-delete").mkdir()
    (tmp_path / "a-3-stray").mkdir()
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=x\n")
    store = LocalMetadataStore(str(tmp_path), 1, "x", OSFileSystem().write_file_atomic)
    topics = store.snapshot.topics
    assert sorted(topics) == ["__consumer_offsets", "a", "old"]
    assert (topics["a"].topic_id, len(topics["a"].partitions)) == (a, 3)
    assert {p.leader_epoch for p in topics["a"].partitions} == {3}  # one above Kafka's last epoch
    assert topics["__consumer_offsets"].topic_id == offsets
    assert topics["__consumer_offsets"].configs["cleanup.policy"] == "compact"
    assert topics["old"].configs == {} and topics["old"].partitions[0].leader_epoch == 0
    # saved: the next start reads the file, the same topics and ids
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert {t["name"]: t["id"] for t in doc["topics"]} == {n: str(t.topic_id) for n, t in topics.items()}
    again = LocalMetadataStore(str(tmp_path), 1, "x", OSFileSystem().write_file_atomic).snapshot.topics
    assert {n: (t.topic_id, len(t.partitions), t.partitions[0].leader_epoch) for n, t in again.items()} == {
        n: (t.topic_id, len(t.partitions), t.partitions[0].leader_epoch) for n, t in topics.items()
    }


def test_partitions_naming_different_topic_ids_are_refused(tmp_path):
    partition(tmp_path, "a-0", uuid.uuid4())
    partition(tmp_path, "a-1", uuid.uuid4())
    with pytest.raises(AdoptionError, match="different topic ids"):
        LocalMetadataStore(str(tmp_path), 1, "x", OSFileSystem().write_file_atomic)
    assert not (tmp_path / FILE_NAME).exists()


def test_unreadable_partition_metadata_is_refused(tmp_path):
    partition(tmp_path, "a-0", None)
    (tmp_path / "a-0" / "partition.metadata").write_text("version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(AdoptionError, match="partition.metadata"):
        discover_topics(str(tmp_path))


def test_an_empty_or_new_directory_adopts_nothing(tmp_path):
    assert discover_topics(str(tmp_path / "missing")) == []
    store = LocalMetadataStore(str(tmp_path), 1, "x", OSFileSystem().write_file_atomic)
    assert store.snapshot.topics == {}
    assert not (tmp_path / FILE_NAME).exists()
