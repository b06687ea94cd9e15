"""The handler registry: one entry per API key, registered by the module that serves it.

Dispatch and the ApiVersions response both derive from this registry, so what we
advertise cannot drift from what we serve. Registering a key twice fails loudly.

A handler is `async def handle(ctx: RequestContext, request) -> response` where the
response is a kio response entity of the request's version, `NO_RESPONSE` (Produce
with acks=0), or a `RawResponse` whose body the handler encoded itself (Fetch, to
send record bytes with sendfile).
"""

from __future__ import annotations

import datetime
import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from odradek.protocol import messages
from odradek.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    fn: Callable[..., Awaitable[Any]]
    # Lowest version advertised in ApiVersions (may be below min_version: Kafka 4
    # advertises Produce from v0 and answers v0-v2 with UNSUPPORTED_VERSION).
    advertised_min: int
    # Versions served by a hand-written codec instead of kio (e.g. legacy layouts).
    decoder: Callable[[int, bytes, int], Any] | None = None

    @property
    def name(self) -> str:
        return messages.api_name(self.api_key)


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response body encoded by the handler: bytes chunks and file regions (objects
    with fd, position, length) sent in order after the response header."""

    chunks: list[Any]
    size: int


class _NoResponse:
    def __repr__(self) -> str:
        return "NO_RESPONSE"


NO_RESPONSE: Any = _NoResponse()

REGISTRY: dict[int, Handler] = {}


def handles(api_key: int, min_version: int, max_version: int, *, advertised_min: int | None = None, decoder=None):
    """Decorator registering an API handler for versions [min_version, max_version]."""

    def register(fn):
        if api_key in REGISTRY:
            raise RuntimeError(
                f"API key {api_key} registered twice ({REGISTRY[api_key].fn.__module__} and {fn.__module__})"
            )
        kio_range = messages.schema_versions(api_key)
        if decoder is None and (kio_range is None or min_version < kio_range[0] or max_version > kio_range[1]):
            raise RuntimeError(
                f"API key {api_key} v{min_version}-{max_version} is outside the schemas kio has ({kio_range})"
            )
        REGISTRY[api_key] = Handler(
            api_key, min_version, max_version, fn, min_version if advertised_min is None else advertised_min, decoder
        )
        return fn

    return register


_loaded = False


def load_handlers() -> dict[int, Handler]:
    """Import every module under odradek.broker.handlers (each registers itself)."""
    global _loaded
    if not _loaded:
        from odradek.broker import handlers

        for info in sorted(pkgutil.iter_modules(handlers.__path__), key=lambda i: i.name):
            importlib.import_module(f"{handlers.__name__}.{info.name}")
        _loaded = True
    return REGISTRY


def preload_schemas() -> None:
    """Import every served version's entity classes and build their readers now, so
    the first request of each version doesn't pay for it (measured: ~10% of an early
    consume profile)."""
    for h in load_handlers().values():
        for v in range(h.min_version, h.max_version + 1):
            messages.request_class(h.api_key, v)
            messages.warm(h.api_key, v)


@dataclass(slots=True)
class RequestContext:
    """What a handler gets besides the request itself."""

    broker: Any  # odradek.broker.server.Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    connection_id: int
    extras: dict = field(default_factory=dict)

    @property
    def response_class(self) -> type:
        return messages.response_class(self.api_key, self.api_version)

    @property
    def module(self) -> Any:
        """The generated module of this version's response, for nested entity classes."""
        return messages.module_of(self.response_class)

    def respond(self, **fields: Any) -> Any:
        return make(self.response_class, **fields)

    def nested(self, class_name: str, /, **fields: Any) -> Any:
        return make(getattr(self.module, class_name), **fields)


def make(cls: type, /, **fields: Any) -> Any:
    """Build a kio entity from keyword arguments, dropping those this version lacks.

    Lets one handler body serve every version: pass the union of fields and each
    version takes what its schema has. Plain ints are accepted for error codes,
    millisecond durations and millisecond timestamps.
    """
    conv = _converters(cls)
    kw = {}
    for k, v in fields.items():
        c = conv.get(k, _ABSENT)
        if c is _ABSENT:
            continue
        kw[k] = c(v) if c is not None and isinstance(v, int) and not isinstance(v, bool) else v
    return cls(**kw)


_ABSENT = object()


def _ms_timedelta(v: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=v)


def _ms_datetime(v: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(v / 1000, datetime.UTC)


_CONVERTERS = {
    "error_code": ErrorCode,
    "timedelta_i32": _ms_timedelta,
    "timedelta_i64": _ms_timedelta,
    "datetime_i64": _ms_datetime,
}


@cache
def _converters(cls: type) -> dict[str, Any]:
    return {name: _CONVERTERS.get(f.metadata.get("kafka_type")) for name, f in cls.__dataclass_fields__.items()}


def ms(value: Any) -> int:
    """Milliseconds of a kio duration or timestamp field (or an int)."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def api_table_markdown() -> str:
    """The served-versions table of docs/compatibility.md, from the registry."""
    rows = ["| key | API | advertised | served | handler |", "|---|---|---|---|---|"]
    for h in sorted(load_handlers().values(), key=lambda h: h.api_key):
        served = f"v{h.min_version}–v{h.max_version}"
        adv = f"v{h.advertised_min}–v{h.max_version}"
        rows.append(f"| {h.api_key} | {h.name} | {adv} | {served} | `{h.fn.__module__.rsplit('.', 1)[-1]}.py` |")
    return "\n".join(rows) + "\n"
