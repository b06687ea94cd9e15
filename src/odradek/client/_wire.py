"""Glue between plain Python data and kio's typed entities.

kio generates one frozen dataclass per API version. The client describes a
request once, as a dict keyed by field name, and `build(cls, data)` turns it into
the entity of whatever version was negotiated: fields a version lacks are ignored,
missing fields take their schema default, millisecond ints become timedeltas and
lists of dicts become tuples of nested entities.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import typing
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer

from odradek.protocol import messages
from odradek.protocol.varint import write_uvarint

_TIMEDELTA_NAMES = {"i32Timedelta", "i64Timedelta"}
_MISSING = dataclasses.MISSING


def _unwrap_optional(tp):
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _converter(tp):
    tp = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        if dataclasses.is_dataclass(inner):
            return lambda v: None if v is None else tuple(x if isinstance(x, inner) else build(inner, x) for x in v)
        conv = _converter(inner)
        if conv is None:
            return lambda v: None if v is None else tuple(v)
        return lambda v: None if v is None else tuple(conv(x) for x in v)
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return lambda v: v if v is None or isinstance(v, tp) else build(tp, v)
        if tp.__name__ in _TIMEDELTA_NAMES:
            return lambda v: v if v is None or isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)
    return None


@cache
def _plan(cls: type) -> tuple[tuple[str, Any, bool, Any], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        has_default = f.default is not _MISSING or f.default_factory is not _MISSING
        tp = hints[f.name]
        plan.append((f.name, _converter(tp), has_default, tp))
    return tuple(plan)


def _empty_for(tp):
    tp2 = _unwrap_optional(tp)
    if typing.get_origin(tp2) is tuple:
        return ()
    if tp2 is not tp:  # optional
        return None
    if tp2 is str or (isinstance(tp2, type) and issubclass(tp2, str)):
        return ""
    if tp2 is bool:
        return False
    if tp2 is bytes:
        return b""
    if isinstance(tp2, type) and tp2.__name__ in _TIMEDELTA_NAMES:
        return datetime.timedelta(0)
    if isinstance(tp2, type) and issubclass(tp2, int):
        return 0
    if dataclasses.is_dataclass(tp2):
        return build(tp2, {})
    raise TypeError(f"no empty value for {tp}")


def build(cls: type, data: dict) -> Any:
    """An entity of `cls` from `data`, keeping only the fields `cls` has."""
    kw = {}
    for name, conv, has_default, tp in _plan(cls):
        if name in data:
            v = data[name]
            kw[name] = conv(v) if conv is not None else v
        elif not has_default:
            kw[name] = _empty_for(tp)
    return cls(**kw)


def request(api_key: int, version: int, data: dict) -> Any:
    return build(messages.request_class(api_key, version), data)


# --------------------------------------------------------------- ConsumerProtocol

_I16 = struct.Struct(">h")


@cache
def _cp_class(kind: str, version: int) -> type:
    import importlib

    mod = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")
    return next(
        v
        for v in vars(mod).values()
        if getattr(v, "__type__", None) is not None and v.__name__.startswith("ConsumerProtocol")
    )


def encode_consumer_protocol(kind: str, version: int, data: dict) -> bytes:
    """Kafka's ConsumerProtocol{Subscription,Assignment}: int16 version + body."""
    entity = build(_cp_class(kind, version), data)
    buf = io.BytesIO()
    buf.write(_I16.pack(version))
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def decode_consumer_protocol(kind: str, raw: bytes) -> Any:
    """Decode any version; versions newer than we know are read with the newest layout."""
    (version,) = _I16.unpack_from(raw, 0)
    cls = _cp_class(kind, max(0, min(version, 3)))
    entity, _ = entity_reader(cls)(bytes(raw[2:]), 0)
    return entity


def ms(v) -> int:
    """Milliseconds from kio's datetime / timedelta / int fields (None -> -1)."""
    if v is None:
        return -1
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.UTC)
        return round(v.timestamp() * 1000)
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)
    return int(v)


# --------------------------------------------------------------- Produce, encoded by hand

_PRODUCE_HEAD = struct.Struct(">hi")  # acks, timeout_ms


def encode_produce(version: int, acks: int, timeout_ms: int, topics: dict[str, list[tuple[int, bytes]]]) -> bytes:
    """The body of a Produce request (v3..v12, no transactional id) from
    {topic: [(partition, record batch bytes)]}; the same bytes kio writes (tested), without
    building entities first: this runs once per request on the producer's hot path."""
    if not 3 <= version <= 12:
        raise ValueError(f"Produce v{version} is not encoded by hand")
    flexible = version >= 9
    out = [b"\x00" if flexible else b"\xff\xff", _PRODUCE_HEAD.pack(acks, timeout_ms)]
    if flexible:
        out.append(write_uvarint(len(topics) + 1))
        for name, parts in topics.items():
            nb = name.encode()
            out.append(write_uvarint(len(nb) + 1))
            out.append(nb)
            out.append(write_uvarint(len(parts) + 1))
            for index, records in parts:
                out.append(struct.pack(">i", index))
                out.append(write_uvarint(len(records) + 1))
                out.append(records)
                out.append(b"\x00")  # partition tagged fields
            out.append(b"\x00")  # topic tagged fields
        out.append(b"\x00")  # request tagged fields
    else:
        out.append(struct.pack(">i", len(topics)))
        for name, parts in topics.items():
            nb = name.encode()
            out.append(struct.pack(">h", len(nb)))
            out.append(nb)
            out.append(struct.pack(">i", len(parts)))
            for index, records in parts:
                out.append(struct.pack(">ii", index, len(records)))
                out.append(records)
    return b"".join(out)
