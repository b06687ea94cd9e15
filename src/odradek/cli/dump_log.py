"""`odradek dump-log PATH...`: decode segment, index and time-index files, like kafka-dump-log.sh.

For `.log` files: every batch with its offsets, timestamps, producer id/epoch/sequence,
codec, size and whether its CRC32C is valid; `--print-data-log` adds every record.
For `.index` / `.timeindex`: the entries, with the absolute offsets they stand for.
Stops at the first batch that can't be read and says where and why (the tail that
recovery would truncate).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from odradek.protocol import records as rec
from odradek.protocol.errors import InvalidRecordError

_INDEX = struct.Struct(">ii")
_TIMEINDEX = struct.Struct(">qi")


def base_offset_of(path: str) -> int:
    stem = os.path.basename(path).split(".", 1)[0]
    return int(stem) if stem.isdigit() else 0


def dump_index(path: str) -> Iterator[str]:
    base = base_offset_of(path)
    with open(path, "rb") as f:
        data = f.read()
    yield f"Dumping {path}"
    for pos in range(0, len(data) - _INDEX.size + 1, _INDEX.size):
        rel, position = _INDEX.unpack_from(data, pos)
        if rel == 0 and position == 0 and pos > 0:
            break  # preallocated, unused
        yield f"offset: {base + rel} position: {position}"


def dump_timeindex(path: str) -> Iterator[str]:
    base = base_offset_of(path)
    with open(path, "rb") as f:
        data = f.read()
    yield f"Dumping {path}"
    for pos in range(0, len(data) - _TIMEINDEX.size + 1, _TIMEINDEX.size):
        ts, rel = _TIMEINDEX.unpack_from(data, pos)
        if ts == 0 and rel == 0 and pos > 0:
            break
        yield f"timestamp: {ts} offset: {base + rel}"


def dump_log(path: str, print_data: bool = False) -> Iterator[str]:
    with open(path, "rb") as f:
        data = f.read()
    yield f"Dumping {path}"
    yield f"Log starting offset: {base_offset_of(path)}"
    pos = 0
    while pos < len(data):
        if len(data) - pos < rec.HEADER_SIZE:
            yield f"Found {len(data) - pos} bytes at position {pos} too short for a batch header (torn tail)"
            return
        h = rec.parse_header(data, pos)
        if h.magic != 2 or h.batch_length < 0 or pos + h.size > len(data):
            yield (
                f"Found invalid batch at position {pos}: magic {h.magic}, length {h.batch_length}, "
                f"file has {len(data) - pos} bytes left"
            )
            return
        try:
            rec.validate_batch(data, pos)
            crc_ok = True
        except (rec.CorruptRecordError, InvalidRecordError):
            crc_ok = False
        yield (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"position: {pos} CreateTime: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {rec.CODEC_NAMES.get(h.compression, h.compression)} crc: {h.crc} "
            f"isvalid: {str(crc_ok).lower()}"
        )
        if print_data and crc_ok:
            for r in rec.decode_records(data, pos):
                hdrs = ",".join(f"{k}:{(v or b'').decode('utf-8', 'replace')}" for k, v in r.headers)
                key = "null" if r.key is None else r.key.decode("utf-8", "replace")
                value = "null" if r.value is None else r.value.decode("utf-8", "replace")
                key_size = -1 if r.key is None else len(r.key)
                value_size = -1 if r.value is None else len(r.value)
                yield (
                    f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: {key_size} valueSize: {value_size} "
                    f"headerKeys: [{hdrs}] key: {key} payload: {value}"
                )
        pos += h.size


def dump(path: str, print_data: bool = False) -> Iterator[str]:
    if path.endswith(".index"):
        yield from dump_index(path)
    elif path.endswith(".timeindex"):
        yield from dump_timeindex(path)
    elif path.endswith(".log") or ".log." in path:
        yield from dump_log(path, print_data)
    else:
        raise ValueError(f"don't know how to dump {path}: expected a .log, .index or .timeindex file")
