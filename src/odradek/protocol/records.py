"""RecordBatch v2 (magic 2) codec, plus decoding of the legacy MessageSet v0/v1.

Sans-IO: bytes in, headers/records out. Nothing here touches files or sockets.

RecordBatch v2 header (61 bytes, big endian)::

    0  baseOffset            int64   \\  not covered by the CRC
    8  batchLength           int32    |  (length of everything after this field)
   12  partitionLeaderEpoch  int32    |
   16  magic                 int8     |
   17  crc                   uint32  /   CRC32C of bytes [21, end)
   21  attributes            int16       bits 0-2 codec, 3 timestamp type (1 = LogAppendTime),
                                          4 transactional, 5 control, 6 has delete horizon (KIP-534)
   23  lastOffsetDelta       int32
   27  baseTimestamp         int64       (the delete horizon when bit 6 is set)
   35  maxTimestamp          int64
   43  producerId            int64
   51  producerEpoch         int16
   53  baseSequence          int32
   57  recordCount           int32
   61  records...            (compressed as a whole when codec != 0)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import cramjam
import crc32c as _crc32c_module

from odradek.protocol.errors import InvalidRecordError
from odradek.protocol.varint import VarintError, read_varint, write_varint

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "CorruptRecordError",
    "BatchHeader",
    "Record",
    "parse_header",
    "batch_size",
    "batch_is_transactional",
    "batch_is_control",
    "batch_producer",
    "validate_batch",
    "iter_batches",
    "patch_batch",
    "recompress_batch",
    "build_batch",
    "build_control_batch",
    "decode_records",
    "decode_control_record",
    "decode_message_set",
    "decode_any",
    "compress",
    "decompress",
    "crc32c",
]

crc32c = _crc32c_module.crc32c

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
CONTROL_ABORT, CONTROL_COMMIT = 0, 1

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

# field offsets inside a batch
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51

_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_UI = struct.Struct(">I")
_H = struct.Struct(">h")
_HH = struct.Struct(">hh")
_LEGACY_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TS = struct.Struct(">q")

INT32_MAX = 2**31 - 1


class CorruptRecordError(ValueError):
    """The bytes are not a well-formed batch (bad length, magic, CRC, counts).

    ``position``: where the batch starts in its file, when a reader of a file sets it (LogSegment.scan).

    A well-formed batch that is not acceptable (record count against offsets, a record the
    validator refuses) raises `InvalidRecordError`: the class of INVALID_RECORD in
    protocol/errors.py (one class, as Kafka's InvalidRecordException), imported here."""

    position: int | None = None


class BatchHeader(NamedTuple):
    position: int  # position of the batch inside the buffer it was parsed from
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total size of the batch in bytes (batchLength + 12)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else NO_TIMESTAMP

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        s = self.base_sequence + self.last_offset_delta
        return s - INT32_MAX - 1 if s > INT32_MAX else s


class Record(NamedTuple):
    offset: int = -1
    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()


# --------------------------------------------------------------------------- headers


# Single header fields read in place, without parsing or validating the batch: for the broker's
# quick looks at a request's first batch (Produce, KIP-890 verification, the replica fetcher).
# Each takes the batch at ``pos`` of any bytes-like buffer.


def batch_size(buf, pos: int = 0) -> int | None:
    """The bytes the batch at ``pos`` takes (its length field plus LOG_OVERHEAD), as its header
    says, or None when fewer than LOG_OVERHEAD bytes are left. Not checked against anything."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return LOG_OVERHEAD + _I.unpack_from(buf, pos + LENGTH_OFFSET)[0]


def _attributes(buf, pos: int) -> int:
    if len(buf) - pos < ATTRIBUTES_OFFSET + 2:
        return 0
    return _H.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]


def batch_is_transactional(buf, pos: int = 0) -> bool:
    """Attribute bit 4 of the batch at ``pos`` (False when the buffer ends before the attributes)."""
    return bool(_attributes(buf, pos) & TRANSACTIONAL_MASK)


def batch_is_control(buf, pos: int = 0) -> bool:
    """Attribute bit 5 of the batch at ``pos`` (False when the buffer ends before the attributes)."""
    return bool(_attributes(buf, pos) & CONTROL_MASK)


def batch_producer(buf, pos: int = 0) -> tuple[int, int] | None:
    """(producer id, producer epoch) of the batch at ``pos``, or None when its header is cut short."""
    if len(buf) - pos < HEADER_SIZE:
        return None
    return _Q.unpack_from(buf, pos + PRODUCER_ID_OFFSET)[0], _H.unpack_from(buf, pos + PRODUCER_EPOCH_OFFSET)[0]


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the 61-byte header at ``pos`` without any validation."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"batch header truncated: {len(buf) - pos} < {HEADER_SIZE} bytes")
    return BatchHeader(pos, *HEADER.unpack_from(buf, pos))


def validate_batch(buf, pos: int = 0, *, check_crc: bool = True, strict: bool = False) -> BatchHeader:
    """Parse and validate the batch starting at ``pos``.

    Checks: header fits, length is sane and within the buffer, magic == 2, non-negative
    counts, record count consistent with lastOffsetDelta (``strict``: equal, as required of
    batches coming from producers; otherwise count <= lastOffsetDelta + 1, as compaction
    leaves), and the CRC32C over [attributes, end).
    """
    n = len(buf)
    if n - pos < HEADER_SIZE:
        raise CorruptRecordError(f"batch header truncated at {pos}: {n - pos} bytes left")
    h = BatchHeader(pos, *HEADER.unpack_from(buf, pos))
    length = h.batch_length
    if length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at {pos}: length {length} below minimum {_MIN_BATCH_LENGTH}")
    end = pos + LOG_OVERHEAD + length
    if end > n:
        raise CorruptRecordError(f"batch at {pos}: length {length} exceeds buffer ({n - pos} bytes left)")
    if h.magic != 2:
        raise CorruptRecordError(f"batch at {pos}: unsupported magic {h.magic}")
    if h.record_count < 0 or h.last_offset_delta < 0:
        raise CorruptRecordError(f"batch at {pos}: negative record count or last offset delta")
    if strict:
        if h.record_count != h.last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch at {pos}: record count {h.record_count} != lastOffsetDelta + 1 ({h.last_offset_delta + 1})"
            )
    elif h.record_count > h.last_offset_delta + 1:
        raise CorruptRecordError(f"batch at {pos}: record count {h.record_count} exceeds offset range")
    if check_crc:
        if not isinstance(buf, memoryview):
            buf = memoryview(buf)
        actual = crc32c(buf[pos + ATTRIBUTES_OFFSET : end])
        if actual != h.crc:
            raise CorruptRecordError(f"batch at {pos}: CRC32C mismatch (stored {h.crc:#010x}, computed {actual:#010x})")
    return h


def iter_batches(buf, *, validate: bool = True, strict: bool = False) -> Iterator[BatchHeader]:
    """Yield the header of every batch in a buffer of concatenated v2 batches.

    With ``validate`` every batch is fully checked (see :func:`validate_batch`); without it
    only the framing (length within buffer) is. A trailing partial batch is an error.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    n = len(mv)
    pos = 0
    while pos < n:
        if validate:
            h = validate_batch(mv, pos, strict=strict)
        else:
            if n - pos < HEADER_SIZE:
                raise CorruptRecordError(f"batch header truncated at {pos}")
            h = BatchHeader(pos, *HEADER.unpack_from(mv, pos))
            if h.batch_length < _MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + h.batch_length > n:
                raise CorruptRecordError(f"batch at {pos}: bad length {h.batch_length}")
        yield h
        pos += LOG_OVERHEAD + h.batch_length


def patch_batch(
    buf,
    pos: int = 0,
    *,
    base_offset: int | None = None,
    partition_leader_epoch: int | None = None,
    log_append_time: int | None = None,
    body=None,
) -> None:
    """Patch a batch header in place (``buf`` must be writable).

    baseOffset and partitionLeaderEpoch are outside the CRC and are patched without
    recomputing it. ``log_append_time`` sets the timestamp-type bit and maxTimestamp, which
    the CRC covers, so the CRC is recomputed. When ``body`` is given, ``buf`` holds only the
    61-byte header and ``body`` the rest of the batch (for scatter writes without copies).
    """
    if base_offset is not None:
        _Q.pack_into(buf, pos, base_offset)
    if partition_leader_epoch is not None:
        _I.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    if log_append_time is not None:
        attrs = _H.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0] | TIMESTAMP_TYPE_MASK
        _H.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs)
        _Q.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, log_append_time)
        if body is not None:
            c = crc32c(body, crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET : pos + HEADER_SIZE])))
        else:
            length = _I.unpack_from(buf, pos + LENGTH_OFFSET)[0]
            mv = memoryview(buf)
            c = crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length])
        _UI.pack_into(buf, pos + CRC_OFFSET, c)


def recompress_batch(buf, pos: int = 0, *, codec: int, level: int | None = None) -> bytearray:
    """The v2 batch at ``pos`` with its records compressed by ``codec`` instead (broker-side
    ``compression.type``, Kafka's LogValidator rebuilding a batch whose codec is not the topic's).

    The records section of a v2 batch is the same bytes whatever the codec (the codec wraps it
    whole), so the records are decompressed and compressed again, never decoded one by one.
    Every header field stays (base offset, leader epoch, offsets, timestamps and timestamp type,
    producer id, epoch and sequence, transactional and control flags) but the codec bits and the
    batch length; the CRC is recomputed. The caller has validated the batch (CRC checked)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    h = parse_header(mv, pos)
    body = mv[pos + HEADER_SIZE : pos + h.size]
    source = h.attributes & COMPRESSION_MASK
    plain = decompress(source, body) if source != NONE else body
    packed = compress(codec, plain, level) if codec != NONE else plain
    out = bytearray(HEADER_SIZE + len(packed))
    out[:HEADER_SIZE] = mv[pos : pos + HEADER_SIZE]
    out[HEADER_SIZE:] = packed
    _I.pack_into(out, LENGTH_OFFSET, HEADER_SIZE - LOG_OVERHEAD + len(packed))
    _H.pack_into(out, ATTRIBUTES_OFFSET, (h.attributes & ~COMPRESSION_MASK) | (codec & COMPRESSION_MASK))
    _UI.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


# --------------------------------------------------------------------------- compression

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def compress(codec: int, data, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` as Kafka clients read it. ``level``: the codec's level
    (gzip -1 or 1-9, lz4 1-17, zstd -131072-22; snappy has none); None: the client's defaults
    (gzip 6, lz4 cramjam's, zstd 3)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        # xerial framing, as the Java client writes it; every Kafka client reads it.
        parts = [_XERIAL_HEADER]
        mv = memoryview(data)
        for i in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK]))
            parts.append(_I.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        # an LZ4 frame of independent blocks: Kafka's Java reader (KafkaLZ4BlockInputStream) refuses
        # linked blocks ("Dependent block stream is unsupported"), cramjam.lz4.compress's default
        frame = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        frame.compress(data if type(data) is bytes else bytes(data))  # (its compress takes bytes only)
        return bytes(frame.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    raise InvalidRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data) -> bytes:
    try:
        if codec == NONE:
            return bytes(data)
        if codec == GZIP:
            return zlib.decompress(data, 47)
        if codec == SNAPPY:
            if bytes(data[:8]) == _XERIAL_MAGIC:
                mv = memoryview(data)
                pos, n, out = 16, len(mv), []
                while pos < n:
                    size = _I.unpack_from(mv, pos)[0]
                    pos += 4
                    out.append(bytes(cramjam.snappy.decompress_raw(mv[pos : pos + size])))
                    pos += size
                return b"".join(out)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (zlib.error, cramjam.DecompressionError, struct.error) as e:
        raise CorruptRecordError(f"cannot decompress {CODEC_NAMES.get(codec, codec)} data: {e}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


# --------------------------------------------------------------------------- build


def _encode_records(out: bytearray, records: Sequence[Record], base_offset: int, base_ts: int) -> None:
    wv = write_varint
    for i, r in enumerate(records):
        off = r.offset
        delta = i if off < 0 else off - base_offset
        ts = r.timestamp
        body = bytearray(b"\x00")
        wv(body, (ts - base_ts) if ts >= 0 else 0)
        wv(body, delta)
        k = r.key
        if k is None:
            body.append(1)  # zigzag(-1)
        else:
            wv(body, len(k))
            body += k
        v = r.value
        if v is None:
            body.append(1)
        else:
            wv(body, len(v))
            body += v
        hs = r.headers
        wv(body, len(hs))
        for hk, hv in hs:
            hkb = hk.encode()
            wv(body, len(hkb))
            body += hkb
            if hv is None:
                body.append(1)
            else:
                wv(body, len(hv))
                body += hv
        wv(out, len(body))
        out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: int = NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode one RecordBatch v2.

    A record's ``offset`` is absolute (delta = offset - base_offset); -1 means "its index
    in the list". ``last_offset_delta`` defaults to the last record's delta (compaction
    passes the original one to keep a batch's offset range). ``delete_horizon_ms`` sets
    attribute bit 6 and stores the horizon as baseTimestamp (KIP-534).
    """
    if delete_horizon_ms is not None and delete_horizon_ms >= 0:
        base_ts = delete_horizon_ms
    else:
        base_ts = NO_TIMESTAMP
        for r in records:
            if r.timestamp >= 0:
                base_ts = r.timestamp
                break
        delete_horizon_ms = None
    encoded = bytearray()
    _encode_records(encoded, records, base_offset, base_ts if base_ts >= 0 else 0)
    body: bytes | bytearray = compress(compression, encoded) if compression != NONE else encoded
    if last_offset_delta is None:
        if records:
            lr = records[-1]
            last_offset_delta = (len(records) - 1) if lr.offset < 0 else lr.offset - base_offset
        else:
            last_offset_delta = 0
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    attrs = compression & COMPRESSION_MASK
    if timestamp_type:
        attrs |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attrs |= TRANSACTIONAL_MASK
    if is_control:
        attrs |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attrs |= DELETE_HORIZON_MASK
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(body),
        partition_leader_epoch,
        2,
        0,
        attrs,
        last_offset_delta,
        base_ts,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out += body
    _UI.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker: control batch with one record, key = (version 0, type)."""
    key = _HH.pack(0, control_type)
    value = _H.pack(0) + _I.pack(coordinator_epoch)
    return build_batch(
        [Record(base_offset, timestamp, key, value)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


# --------------------------------------------------------------------------- decode


def _records_body(buf, h: BatchHeader):
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    body = mv[h.position + HEADER_SIZE : h.position + h.size]
    codec = h.attributes & COMPRESSION_MASK
    if codec != NONE:
        return decompress(codec, body)
    return bytes(body)


def decode_records(batch_bytes, pos: int = 0) -> list[Record]:
    """Decode the records of the v2 batch at ``pos`` (decompressing when needed)."""
    h = parse_header(batch_bytes, pos)
    if h.magic != 2:
        raise CorruptRecordError(f"unsupported magic {h.magic}")
    if pos + h.size > len(batch_bytes):
        raise CorruptRecordError("batch truncated")
    b = _records_body(batch_bytes, h)
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append = h.attributes & TIMESTAMP_TYPE_MASK
    max_ts = h.max_timestamp
    rv = read_varint
    out: list[Record] = []
    p = 0
    try:
        for _ in range(h.record_count):
            length, p = rv(b, p)
            end = p + length
            p += 1  # attributes
            ts_delta, p = rv(b, p)
            off_delta, p = rv(b, p)
            kl, p = rv(b, p)
            if kl >= 0:
                key = b[p : p + kl]
                p += kl
            else:
                key = None
            vl, p = rv(b, p)
            if vl >= 0:
                value = b[p : p + vl]
                p += vl
            else:
                value = None
            nh, p = rv(b, p)
            headers = []
            for _ in range(nh):
                hkl, p = rv(b, p)
                hk = b[p : p + hkl].decode()
                p += hkl
                hvl, p = rv(b, p)
                if hvl >= 0:
                    hv = b[p : p + hvl]
                    p += hvl
                else:
                    hv = None
                headers.append((hk, hv))
            if p != end:
                raise CorruptRecordError(f"record length mismatch in batch at offset {base_offset}")
            out.append(
                Record(base_offset + off_delta, max_ts if log_append else base_ts + ts_delta, key, value, headers)
            )
    except (IndexError, UnicodeDecodeError, VarintError) as e:
        raise CorruptRecordError(f"malformed record in batch at offset {base_offset}: {e}") from None
    return out


def decode_control_record(batch_bytes, pos: int = 0) -> tuple[int, int] | None:
    """(version, type) of a control batch's first record; None when it holds no records."""
    recs = decode_records(batch_bytes, pos)
    if not recs or recs[0].key is None or len(recs[0].key) < 4:
        return None
    return _HH.unpack_from(recs[0].key, 0)


def decode_message_set(buf, *, _wrapper: tuple[int, int, int] | None = None) -> list[Record]:
    """Decode a legacy MessageSet (magic 0 or 1), including compressed wrapper messages.

    A trailing partial message (as in truncated fetch responses) is ignored.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    n = len(mv)
    pos = 0
    out: list[Record] = []
    while pos + 12 <= n:
        offset, size = struct.unpack_from(">qi", mv, pos)
        if size < 14 or pos + 12 + size > n:
            break
        _, _, stored_crc, magic, attrs = _LEGACY_V0.unpack_from(mv, pos)
        if zlib.crc32(mv[pos + 16 : pos + 12 + size]) != stored_crc:
            raise CorruptRecordError(f"legacy message at offset {offset}: CRC mismatch")
        p = pos + 18
        if magic == 1:
            ts = _TS.unpack_from(mv, p)[0]
            p += 8
        elif magic == 0:
            ts = NO_TIMESTAMP
        else:
            raise CorruptRecordError(f"unsupported legacy magic {magic}")
        kl = _I.unpack_from(mv, p)[0]
        p += 4
        key = bytes(mv[p : p + kl]) if kl >= 0 else None
        p += max(kl, 0)
        vl = _I.unpack_from(mv, p)[0]
        p += 4
        value = bytes(mv[p : p + vl]) if vl >= 0 else None
        codec = attrs & 0x07
        if codec != NONE:
            inner = decode_message_set(decompress(codec, value or b""))
            if magic == 1 and inner:
                # v1 inner offsets are relative; the wrapper carries the last absolute offset.
                last_rel = inner[-1].offset
                log_append = attrs & TIMESTAMP_TYPE_MASK
                inner = [
                    r._replace(offset=offset - last_rel + r.offset, timestamp=ts if log_append else r.timestamp)
                    for r in inner
                ]
            out.extend(inner)
        else:
            out.append(Record(offset, ts, key, value, []))
        pos += 12 + size
    return out


def decode_any(buf) -> list[Record]:
    """Decode every record in a buffer mixing v2 batches and legacy message sets.

    Stops silently at a trailing partial batch/message (fetch responses may end in one).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    n = len(mv)
    pos = 0
    out: list[Record] = []
    while pos + 17 <= n:
        size = _I.unpack_from(mv, pos + 8)[0] + LOG_OVERHEAD
        if pos + size > n:
            break
        magic = mv[pos + MAGIC_OFFSET]
        if magic == 2:
            validate_batch(mv, pos)
            out.extend(decode_records(mv, pos))
        else:
            out.extend(decode_message_set(mv[pos : pos + size]))
        pos += size
    return out
