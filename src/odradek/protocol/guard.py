"""A structural pre-check of request bodies before kio parses them.

kio's native reader sizes an array's storage from its declared length before
reading the elements, so a frame declaring, say, 4 billion array entries makes it
ask for tens of GB and the process aborts (no exception to catch). This module
walks the same layout (from kio's own entity classes and field metadata) checking
only lengths: every array, string and bytes field must fit in what remains of the
frame, otherwise `LengthError` (a ValueError) is raised and the request is refused
like any malformed one. Walkers are compiled once per entity class.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, get_field_tag

_FIXED = {
    "int8": 1, "bool": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4, "float64": 8, "int64": 8, "uint64": 8,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_i16 = struct.Struct(">h").unpack_from
_i32 = struct.Struct(">i").unpack_from

Walker = Callable[[bytes, int, int], int]  # (buf, pos, end) -> new pos


class LengthError(ValueError):
    pass


def _uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise LengthError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise LengthError("varint too long")


def _need(pos: int, n: int, end: int, what: str) -> int:
    if n < 0 or pos + n > end:
        raise LengthError(f"{what} of {n} bytes overruns the frame")
    return pos + n


def _fixed(size: int) -> Walker:
    def walk(buf, pos, end):
        return _need(pos, size, end, "field")
    return walk


def _sized(flexible: bool, wide: bool) -> Walker:
    """string (int16 length) or bytes/records (int32 length); compact in flexible versions."""
    if flexible:
        def walk(buf, pos, end):
            n, pos = _uvarint(buf, pos, end)
            return pos if n == 0 else _need(pos, n - 1, end, "string/bytes")
    elif wide:
        def walk(buf, pos, end):
            pos = _need(pos, 4, end, "length")
            (n,) = _i32(buf, pos - 4)
            return pos if n < 0 else _need(pos, n, end, "bytes")
    else:
        def walk(buf, pos, end):
            pos = _need(pos, 2, end, "length")
            (n,) = _i16(buf, pos - 2)
            return pos if n < 0 else _need(pos, n, end, "string")
    return walk


def _array(element: Walker, flexible: bool) -> Walker:
    def walk(buf, pos, end):
        if flexible:
            n, pos = _uvarint(buf, pos, end)
            n -= 1
        else:
            pos = _need(pos, 4, end, "array length")
            (n,) = _i32(buf, pos - 4)
        if n <= 0:
            return pos
        if n > end - pos:  # every element takes at least one byte
            raise LengthError(f"array of {n} elements overruns the frame ({end - pos} bytes left)")
        for _ in range(n):
            pos = element(buf, pos, end)
        return pos
    return walk


def _primitive(kafka_type: str, flexible: bool) -> Walker:
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type])
    if kafka_type == "string":
        return _sized(flexible, wide=False)
    if kafka_type in ("bytes", "records"):
        return _sized(flexible, wide=True)
    raise TypeError(f"unknown kafka type {kafka_type}")


@cache
def entity_walker(cls: type) -> Walker:
    flexible = bool(cls.__flexible__)
    plain: list[Walker] = []
    tagged: dict[int, Walker] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            w = _array(_lazy(kind.type_), flexible)
        elif isinstance(kind, EntityField):
            w = _lazy(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            w = _array(_primitive(f.metadata["kafka_type"], flexible), flexible)
        else:
            w = _primitive(f.metadata["kafka_type"], flexible)
        tag = get_field_tag(f)
        if tag is None:
            plain.append(w)
        else:
            tagged[int(tag)] = w

    def walk(buf, pos, end):
        for w in plain:
            pos = w(buf, pos, end)
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            if count > end - pos:
                raise LengthError("tagged field count overruns the frame")
            for _ in range(count):
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                stop = _need(pos, size, end, "tagged field")
                inner = tagged.get(tag)
                if inner is not None:
                    inner(buf, pos, stop)
                pos = stop
        return pos

    return walk


def _lazy(cls: type) -> Walker:
    """Nullable nested entities in flexible versions carry a marker byte; kio's
    schemas only use plain nested entities in requests we serve, so walk it directly."""
    def walk(buf, pos, end):
        return entity_walker(cls)(buf, pos, end)
    return walk


def check(cls: type, buf, offset: int) -> None:
    entity_walker(cls)(buf, offset, len(buf))
