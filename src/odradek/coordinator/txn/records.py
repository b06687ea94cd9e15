"""The record format of `__transaction_state`, exactly as Kafka writes it.

Kafka's own schemas (transaction-coordinator's TransactionLogKey.json and
TransactionLogValue.json), each prefixed by an int16 version, so Kafka's tools
(`kafka-dump-log --transaction-log-decoder`, a console consumer with
TransactionLogMessageFormatter) read what we write:

- key v0: the transactional id (string).
- value v0 (what Kafka writes below transaction.version 2, and what we write): producer id
  int64, producer epoch int16, timeout int32, state int8, partitions (nullable array of
  topic string + int32 partition array; null when the state is Empty), last update
  timestamp int64, start timestamp int64.
- value v1 (Kafka with transaction.version 2): the same fields in the flexible encoding
  (compact strings and arrays, tagged fields) plus the tagged fields previous producer id
  (tag 0), next producer id (tag 1) and client transaction version (tag 2). We read it.
- A null value is a tombstone: the transactional id expired.

The state byte is TransactionState's id: Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7.

Pure functions over bytes; no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.coordinator.codec import Reader, RecordFormatError, partition_for
from odradek.protocol.varint import write_uvarint

TXN_STATE_TOPIC = "__transaction_state"

__all__ = [
    "TXN_STATE_TOPIC",
    "RecordFormatError",
    "TxnLogValue",
    "TxnRecord",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
    "serialize_record",
]

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_b = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: tuple[tuple[str, int], ...]  # sorted (topic, partition)
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1  # v1 only
    next_producer_id: int = -1  # v1 only
    client_transaction_version: int = 0  # v1 only


# --------------------------------------------------------------------------- encode


def _string(s: str) -> bytes:
    b = s.encode()
    return _H.pack(len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return _H.pack(0) + _string(transactional_id)


def _grouped(partitions: tuple[tuple[str, int], ...]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return by_topic


def encode_value(v: TxnLogValue, version: int = 0) -> bytes:
    """Kafka's TransactionLogValue; the partitions are null for an Empty transaction."""
    if v.state == 0 and v.partitions:
        raise ValueError("an Empty transaction has no partitions")
    by_topic = None if v.state == 0 else _grouped(v.partitions)
    if version == 0:
        out = [_H.pack(0), _Q.pack(v.producer_id), _H.pack(v.producer_epoch), _I.pack(v.timeout_ms), _b.pack(v.state)]
        if by_topic is None:
            out.append(_I.pack(-1))
        else:
            out.append(_I.pack(len(by_topic)))
            for topic, ps in by_topic.items():
                out.append(_string(topic))
                out.append(_I.pack(len(ps)))
                out.extend(_I.pack(p) for p in ps)
        out += [_Q.pack(v.last_update_ms), _Q.pack(v.start_ms)]
        return b"".join(out)
    if version != 1:
        raise ValueError(f"TransactionLogValue v{version} does not exist")
    buf = bytearray(_H.pack(1))
    buf += _Q.pack(v.producer_id) + _H.pack(v.producer_epoch) + _I.pack(v.timeout_ms) + _b.pack(v.state)
    if by_topic is None:
        buf += write_uvarint(0)
    else:
        buf += write_uvarint(len(by_topic) + 1)
        for topic, ps in by_topic.items():
            tb = topic.encode()
            buf += write_uvarint(len(tb) + 1)
            buf += tb
            buf += write_uvarint(len(ps) + 1)
            for p in ps:
                buf += _I.pack(p)
            buf += write_uvarint(0)  # the entry's tagged fields
    buf += _Q.pack(v.last_update_ms) + _Q.pack(v.start_ms)
    tags = []
    if v.previous_producer_id != -1:
        tags.append((0, _Q.pack(v.previous_producer_id)))
    if v.next_producer_id != -1:
        tags.append((1, _Q.pack(v.next_producer_id)))
    if v.client_transaction_version != 0:
        tags.append((2, _H.pack(v.client_transaction_version)))
    buf += write_uvarint(len(tags))
    for tag, data in tags:
        buf += write_uvarint(tag)
        buf += write_uvarint(len(data))
        buf += data
    return bytes(buf)


# A record the transaction coordinator appends: a transactional id and its value (None: a tombstone).
TxnRecord = tuple[str, TxnLogValue | None]


def serialize_record(record: TxnRecord) -> tuple[bytes, bytes | None]:
    """The key and value bytes of a record (the value in v0, as Kafka below transaction.version 2)."""
    transactional_id, value = record
    return encode_key(transactional_id), None if value is None else encode_value(value)


# --------------------------------------------------------------------------- decode


def decode_key(key: bytes) -> str:
    """The transactional id of a key (RecordFormatError for a key version Kafka does not write)."""
    r = Reader(key)
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unknown __transaction_state key version {version}")
    return r.required_string()


def decode_value(value: bytes | None) -> TxnLogValue | None:
    """The value, or None for a tombstone."""
    if value is None:
        return None
    r = Reader(value)
    version = r.i16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown __transaction_state value version {version}")
    r.flexible = version == 1
    pid = r.i64()
    epoch = r.i16()
    timeout = r.i32()
    state = r.i8()
    if not 0 <= state <= 7:
        raise RecordFormatError(f"unknown transaction state {state}")
    parts: list[tuple[str, int]] = []
    for _ in range(max(r.array_len(), 0)):
        topic = r.required_string()
        parts.extend((topic, r.i32()) for _ in range(r.array_len()))
        r.tagged_fields()
    last_update = r.i64()
    start = r.i64()
    tags = r.tagged_fields()
    prev_pid = _Q.unpack(tags[0])[0] if 0 in tags else -1
    next_pid = _Q.unpack(tags[1])[0] if 1 in tags else -1
    client_tv = _H.unpack(tags[2])[0] if 2 in tags else 0
    if state == 0:
        parts = []  # Kafka ignores partitions of an Empty transaction
    return TxnLogValue(
        pid, epoch, timeout, state, tuple(sorted(parts)), last_update, start, prev_pid, next_pid, client_tv
    )
