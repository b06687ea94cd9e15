"""The bridge to kio: (api_key, version) -> request/response entity classes, readers, writers.

kio's entities are generated from Kafka 4.x's JSON schemas, every API and version
that Kafka 4.x knows. Lookups are cached; readers are kio's native ones.
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

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
def _classes(api_key: int, version: int) -> tuple[type, type]:
    name = API_NAMES.get(api_key)
    if name is None or version not in schema_name_map[name]:
        raise UnknownApi(f"no schema for api {api_key} v{version}")
    req_mod = load_payload_module(api_key, version, EntityType.request)
    resp_mod = load_payload_module(api_key, version, EntityType.response)
    req = next(v for v in vars(req_mod).values() if getattr(v, "__type__", None) is EntityType.request)
    resp = next(v for v in vars(resp_mod).values() if getattr(v, "__type__", None) is EntityType.response)
    return req, resp


def request_class(api_key: int, version: int) -> type:
    return _classes(api_key, version)[0]


def response_class(api_key: int, version: int) -> type:
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


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    _writer(type(entity))(buf, entity)
    return buf.getvalue()


def module_of(entity_cls: type) -> Any:
    """The generated module holding an entity class, for its nested classes."""
    import sys

    return sys.modules[entity_cls.__module__]
