"""Glue between plain Python data and kio's typed entities.

kio generates one frozen dataclass per API version. The client describes a
request once, as a dict keyed by field name, and `build(cls, data)` turns it into
the entity of whatever version was negotiated (protocol.messages.build_entity): fields a
version lacks are ignored, missing fields take their schema default or empty value,
millisecond ints become timedeltas and lists of dicts become tuples of nested entities.
"""

from __future__ import annotations

import datetime
import io
import struct
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer

from odradek.protocol import messages
from odradek.protocol.varint import write_uvarint


def build(cls: type, data: dict) -> Any:
    """An entity of `cls` from `data`, keeping only the fields `cls` has (a name no version
    has raises messages.UnknownField); required fields left out take their empty value."""
    return messages.build_entity(cls, data, loose=True)


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


def encode_produce(
    version: int, acks: int, timeout_ms: int, topics: dict[str, list[tuple[int, bytes]]], transactional_id=None
) -> bytes:
    """The body of a Produce request (v3..v12) from
    {topic: [(partition, record batch bytes)]}; the same bytes kio writes (tested), without
    building entities first: this runs once per request on the producer's hot path."""
    if not 3 <= version <= 12:
        raise ValueError(f"Produce v{version} is not encoded by hand")
    flexible = version >= 9
    if transactional_id is None:
        tid = b"\x00" if flexible else b"\xff\xff"
    else:
        tb = transactional_id.encode()
        tid = write_uvarint(len(tb) + 1) + tb if flexible else struct.pack(">h", len(tb)) + tb
    out = [tid, _PRODUCE_HEAD.pack(acks, timeout_ms)]
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
