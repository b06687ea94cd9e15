"""RecordBatch v2 for the client hot path: incremental batch building and fast decoding.

`odradek.protocol.records` is the reference codec (and handles legacy MessageSets); this
module trades generality for speed where the client spends its time:

* `BatchBuilder.append` encodes one record straight into the batch's buffer;
* `decode_fetched` turns a partition's fetched bytes into `ConsumerRecord`s, skipping
  control batches (transaction markers), records before the fetch position and, under
  read_committed, the batches `aborted_batches` names;
* `decode_fetched_columns` does the same into column buffers (`RecordColumns`), which
  the Spark reader hands to Arrow without a Python object per record.

Each has two implementations with identical results: the C extension `_crecords`
(built by setup.py when a compiler is present) and the pure-Python code below, used when
the extension is missing. ``IMPLEMENTATION`` says which one is active;
`set_implementation` switches (the tests run both); the environment variable
``ODRADEK_RECORD_CODEC=python`` picks the fallback at import. Decompression stays in Python
(`protocol.records.decompress`: cramjam / zlib); C only parses records.

Malformed input (truncated records, bad varints, lengths past the end of a record or
batch, records whose fields do not fill their declared length) raises
`CorruptRecordError`. A trailing partial batch is not an error: fetches may end in one.
"""

from __future__ import annotations

import gc
import logging
import os
import struct
from typing import NamedTuple

from odradek.protocol import records as R
from odradek.protocol.varint import write_uvarint

log = logging.getLogger(__name__)

crc32c = R.crc32c
HEADER = R.HEADER
HEADER_SIZE = R.HEADER_SIZE
MIN_BATCH_LENGTH = HEADER_SIZE - 12  # the length field counts from the partition leader epoch on
MIN_ENTRY_LENGTH = 14  # the smallest legacy message (v0: crc, magic, attributes, key, value)
_UI = struct.Struct(">I")
_Q_I = struct.Struct(">qi")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_M32, _M64 = (1 << 32) - 1, (1 << 64) - 1

# zigzag varints, indexed by value + 1 (so -1, the null length, is index 0)
_TABLE_MAX = 1 << 15


def _zz_bytes(v: int) -> bytes:
    return write_uvarint((v << 1) ^ (v >> 63))


_ZZ = [_zz_bytes(v) for v in range(-1, _TABLE_MAX)]


def zz(v: int) -> bytes:
    if -1 <= v < _TABLE_MAX:
        return _ZZ[v + 1]
    return _zz_bytes(v)


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple  # of (str, bytes | None) pairs; () when none


class CorruptRecordError(R.CorruptRecordError):
    pass


def _decompress(codec: int, data) -> bytes:
    try:
        return R.decompress(codec, data)
    except CorruptRecordError:
        raise
    except R.CorruptRecordError as e:
        raise CorruptRecordError(str(e)) from None


def _build(
    b,
    *,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """The finished RecordBatch v2 of a builder (either implementation)."""
    body = b.buf
    if compression:
        body = R.compress(compression, body)
    attrs = compression & 0x07
    if transactional:
        attrs |= 0x10
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        0,
        HEADER_SIZE - 12 + len(body),
        -1,
        2,
        0,
        attrs,
        b.count - 1,
        b.base_ts,
        b.max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        b.count,
    )
    out += body
    _UI.pack_into(out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


class _PyBatchBuilder:
    """Accumulates records of one future RecordBatch (uncompressed until `build`)."""

    __slots__ = ("buf", "count", "base_ts", "max_ts", "limit")

    def __init__(self, limit: int) -> None:
        self.buf = bytearray()
        self.count = 0
        self.base_ts = -1
        self.max_ts = -1
        self.limit = limit

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self.buf)

    def append(self, ts: int, key: bytes | None, value: bytes | None, headers) -> bool:
        """Add one record; False when it does not fit (the batch is not empty and would pass `limit`)."""
        count = self.count
        if count == 0:
            self.base_ts = ts
        if headers:
            headers = _encode_headers(headers)
        if not _py_append_record(self.buf, count, ts - self.base_ts, key, value, headers or None, self.limit):
            return False
        self.count = count + 1
        if ts > self.max_ts:
            self.max_ts = ts
        return True

    build = _build


def BatchBuilder(limit: int):
    """A new open batch of at most `limit` bytes (unless its first record alone is larger):
    ``append(ts, key, value, headers) -> bool``, ``size``, ``count`` and ``build(...)``."""
    return _builder_class(limit)


def _encode_headers(headers) -> list[tuple[bytes, bytes | None]]:
    """(str | bytes, str | bytes | None) pairs -> (bytes, bytes | None), what both encoders take."""
    out = []
    for hk, hv in headers:
        hk = hk.encode() if isinstance(hk, str) else bytes(hk)
        if hv is not None:
            hv = hv.encode() if isinstance(hv, str) else bytes(hv)
        out.append((hk, hv))
    return out


# --------------------------------------------------------------------------- pure Python
def _py_append_record(buf: bytearray, count: int, tsd: int, key, value, headers, limit: int) -> bool:
    """Encode one record at the end of `buf` (see _crecords.c append_into)."""
    T = _ZZ
    if key is None:
        kpart = b"\x01"
    else:
        klen = len(key)
        kpart = (T[klen + 1] if klen < _TABLE_MAX else _zz_bytes(klen)) + key
    if value is None:
        vpart = b"\x01"
    else:
        vlen = len(value)
        vpart = (T[vlen + 1] if vlen < _TABLE_MAX else _zz_bytes(vlen)) + value
    if headers:
        hp = [zz(len(headers))]
        for hk, hv in headers:
            hp.append(zz(len(hk)))
            hp.append(hk)
            if hv is None:
                hp.append(b"\x01")
            else:
                hp.append(zz(len(hv)))
                hp.append(hv)
        hpart = b"".join(hp)
    else:
        hpart = b"\x00"
    body = b"".join(
        (
            b"\x00",
            T[tsd + 1] if -1 <= tsd < _TABLE_MAX else _zz_bytes(tsd),
            T[count + 1] if count < _TABLE_MAX else _zz_bytes(count),
            kpart,
            vpart,
            hpart,
        )
    )
    n = len(body)
    if count and HEADER_SIZE + len(buf) + n + 5 > limit:
        return False
    buf += T[n + 1] if n < _TABLE_MAX else _zz_bytes(n)
    buf += body
    return True


class _Bad(Exception):
    """A malformed record inside the pure-Python walk (turned into CorruptRecordError)."""


def _varint_rest(b, p: int, lim: int, x: int, maxbytes: int) -> tuple[int, int]:
    """Finish a varint whose first byte `x` (>= 0x80) was just read; at most `maxbytes` bytes
    (5: varint, keeps 32 bits; 10: varlong, keeps 64 bits). Returns (value, position)."""
    v = x & 0x7F
    shift = 7
    for _ in range(maxbytes - 1):
        if p >= lim:
            raise _Bad("varint past the end")
        x = b[p]
        p += 1
        v |= (x & 0x7F) << shift
        if x < 0x80:
            v &= _M32 if maxbytes == 5 else _M64
            return (v >> 1) ^ -(v & 1), p
        shift += 7
    raise _Bad("varint too long")


def _py_records(
    out, topic, partition, b, p, lim, count, base_offset, base_ts, max_ts, log_append, start_offset, keep_headers=True
):
    """Decode `count` records from b[p:lim] (see _crecords.c decode_records).

    Varints of one byte are decoded inline. Reads are not bounded by the record's end one
    by one; instead each record must end exactly where its length says, which catches
    every field that ran past it (positions only grow)."""
    append = out.append
    new = ConsumerRecord
    tnew = tuple.__new__
    ts_type = 1 if log_append else 0
    for _ in range(count):
        # record length (bounded by the batch end)
        if p >= lim:
            raise _Bad("record length past the end")
        x = b[p]
        p += 1
        n, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, lim, x, 5)
        if n < 0 or n > lim - p:
            raise _Bad("record length past the end of the batch")
        rend = p + n
        p += 1  # attributes
        x = b[p]
        p += 1
        tsd, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, rend, x, 10)
        x = b[p]
        p += 1
        od, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, rend, x, 5)
        x = b[p]
        p += 1
        kl, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, rend, x, 5)
        if kl >= 0:
            key = b[p : p + kl]
            p += kl
        elif kl == -1:
            key = None
        else:
            raise _Bad("bad key length")
        x = b[p]
        p += 1
        vl, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, rend, x, 5)
        if vl >= 0:
            value = b[p : p + vl]
            p += vl
        elif vl == -1:
            value = None
        else:
            raise _Bad("bad value length")
        x = b[p]
        p += 1
        if x == 0:
            headers = ()
        else:
            nh, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, rend, x, 5)
            if nh < 0:
                raise _Bad("bad header count")
            hl = []
            for _i in range(nh):
                x = b[p]
                p += 1
                hkl, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, rend, x, 5)
                if hkl < 0 or hkl > rend - p:
                    raise _Bad("bad header key")
                hk = b[p : p + hkl]  # decoded below, once the record is known to be wanted (as _crecords.c)
                p += hkl
                x = b[p]
                p += 1
                hvl, p = ((x >> 1) ^ -(x & 1), p) if x < 0x80 else _varint_rest(b, p, rend, x, 5)
                if hvl < -1 or hvl > rend - p:
                    raise _Bad("bad header value")
                if hvl >= 0:
                    hv = bytes(b[p : p + hvl])
                    p += hvl
                else:
                    hv = None
                hl.append((hk, hv))
            headers = tuple(hl)
        if p != rend:
            raise _Bad("record length does not match its fields")
        off = base_offset + od
        ts = max_ts if log_append else base_ts + tsd
        if not (_I64_MIN <= off <= _I64_MAX and _I64_MIN <= ts <= _I64_MAX):
            raise _Bad("offset or timestamp out of range")
        if off >= start_offset:
            if headers:
                headers = tuple([(bytes(k).decode(), v) for k, v in headers])
            append(tnew(new, (topic, partition, off, ts, ts_type, key, value, headers if keep_headers else ())))
    return p


def _py_decode(out, topic, partition, data, pos, start_offset, next_offset, check_crcs, aborted):
    """Append the records of v2 batches at data[pos:] to `out` (see _crecords.c walk).
    Returns (pos, next_offset, legacy): legacy when it stopped at a MessageSet v0/v1 batch."""
    mv = memoryview(data)
    n = len(data)
    while pos + 17 <= n:
        base_offset, length = _Q_I.unpack_from(data, pos)
        where = f"{topic}-{partition}"
        if length < MIN_ENTRY_LENGTH:
            raise CorruptRecordError(f"{where}: batch length too small in batch at offset {base_offset}")
        end = pos + 12 + length
        if end > n:
            break
        if data[pos + 16] != 2:
            return pos, next_offset, True
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"{where}: batch length too small in batch at offset {base_offset}")
        h = HEADER.unpack_from(data, pos)
        # (base_offset, length, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count)
        attrs = h[5]
        last_offset = base_offset + h[6]
        if not _I64_MIN <= last_offset + 1 <= _I64_MAX:
            raise CorruptRecordError(f"{where}: last offset out of range in batch at offset {base_offset}")
        if last_offset < start_offset:
            pos = end
            continue
        if check_crcs and crc32c(mv[pos + 21 : end]) != h[4]:
            raise CorruptRecordError(f"{where}: CRC mismatch in batch at offset {base_offset}")
        next_offset = last_offset + 1
        if attrs & 0x20:  # control batch (transaction marker)
            pos = end
            continue
        if aborted is not None and attrs & 0x10 and base_offset in aborted:
            pos = end
            continue
        count = h[12]
        if count < 0:
            raise CorruptRecordError(f"{where}: negative record count in batch at offset {base_offset}")
        codec = attrs & 0x07
        if codec:
            b = _decompress(codec, mv[pos + HEADER_SIZE : end])
            p, lim = 0, len(b)
        else:
            b, p, lim = data, pos + HEADER_SIZE, end
        try:
            _py_records(out, topic, partition, b, p, lim, count, base_offset, h[7], h[8], attrs & 0x08, start_offset)
        except (_Bad, IndexError, UnicodeDecodeError) as e:
            raise CorruptRecordError(f"{where}: {e} in batch at offset {base_offset}") from None
        pos = end
    return pos, next_offset, False


# --------------------------------------------------------------------------- columns
class RecordColumns:
    """Records of one partition as column buffers (bytes, native byte order), laid out as
    Arrow wants them: `offsets` and `timestamps` (ms) int64, `timestamp_types` int32, and
    for keys and values an LSB-first validity bitmap (None when nothing is null), int32
    offsets (count + 1) and the concatenated data. Headers are not kept."""

    __slots__ = (
        "topic",
        "partition",
        "count",
        "offsets",
        "timestamps",
        "timestamp_types",
        "key_validity",
        "key_offsets",
        "key_data",
        "value_validity",
        "value_offsets",
        "value_data",
    )

    def __init__(
        self,
        topic,
        partition,
        count,
        offsets,
        timestamps,
        timestamp_types,
        key_validity,
        key_offsets,
        key_data,
        value_validity,
        value_offsets,
        value_data,
    ) -> None:
        self.topic, self.partition, self.count = topic, partition, count
        self.offsets, self.timestamps, self.timestamp_types = offsets, timestamps, timestamp_types
        self.key_validity, self.key_offsets, self.key_data = key_validity, key_offsets, key_data
        self.value_validity, self.value_offsets, self.value_data = value_validity, value_offsets, value_data

    def __len__(self) -> int:
        return self.count

    def offset_list(self) -> memoryview:
        return memoryview(self.offsets).cast("q")

    @classmethod
    def from_records(cls, topic: str, partition: int, recs) -> RecordColumns:
        """The pure-Python way (and the way for legacy MessageSets)."""
        import array

        def binary(values):
            validity = bytearray((len(values) + 7) // 8)
            offs = array.array("i", [0])
            chunks = []
            end = 0
            nulls = 0
            for i, v in enumerate(values):
                if v is None:
                    nulls += 1
                else:
                    validity[i >> 3] |= 1 << (i & 7)
                    chunks.append(v)
                    end += len(v)
                offs.append(end)
            return (bytes(validity) if nulls else None), offs.tobytes(), b"".join(chunks)

        k = binary([r.key for r in recs])
        v = binary([r.value for r in recs])
        return cls(
            topic,
            partition,
            len(recs),
            array.array("q", [r.offset for r in recs]).tobytes(),
            array.array("q", [r.timestamp for r in recs]).tobytes(),
            array.array("i", [r.timestamp_type for r in recs]).tobytes(),
            *k,
            *v,
        )


def _c_decode_columns(topic, partition, data, start_offset, check_crcs, aborted):
    """(RecordColumns or None, next offset, legacy) with the C walk."""
    pos, nxt, legacy, cols = _native.decode_columns(
        topic, partition, data, 0, start_offset, start_offset, check_crcs, aborted
    )
    if legacy:
        return None, nxt, True
    (count, offsets, timestamps, types, kvalid, koffs, kdata, knulls, vvalid, voffs, vdata, vnulls) = cols
    if not count:
        return None, nxt, False
    return (
        RecordColumns(
            topic,
            partition,
            count,
            offsets,
            timestamps,
            types,
            kvalid if knulls else None,
            koffs,
            kdata,
            vvalid if vnulls else None,
            voffs,
            vdata,
        ),
        nxt,
        False,
    )


# --------------------------------------------------------------------------- entry points
def _legacy(topic, partition, mv, pos, n, start_offset, out, next_offset):
    """Decode the MessageSet v0/v1 entry at `pos` (always in Python); returns (pos, next_offset)."""
    length = _Q_I.unpack_from(mv, pos)[1]
    end = pos + 12 + length
    try:
        for r in R.decode_message_set(mv[pos:end]):
            if r.offset >= start_offset:
                out.append(ConsumerRecord(topic, partition, r.offset, r.timestamp, 0, r.key, r.value, ()))
                next_offset = r.offset + 1
    except CorruptRecordError:
        raise
    except (R.CorruptRecordError, ValueError, IndexError, struct.error) as e:
        raise CorruptRecordError(f"{topic}-{partition}: malformed message set at {pos}: {e}") from None
    return end, next_offset


_I32 = struct.Struct(">i")


def scan_next_offset(data, start_offset: int) -> int:
    """The offset after the last complete batch (or legacy message) in fetched bytes,
    from the batch headers alone: what the consumer fetches next, known before decoding.

    Only the framing is read (base offset, length, magic, last offset delta); `decode_fetched`
    validates everything and its next offset wins if the two ever differ."""
    n = len(data)
    pos = 0
    nxt = start_offset
    while pos + 17 <= n:
        base, length = _Q_I.unpack_from(data, pos)
        end = pos + 12 + length
        if length < 0 or end > n:
            break
        if data[pos + 16] >= 2:
            if pos + 27 > end:
                break
            last = base + _I32.unpack_from(data, pos + 23)[0]
        else:
            last = base  # a legacy message (or compressed wrapper): its offset is the last inner one
        if last + 1 > nxt:
            nxt = last + 1
        pos = end
    return nxt


_Q = struct.Struct(">q")
_H = struct.Struct(">h")


def aborted_batches(data, aborted_transactions) -> set[int]:
    """Base offsets of the batches in fetched bytes that belong to aborted transactions:
    Kafka's read_committed filter (the Java consumer's CompletedFetch), from the batch
    headers and the Fetch response's aborted transactions ((producer id, first offset) pairs).

    Walking the batches in offset order, a producer id becomes aborted once the batch reached
    has a last offset at or past that transaction's first offset; its transactional batches
    are then skipped until its ABORT marker (a control batch whose record's type is 0). A
    COMMIT marker or another producer's batches are unaffected. Only the framing and the
    markers' first record are read; `decode_fetched` validates the rest."""
    pending = sorted(((int(first), int(pid)) for pid, first in aborted_transactions), reverse=True)
    active: set[int] = set()
    skip: set[int] = set()
    n = len(data)
    pos = 0
    while pos + 61 <= n:
        base, length = _Q_I.unpack_from(data, pos)
        end = pos + 12 + length
        if length < 0 or end > n:
            break
        if data[pos + 16] != 2 or length < MIN_BATCH_LENGTH:
            pos = end
            continue
        attrs = _H.unpack_from(data, pos + 21)[0]
        last = base + _I32.unpack_from(data, pos + 23)[0]
        pid = _Q.unpack_from(data, pos + 43)[0]
        if pid >= 0:
            while pending and pending[-1][0] <= last:
                active.add(pending.pop()[1])
            if attrs & 0x20:
                if pid in active and _is_abort_marker(data, pos, end, attrs):
                    active.discard(pid)
            elif attrs & 0x10 and pid in active:
                skip.add(base)
        pos = end
    return skip


def _is_abort_marker(data, pos: int, end: int, attrs: int) -> bool:
    """Whether a control batch's first record is an ABORT marker (key: version int16, type int16)."""
    try:
        body = bytes(data[pos + HEADER_SIZE : end])
        if attrs & 0x07:
            body = _decompress(attrs & 0x07, memoryview(body))
        p = 0
        for _ in range(4):  # length, then (after the attributes byte) timestamp delta, offset delta, key length
            b = body[p]
            while b & 0x80:
                p += 1
                b = body[p]
            p += 1
            if _ == 0:
                p += 1  # attributes
        return len(body) >= p + 4 and _H.unpack_from(body, p + 2)[0] == 0
    except (IndexError, ValueError, CorruptRecordError):
        return False


def decode_fetched(
    topic: str, partition: int, data: bytes, start_offset: int, *, check_crcs: bool = True, aborted: set | None = None
) -> tuple[list[ConsumerRecord], int]:
    """Records at or after `start_offset` in a fetched partition's bytes, and the next offset.

    `aborted`: base offsets of transactional batches to skip (`aborted_batches`; read_committed).

    A trailing partial batch (fetches may end in one) is ignored. `next offset` is past the
    last complete batch, so control batches and compacted gaps advance the position too.

    The cyclic garbage collector is paused while decoding: the thousands of records (tuples
    and header lists, none of them cyclic) would otherwise trigger repeated collections
    that scan the growing result list (measured: about half the decode time).
    """
    if not gc.isenabled():
        return _decode_fetched(topic, partition, data, start_offset, check_crcs, aborted)
    gc.disable()
    try:
        return _decode_fetched(topic, partition, data, start_offset, check_crcs, aborted)
    finally:
        gc.enable()


def _decode_fetched(topic, partition, data, start_offset, check_crcs, aborted):
    if _decode is _py_decode and type(data) is not bytes:
        data = bytes(data)  # the Python decoder slices: records must not be views of a reused buffer
    out: list[ConsumerRecord] = []
    pos, nxt, legacy = _decode(out, topic, partition, data, 0, start_offset, start_offset, check_crcs, aborted)
    if legacy:
        mv = memoryview(data)
        n = len(data)
        while legacy:
            pos, nxt = _legacy(topic, partition, mv, pos, n, start_offset, out, nxt)
            pos, nxt, legacy = _decode(out, topic, partition, data, pos, start_offset, nxt, check_crcs, aborted)
    return out, nxt


def decode_fetched_columns(
    topic: str, partition: int, data: bytes, start_offset: int, *, check_crcs: bool = True, aborted: set | None = None
) -> tuple[RecordColumns | None, int]:
    """Like `decode_fetched`, as one `RecordColumns` (None when no record is at or after
    `start_offset`), and the next offset."""
    if _native is not None and _decode is _native.decode:
        cols, nxt, legacy = _c_decode_columns(topic, partition, data, start_offset, check_crcs, aborted)
        if not legacy:
            return cols, nxt
    recs, nxt = decode_fetched(topic, partition, data, start_offset, check_crcs=check_crcs, aborted=aborted)
    return (RecordColumns.from_records(topic, partition, recs) if recs else None), nxt


# --------------------------------------------------------------------------- implementation choice
try:
    from . import _crecords as _native
except ImportError:  # not compiled (no compiler at install time, or ODRADEK_PURE_PYTHON=1)
    _native = None
else:
    _native.configure(ConsumerRecord, CorruptRecordError, crc32c, _decompress, _encode_headers)

    class _CBatchBuilder(_native.Builder):
        """The C builder (one C call per append) with the shared `build`."""

        __slots__ = ()
        build = _build


IMPLEMENTATIONS = ("c", "python") if _native is not None else ("python",)
IMPLEMENTATION = ""
_decode = _py_decode
_builder_class: type = _PyBatchBuilder


def set_implementation(name: str) -> None:
    """Use the C codec ("c") or the pure-Python one ("python")."""
    global IMPLEMENTATION, _decode, _builder_class
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"record codec {name!r} is not available (have {', '.join(IMPLEMENTATIONS)})")
    IMPLEMENTATION = name
    _decode = _native.decode if name == "c" else _py_decode
    _builder_class = _CBatchBuilder if name == "c" else _PyBatchBuilder


set_implementation(os.environ.get("ODRADEK_RECORD_CODEC") or IMPLEMENTATIONS[0])
log.debug("record codec: %s", "C extension (_crecords)" if IMPLEMENTATION == "c" else "pure Python (no _crecords)")
