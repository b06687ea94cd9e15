"""messages.build_entity: one builder of kio entities from loose fields, for the broker's
responses (strict) and the client's requests (loose)."""

import datetime

import pytest

from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import UnknownField, build_entity, field_names_of_all_versions

METADATA = 3
OFFSET_COMMIT = 8


def test_fields_another_version_has_are_dropped_and_ints_converted():
    cls = messages.response_class(METADATA, 0)
    mod = messages.module_of(cls)
    topic = build_entity(
        mod.MetadataResponseTopic,
        {"error_code": 3, "name": "t", "topic_id": None, "is_internal": False, "partitions": ()},
    )
    assert topic.error_code is ErrorCode.unknown_topic_or_partition
    resp = build_entity(cls, {"throttle_time": 5, "brokers": (), "topics": (topic,), "cluster_id": "c"})
    assert not hasattr(resp, "throttle_time") and resp.topics == (topic,)
    later = build_entity(messages.response_class(METADATA, 12), {"throttle_time": 5, "brokers": (), "topics": ()})
    assert later.throttle_time == datetime.timedelta(milliseconds=5)
    messages.encode(resp)
    messages.encode(later)


def test_a_name_no_version_has_is_refused():
    cls = messages.response_class(METADATA, 12)
    with pytest.raises(UnknownField, match="MetadataResponse has no field 'throttle_time_ms' in any version"):
        build_entity(cls, {"throttle_time_ms": 0, "brokers": (), "topics": ()})
    # the same name is refused again (a dropped name is remembered per class, an unknown one is not)
    with pytest.raises(UnknownField):
        build_entity(cls, {"throttle_time_ms": 0, "brokers": (), "topics": ()})
    nested = messages.module_of(cls).MetadataResponsePartition
    with pytest.raises(UnknownField, match="leader_epoc"):
        build_entity(nested, {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoc": 0})


def test_family_is_the_same_class_name_in_every_version():
    v0 = messages.request_class(OFFSET_COMMIT, 2)
    names = field_names_of_all_versions(messages.module_of(v0).OffsetCommitRequestPartition)
    assert "committed_leader_epoch" in names  # v6+, so not in v2's own class
    assert "committed_leader_epoch" not in messages.module_of(v0).OffsetCommitRequestPartition.__dataclass_fields__
    assert "commit_timestamp" not in names  # v1 only; kio (like Kafka 4) starts at v2


def test_strict_needs_every_required_field():
    with pytest.raises(TypeError):
        build_entity(messages.response_class(METADATA, 12), {"brokers": ()})


def test_loose_builds_nested_dicts_and_fills_what_is_left_out():
    req = build_entity(
        messages.request_class(OFFSET_COMMIT, 9),
        {
            "group_id": "g",
            "generation_id_or_member_epoch": 3,
            "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 7}]}],
        },
        loose=True,
    )
    part = req.topics[0].partitions[0]
    # committed_metadata (a required nullable string) is filled with None; the epoch keeps its default
    assert (part.partition_index, part.committed_offset, part.committed_leader_epoch) == (1, 7, -1)
    assert part.committed_metadata is None
    assert req.member_id == "" and isinstance(req.topics, tuple)
    messages.encode(req)
    with pytest.raises(UnknownField, match="OffsetCommitRequestPartition has no field 'commit_timestamp'"):
        build_entity(
            messages.request_class(OFFSET_COMMIT, 9),
            {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "commit_timestamp": -1}]}]},
            loose=True,
        )


def test_entities_of_another_version_are_taken_as_they_are():
    old = messages.module_of(messages.request_class(OFFSET_COMMIT, 2)).OffsetCommitRequestTopic(name="t", partitions=())
    req = build_entity(messages.request_class(OFFSET_COMMIT, 9), {"group_id": "g", "topics": [old]}, loose=True)
    assert req.topics == (old,)
