"""The bridge to kio: (api_key, version) -> request/response entity classes, readers, writers,
and `build_entity`, which makes an entity of any version from loose fields.

kio's entities are generated from Kafka 4.x's JSON schemas, every API and version
that Kafka 4.x knows. Lookups are cached; readers are kio's native ones.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import sys
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache, partial
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.protocol import Entity

from odradek.protocol import guard

API_NAMES: dict[int, str] = dict(api_key_map)
# APIs Kafka 4 removed (so kio has no schema), served by hand-written codecs (protocol/legacy)
LEGACY_API_NAMES = {7: "controlled_shutdown"}


class UnknownApi(LookupError):
    pass


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key) or LEGACY_API_NAMES.get(api_key) or f"unknown({api_key})"


def schema_versions(api_key: int) -> tuple[int, int] | None:
    """The version range kio has schemas for."""
    name = API_NAMES.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name].keys()
    return min(versions), max(versions)


@cache
def _classes(api_key: int, version: int) -> tuple[type[Entity], type[Entity]]:
    name = API_NAMES.get(api_key)
    if name is None or version not in schema_name_map[name]:
        raise UnknownApi(f"no schema for api {api_key} v{version}")
    req_mod = load_payload_module(api_key, version, EntityType.request)
    resp_mod = load_payload_module(api_key, version, EntityType.response)
    req = next(v for v in vars(req_mod).values() if getattr(v, "__type__", None) is EntityType.request)
    resp = next(v for v in vars(resp_mod).values() if getattr(v, "__type__", None) is EntityType.response)
    return req, resp


def request_class(api_key: int, version: int) -> type[Entity]:
    return _classes(api_key, version)[0]


def response_class(api_key: int, version: int) -> type[Entity]:
    return _classes(api_key, version)[1]


@cache
def is_flexible(api_key: int, version: int) -> bool:
    try:
        return bool(request_class(api_key, version).__flexible__)
    except UnknownApi:
        return False


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def decode_request(api_key: int, version: int, body: bytes | memoryview, offset: int = 0) -> Any:
    """Parse a request body. Raises ValueError (or kio's errors) on malformed input."""
    cls = request_class(api_key, version)
    guard.check(cls, body, offset)  # kio aborts the process on absurd array lengths
    entity, size = _reader(cls)(body, offset)
    return entity


def warm(api_key: int, version: int) -> None:
    """Build and cache the reader and writer this version's request/response need."""
    _reader(request_class(api_key, version))
    _writer(response_class(api_key, version))
    guard.entity_walker(request_class(api_key, version))


def decode_response(api_key: int, version: int, body: bytes | memoryview, offset: int = 0) -> Any:
    cls = response_class(api_key, version)
    entity, _size = _reader(cls)(body, offset)
    return entity


def encode(entity: Entity) -> bytes:
    buf = io.BytesIO()
    _writer(type(entity))(buf, entity)
    return buf.getvalue()


def module_of(entity_cls: type) -> Any:
    """The generated module holding an entity class, for its nested classes."""
    return sys.modules[entity_cls.__module__]


# --------------------------------------------------------------------------- entities from loose fields


class UnknownField(TypeError):
    """A field name that no version of the entity has."""


def _error_code(v: Any) -> Any:
    return v if type(v) is ErrorCode else ErrorCode(v)


def _ms_timedelta(v: Any) -> Any:
    return datetime.timedelta(milliseconds=v) if isinstance(v, int) and not isinstance(v, bool) else v


def _ms_datetime(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool):
        return datetime.datetime.fromtimestamp(v / 1000, datetime.UTC)
    return v


_FROM_INT: dict[str, Callable[[Any], Any]] = {
    "error_code": _error_code,
    "timedelta_i32": _ms_timedelta,
    "timedelta_i64": _ms_timedelta,
    "datetime_i64": _ms_datetime,
}


def build_entity(cls: type, fields: Mapping[str, Any], *, loose: bool = False) -> Any:
    """The entity `cls` from `fields`, whichever version `cls` is.

    Code that serves or sends every version of an API (a broker handler, a client request)
    describes the entity once, with the union of its versions' fields:

    - a field this version lacks is dropped, but a name that *no* version of the entity has
      raises `UnknownField` (a misspelling would otherwise vanish silently);
    - plain ints are accepted for error codes, millisecond durations and millisecond timestamps;
    - a required field left out raises TypeError (kio's constructor).

    `loose` (the client, which describes requests as plain data): dicts become nested
    entities and sequences of dicts tuples of them, built the same way (entities of any
    version are taken as they are), other sequences become tuples, and a required field left
    out takes its empty value (0, "", b"", False, (), None, a nested empty entity).
    """
    plan = (_LOOSE_PLANS if loose else _PLANS).get(cls) or _plan(cls, loose)
    kw = {}
    for name, value in fields.items():
        conv = plan.get(name, _ABSENT)
        if conv is None:
            kw[name] = value
        elif conv is _DROP:
            pass
        elif conv is _ABSENT:
            if name not in field_names_of_all_versions(cls):
                raise UnknownField(f"{cls.__qualname__} has no field {name!r} in any version ({cls.__module__})")
            plan[name] = _DROP  # another version's field: checked once, dropped from now on
        else:
            kw[name] = value if value is None else conv(value)
    if loose:
        for name, empty in _required(cls):
            if name not in kw:
                kw[name] = empty()
    return cls(**kw)


_ABSENT: Any = object()
_DROP: Any = object()


# --------------------------------------------------------------------------- per-class plans


_PLANS: dict[type, dict[str, Any]] = {}
_LOOSE_PLANS: dict[type, dict[str, Any]] = {}


def _plan(cls: type, loose: bool) -> dict[str, Any]:
    """Field name -> converter of a given (non-None) value, or None to take it as it is;
    build_entity adds other versions' field names (-> _DROP) as it meets them."""
    hints = typing.get_type_hints(cls)
    plan = {f.name: _converter(f, hints[f.name], loose) for f in dataclasses.fields(cls)}
    return (_LOOSE_PLANS if loose else _PLANS).setdefault(cls, plan)


def _converter(f: dataclasses.Field, tp: Any, loose: bool) -> Callable[[Any], Any] | None:
    from_int = _FROM_INT.get(f.metadata.get("kafka_type", ""))
    if from_int is not None or not loose:
        return from_int
    tp = _unwrap_optional(tp)
    if typing.get_origin(tp) is tuple:
        inner = typing.get_args(tp)[0]
        if _is_entity(inner):
            return lambda v: tuple(build_entity(inner, x, loose=True) if type(x) is dict else x for x in v)
        return tuple
    if _is_entity(tp):
        return lambda v: build_entity(tp, v, loose=True) if type(v) is dict else v
    return None


def _is_entity(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _same(value: Any) -> Any:
    return value


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


@cache
def _required(cls: type) -> tuple[tuple[str, Callable[[], Any]], ...]:
    """(name, empty-value factory) of every field without a default."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, _empty_factory(f, hints[f.name]))
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def _empty_factory(f: dataclasses.Field, tp: Any) -> Callable[[], Any]:
    inner = _unwrap_optional(tp)
    if inner is not tp:
        return lambda: None
    if typing.get_origin(tp) is tuple:
        return tuple
    kafka_type = f.metadata.get("kafka_type", "")
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta
    if kafka_type == "error_code":
        return lambda: ErrorCode.none
    if _is_entity(tp):
        return lambda: build_entity(tp, {}, loose=True)
    empties: tuple[tuple[type, Any], ...] = ((bool, False), (str, ""), (bytes, b""), (int, 0), (float, 0.0))
    for base, empty in empties:
        if isinstance(tp, type) and issubclass(tp, base):
            return partial(_same, empty)
    raise TypeError(f"no empty value for field {f.name}: {tp}")


# --------------------------------------------------------------------------- entity families


@cache
def field_names_of_all_versions(cls: type) -> frozenset[str]:
    """Field names of `cls` in any version: the union over the classes of the same name in
    the sibling version modules kio's index lists (`kio.schema.<schema>.v<N>.<kind>`); just
    `cls`'s own for a class outside that layout."""
    names = {f.name for f in dataclasses.fields(cls)}
    parts = cls.__module__.split(".")
    if len(parts) != 5 or parts[:2] != ["kio", "schema"] or parts[2] not in schema_name_map:
        return frozenset(names)
    kind = parts[4]
    for by_type in schema_name_map[parts[2]].values():
        for path in by_type.values():
            module = path.partition(":")[0]
            if module.rpartition(".")[2] != kind:
                continue
            other = getattr(importlib.import_module(module), cls.__qualname__, None)
            if other is not None and dataclasses.is_dataclass(other):
                names.update(f.name for f in dataclasses.fields(other))
    return frozenset(names)
