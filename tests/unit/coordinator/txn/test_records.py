"""The record format of `__transaction_state` (coordinator/txn/records.py), byte for byte
as Kafka's TransactionLogKey / TransactionLogValue schemas lay it out (Kafka's own tool
reads what odradek writes: tests/reference/test_txn_log_format.py)."""

from __future__ import annotations

import struct

import pytest

from odradek.coordinator.txn.records import (
    RecordFormatError,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)


def test_key_is_version_0_and_the_transactional_id():
    assert encode_key("tx-1") == b"\x00\x00" + b"\x00\x04tx-1"
    assert decode_key(encode_key("é-id")) == "é-id"
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x01\x00\x01a")


def test_value_v0_layout_field_by_field():
    v = TxnLogValue(
        producer_id=4000,
        producer_epoch=3,
        timeout_ms=60000,
        state=1,
        partitions=(("a", 0), ("a", 2), ("b", 1)),
        last_update_ms=1700000000123,
        start_ms=1700000000000,
    )
    expected = (
        struct.pack(">hqhib", 0, 4000, 3, 60000, 1)
        + struct.pack(">i", 2)  # two topics
        + struct.pack(">h", 1)
        + b"a"
        + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">h", 1)
        + b"b"
        + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", 1700000000123, 1700000000000)
    )
    assert encode_value(v) == expected
    assert decode_value(expected) == v


def test_empty_state_writes_null_partitions_and_refuses_some():
    v = TxnLogValue(7, 0, 1000, 0, (), 5, -1)
    raw = encode_value(v)
    assert raw[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == b"\xff\xff\xff\xff"
    assert decode_value(raw) == v
    with pytest.raises(ValueError):
        encode_value(TxnLogValue(7, 0, 1000, 0, (("t", 0),), 5, -1))


def test_value_v1_flexible_with_tagged_fields_round_trips():
    v = TxnLogValue(
        9, 32766, 1000, 4, (("t", 3),), 10, 9, previous_producer_id=8, next_producer_id=-1, client_transaction_version=2
    )
    raw = encode_value(v, version=1)
    assert raw[:2] == b"\x00\x01"
    assert decode_value(raw) == v
    # without tagged fields: the defaults
    plain = TxnLogValue(9, 1, 1000, 2, (("t", 3), ("u", 0)), 10, 9)
    assert decode_value(encode_value(plain, version=1)) == plain
    assert encode_value(plain, version=1).endswith(b"\x00")  # no tagged fields


def test_tombstone_and_bad_values():
    assert decode_value(None) is None
    with pytest.raises(RecordFormatError):
        decode_value(b"\x00\x02" + b"\x00" * 40)
    bad_state = bytearray(encode_value(TxnLogValue(1, 0, 1, 1, (("t", 0),), 1, 1)))
    bad_state[2 + 8 + 2 + 4] = 9
    with pytest.raises(RecordFormatError):
        decode_value(bytes(bad_state))
    with pytest.raises(RecordFormatError):
        decode_value(encode_value(TxnLogValue(1, 0, 1, 1, (("t", 0),), 1, 1))[:-3])


def test_partition_for_is_kafkas_hash():
    # Utils.abs("tx".hashCode) % 50: "tx".hashCode() == 116 * 31 + 120 == 3716
    assert partition_for("tx", 50) == 3716 % 50
    assert 0 <= partition_for("a-transactional-id-with-a-negative-hash-ÿ", 50) < 50
