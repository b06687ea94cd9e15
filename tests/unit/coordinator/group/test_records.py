"""The __consumer_offsets record codec and Kafka's group -> partition mapping."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from odradek.coordinator.group import records as r


def test_java_hashcode_matches_java():
    assert r.java_string_hashcode("") == 0
    assert r.java_string_hashcode("hello") == 99162322
    assert r.java_string_hashcode("é") == 233
    assert r.java_string_hashcode("\U0001f600") == 55357 * 31 + 56832  # surrogate pair, as Java sees it
    assert r.java_string_hashcode("polygenelubricants") == -(2**31)


def test_partition_for_is_kafkas():
    # Utils.abs(Integer.MIN_VALUE) == 0
    assert r.partition_for("polygenelubricants", 50) == 0
    assert r.partition_for("hello", 50) == 99162322 % 50
    neg = "my-group-7"
    h = r.java_string_hashcode(neg)
    assert r.partition_for(neg, 50) == abs(h) % 50


def test_offset_commit_key_bytes():
    k = r.encode_key(r.OffsetCommitKey("g", "t", 3))
    assert k == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 3)
    assert r.decode_key(k) == r.OffsetCommitKey("g", "t", 3)
    # key version 0 is also an offset key
    assert r.decode_key(b"\x00\x00" + k[2:]) == r.OffsetCommitKey("g", "t", 3)


def test_group_key_bytes():
    k = r.encode_key(r.GroupMetadataKey("grp"))
    assert k == b"\x00\x02\x00\x03grp"
    assert r.decode_key(k) == r.GroupMetadataKey("grp")


def test_offset_value_v3_bytes():
    v = r.OffsetCommitValue(42, "meta", 1700000000000, 5)
    b = r.encode_offset_value(v)
    assert b == struct.pack(">hqi", 3, 42, 5) + struct.pack(">h", 4) + b"meta" + struct.pack(">q", 1700000000000)
    assert r.decode_offset_value(b) == v


def test_offset_value_v1_when_expiring():
    v = r.OffsetCommitValue(42, "", 1000, -1, 5000)
    b = r.encode_offset_value(v)
    assert b[:2] == b"\x00\x01"
    assert r.decode_offset_value(b) == v


def test_offset_value_v0_and_v4():
    v0 = struct.pack(">hq", 0, 7) + struct.pack(">h", 1) + b"m" + struct.pack(">q", 99)
    assert r.decode_offset_value(v0) == r.OffsetCommitValue(7, "m", 99, -1, -1)
    # v4 is flexible: compact string, tagged fields
    v4 = struct.pack(">hqi", 4, 7, 2) + bytes([2]) + b"m" + struct.pack(">q", 99) + b"\x00"
    assert r.decode_offset_value(v4) == r.OffsetCommitValue(7, "m", 99, 2, -1)


def test_group_value_roundtrip_v3():
    m = r.MemberMetadata("c-1", "inst", "c", "/127.0.0.1", 30000, 10000, b"sub", b"asg")
    v = r.GroupMetadataValue("consumer", 3, "range", "c-1", 12345, (m,))
    b = r.encode_group_value(v)
    assert b[:2] == b"\x00\x03"
    assert r.decode_group_value(b) == v
    empty = r.GroupMetadataValue("consumer", 4, None, None, 1, ())
    assert r.decode_group_value(r.encode_group_value(empty)) == empty


def test_tombstone():
    assert r.decode_value(r.GroupMetadataKey("g"), None) is None


@given(
    st.text(max_size=40),
    st.text(max_size=40),
    st.integers(0, 2**31 - 1),
    st.integers(-1, 2**62),
    st.text(max_size=100),
    st.integers(0, 2**62),
    st.integers(-1, 2**31 - 1),
)
def test_offset_roundtrip(group, topic, partition, offset, metadata, ts, epoch):
    k = r.OffsetCommitKey(group, topic, partition)
    assert r.decode_key(r.encode_key(k)) == k
    v = r.OffsetCommitValue(offset, metadata, ts, epoch)
    assert r.decode_offset_value(r.encode_offset_value(v)) == v


def test_subscribed_topics():
    sub = struct.pack(">hi", 1, 2) + struct.pack(">h", 1) + b"a" + struct.pack(">h", 2) + b"bb" + struct.pack(">i", -1)
    assert r.subscribed_topics(sub) == {"a", "bb"}
    assert r.subscribed_topics(b"\x00") is None
