"""What the coordinators' record formats share: one reader of Kafka's version-prefixed
record schemas, the error for bytes it cannot read, and Kafka's partitioning of coordinator
keys.

Keys and values of `__consumer_offsets` (group/records.py) and `__transaction_state`
(txn/records.py) are Kafka's generated schemas, each prefixed by an int16 version; versions
marked flexible use compact lengths (unsigned varints, protocol/varint.py) and tagged fields.
Pure functions over bytes; no I/O.
"""

from __future__ import annotations

import struct

from odradek.protocol.varint import VarintError, read_uvarint

__all__ = ["RecordFormatError", "Reader", "java_string_hashcode", "partition_for"]

_b = struct.Struct(">b")
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value of a coordinator's topic that cannot be read."""


class Reader:
    """Reads one key or value. `flexible`: compact strings, bytes and arrays, tagged fields
    (set it once the version says so)."""

    __slots__ = ("data", "pos", "flexible")

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated record")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def i8(self) -> int:
        return _b.unpack(self._take(1))[0]

    def i16(self) -> int:
        return _H.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _Q.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.data, self.pos)
        except VarintError as e:
            raise RecordFormatError(str(e)) from None
        return value

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(str(e)) from None

    def required_string(self) -> str:
        s = self.string()
        if s is None:
            raise RecordFormatError("null where a string is required")
        return s

    def bytes_(self) -> bytes | None:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            return None
        return self._take(n)

    def array_len(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.i32()

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged fields (flexible versions), by tag; nothing otherwise."""
        tags: dict[int, bytes] = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                tags[tag] = self._take(self.uvarint())
        return tags


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(key.hashCode) % partitions` (Utils.abs(MIN_VALUE) == 0): the partition
    of a group id in `__consumer_offsets`, of a transactional id in `__transaction_state`."""
    h = java_string_hashcode(key)
    return (0 if h == -0x80000000 else abs(h)) % num_partitions
