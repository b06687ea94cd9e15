"""partition.metadata: the topic id of a partition directory, in Kafka's format (Kafka refuses to
open a directory without it, or with another topic's id; see docs/storage.md)."""

import os
import uuid

import pytest

from odradek.storage import LogConfig, StorageInconsistentTopicIdError
from odradek.storage.checkpoint import parse_topic_id, read_partition_metadata, topic_id_text


def test_written_in_kafkas_format_and_read_back_after_restart(make_mgr, tmp_path):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    assert lg.topic_id is None
    assert not os.path.exists(os.path.join(lg.dir, "partition.metadata"))
    tid = uuid.UUID("6d1a2b3c-4d5e-4f60-8172-839495a6b7c8")
    lg.assign_topic_id(tid)
    text = open(os.path.join(lg.dir, "partition.metadata")).read()
    assert text == f"version: 0\ntopic_id: {topic_id_text(tid)}"
    assert topic_id_text(tid) == "bRorPE1eT2CBcoOUlaa3yA"  # Kafka's Uuid.toString: URL-safe base64, no padding
    lg.assign_topic_id(tid)  # the same id again: nothing to do
    m.shutdown()
    lg2 = make_mgr().get_log("t", 0)
    assert lg2.topic_id == tid


def test_another_topic_id_is_refused(make_mgr):
    lg = make_mgr().create_log("t", 0, LogConfig())
    lg.assign_topic_id(uuid.uuid4())
    with pytest.raises(StorageInconsistentTopicIdError):
        lg.assign_topic_id(uuid.uuid4())


def test_malformed_file_is_ignored_and_rewritten(make_mgr, tmp_path):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig())
    m.shutdown()
    with open(os.path.join(lg.dir, "partition.metadata"), "w") as f:
        f.write("version: 7\ntopic_id: x\n")
    lg2 = make_mgr().get_log("t", 0)
    assert lg2.topic_id is None
    tid = uuid.uuid4()
    lg2.assign_topic_id(tid)
    assert read_partition_metadata(lg2.fs, lg2.dir) == tid


def test_topic_id_text_round_trip():
    for _ in range(50):
        tid = uuid.uuid4()
        assert parse_topic_id(topic_id_text(tid)) == tid
    with pytest.raises(ValueError):
        parse_topic_id("AAAA")
