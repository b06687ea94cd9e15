"""RecordBatch v2 for the client hot path: incremental batch building and fast decoding.

`odradek.protocol.records` is the reference codec (and handles legacy MessageSets); this
module trades generality for speed where the client spends its time:

* `BatchBuilder.append` encodes one record straight into the batch's buffer, with
  zigzag varints looked up in a precomputed table;
* `decode_fetched` turns a partition's fetched bytes into `ConsumerRecord`s with the
  one-byte varint case inlined, skipping control batches and records before the
  fetch position.
"""

from __future__ import annotations

import gc
import struct
from typing import NamedTuple

from odradek.protocol import records as R

crc32c = R.crc32c
HEADER = R.HEADER
HEADER_SIZE = R.HEADER_SIZE
_UI = struct.Struct(">I")
_Q_I = struct.Struct(">qi")

# zigzag varints, indexed by value + 1 (so -1, the null length, is index 0)
_TABLE_MAX = 1 << 15


def _zz_bytes(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


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
    headers: list


class BatchBuilder:
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
        tsd = ts - self.base_ts
        T = _ZZ
        if key is None:
            kpart = b"\x01"
            klen = 0
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
                hkb = hk.encode() if isinstance(hk, str) else bytes(hk)
                hp.append(zz(len(hkb)))
                hp.append(hkb)
                if hv is None:
                    hp.append(b"\x01")
                else:
                    if isinstance(hv, str):
                        hv = hv.encode()
                    hp.append(zz(len(hv)))
                    hp.append(hv)
            hpart = b"".join(hp)
        else:
            hpart = b"\x00"
        body = b"".join((b"\x00", T[tsd + 1] if -1 <= tsd < _TABLE_MAX else _zz_bytes(tsd),
                         T[count + 1] if count < _TABLE_MAX else _zz_bytes(count), kpart, vpart, hpart))
        n = len(body)
        buf = self.buf
        if count and HEADER_SIZE + len(buf) + n + 5 > self.limit:
            return False
        buf += T[n + 1] if n < _TABLE_MAX else _zz_bytes(n)
        buf += body
        self.count = count + 1
        if ts > self.max_ts:
            self.max_ts = ts
        return True

    def build(self, *, compression: int = 0, producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1, transactional: bool = False) -> bytes:
        body = self.buf
        if compression:
            body = R.compress(compression, body)
        attrs = compression & 0x07
        if transactional:
            attrs |= 0x10
        out = bytearray(HEADER_SIZE)
        HEADER.pack_into(out, 0, 0, HEADER_SIZE - 12 + len(body), -1, 2, 0, attrs, self.count - 1,
                         self.base_ts, self.max_ts, producer_id, producer_epoch, base_sequence, self.count)
        out += body
        _UI.pack_into(out, 17, crc32c(memoryview(out)[21:]))
        return bytes(out)


class CorruptRecordError(R.CorruptRecordError):
    pass


def decode_fetched(topic: str, partition: int, data: bytes, start_offset: int, *,
                   check_crcs: bool = True, aborted: dict | None = None) -> tuple[list[ConsumerRecord], int]:
    """Records at or after `start_offset` in a fetched partition's bytes, and the next offset.

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
    out: list[ConsumerRecord] = []
    append = out.append
    mv = memoryview(data)
    n = len(data)
    pos = 0
    next_offset = start_offset
    new = ConsumerRecord
    tnew = tuple.__new__
    while pos + 17 <= n:
        base_offset, length = _Q_I.unpack_from(data, pos)
        end = pos + 12 + length
        if end > n:
            break
        magic = data[pos + 16]
        if magic != 2:
            for r in R.decode_message_set(mv[pos:end]):
                if r.offset >= start_offset:
                    append(new(topic, partition, r.offset, r.timestamp, 0, r.key, r.value, []))
                    next_offset = r.offset + 1
            pos = end
            continue
        h = HEADER.unpack_from(data, pos)
        # (base_offset, length, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count)
        attrs = h[5]
        last_offset = base_offset + h[6]
        if last_offset < start_offset:
            pos = end
            continue
        if check_crcs and crc32c(mv[pos + 21:end]) != h[4]:
            raise CorruptRecordError(f"{topic}-{partition}: CRC mismatch in batch at offset {base_offset}")
        if attrs & 0x20:  # control batch (transaction marker)
            pos = end
            next_offset = last_offset + 1
            continue
        if aborted and attrs & 0x10 and h[9] in aborted:
            pos = end
            next_offset = last_offset + 1
            continue
        codec = attrs & 0x07
        if codec:
            b = R.decompress(codec, mv[pos + HEADER_SIZE:end])
            p = 0
        else:
            b = data
            p = pos + HEADER_SIZE
        base_ts = h[7]
        log_append = attrs & 0x08
        ts_type = 1 if log_append else 0
        max_ts = h[8]
        try:
            for _ in range(h[12]):
                # record length
                x = b[p]
                p += 1
                if x >= 0x80:
                    shift = 7
                    while x & 0x80:
                        x = b[p]
                        p += 1
                        shift += 7
                p += 1  # attributes
                # timestamp delta
                x = b[p]
                p += 1
                if x < 0x80:
                    tsd = (x >> 1) ^ -(x & 1)
                else:
                    v = x & 0x7F
                    shift = 7
                    while True:
                        x = b[p]
                        p += 1
                        v |= (x & 0x7F) << shift
                        if x < 0x80:
                            break
                        shift += 7
                    tsd = (v >> 1) ^ -(v & 1)
                # offset delta
                x = b[p]
                p += 1
                if x < 0x80:
                    od = (x >> 1) ^ -(x & 1)
                else:
                    v = x & 0x7F
                    shift = 7
                    while True:
                        x = b[p]
                        p += 1
                        v |= (x & 0x7F) << shift
                        if x < 0x80:
                            break
                        shift += 7
                    od = (v >> 1) ^ -(v & 1)
                # key
                x = b[p]
                p += 1
                if x < 0x80:
                    kl = (x >> 1) ^ -(x & 1)
                else:
                    v = x & 0x7F
                    shift = 7
                    while True:
                        x = b[p]
                        p += 1
                        v |= (x & 0x7F) << shift
                        if x < 0x80:
                            break
                        shift += 7
                    kl = (v >> 1) ^ -(v & 1)
                if kl >= 0:
                    key = b[p:p + kl]
                    p += kl
                else:
                    key = None
                # value
                x = b[p]
                p += 1
                if x < 0x80:
                    vl = (x >> 1) ^ -(x & 1)
                else:
                    v = x & 0x7F
                    shift = 7
                    while True:
                        x = b[p]
                        p += 1
                        v |= (x & 0x7F) << shift
                        if x < 0x80:
                            break
                        shift += 7
                    vl = (v >> 1) ^ -(v & 1)
                if vl >= 0:
                    value = b[p:p + vl]
                    p += vl
                else:
                    value = None
                # headers
                x = b[p]
                p += 1
                if x == 0:
                    headers = []
                else:
                    if x >= 0x80:
                        p -= 1
                        x, p = R._read_varint(b, p)
                        nh = x
                    else:
                        nh = (x >> 1) ^ -(x & 1)
                    headers = []
                    for _i in range(nh):
                        hkl, p = R._read_varint(b, p)
                        hk = bytes(b[p:p + hkl]).decode()
                        p += hkl
                        hvl, p = R._read_varint(b, p)
                        if hvl >= 0:
                            hv = bytes(b[p:p + hvl])
                            p += hvl
                        else:
                            hv = None
                        headers.append((hk, hv))
                off = base_offset + od
                if off >= start_offset:
                    append(tnew(new, (topic, partition, off, max_ts if log_append else base_ts + tsd, ts_type,
                                      key, value, headers)))
        except (IndexError, UnicodeDecodeError) as e:
            raise CorruptRecordError(f"{topic}-{partition}: malformed record in batch at {base_offset}: {e}") from None
        next_offset = last_offset + 1
        pos = end
    return out, next_offset
