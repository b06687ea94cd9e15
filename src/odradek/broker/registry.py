"""The handler registry: one entry per API key, registered by the module that serves it.

Dispatch and the ApiVersions response both derive from this registry, so what we
advertise cannot drift from what we serve. Registering a key twice fails loudly.

A handler is `async def handle(ctx: RequestContext, request) -> response`. The request is
decoded and the response encoded by the handler's codec for that version: kio's entities
by default (the response is then a kio response entity of the request's version), or a
hand-written `VersionCodec` registered for some versions (Produce and Fetch responses on
the hot path, legacy layouts older than kio's schemas), whose encoder takes whatever
domain value the handler returns. A handler never builds bytes itself. `NO_RESPONSE`
(Produce with acks=0) sends nothing.
"""

from __future__ import annotations

import datetime
import importlib
import pkgutil
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.broker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from odradek.broker.security.authorizer import host_of
from odradek.protocol import messages

if TYPE_CHECKING:
    from odradek.broker.connection_state import ConnectionState
    from odradek.broker.services import BrokerServices

# (version, frame, offset of the body in the frame) -> request
RequestDecoder = Callable[[int, Any, int], Any]
# (version, the handler's response) -> (chunks: bytes and file regions with fd/position/length, total size)
ResponseEncoder = Callable[[int, Any], "tuple[list[Any], int]"]


@dataclass(frozen=True, slots=True)
class VersionCodec:
    """A hand-written codec for some versions of an API; None on either side means kio's.
    `flexible`: those versions use request header v2 and response header v1 (KIP-482), which
    only matters where kio has no schema to say so (versions only this codec serves)."""

    decode: RequestDecoder | None = None
    encode: ResponseEncoder | None = None
    flexible: bool = False


def _kio_encode(version: int, response: Any) -> tuple[list[Any], int]:
    body = messages.encode(response)
    return [body], len(body)


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    fn: Callable[..., Awaitable[Any]]
    # Lowest version advertised in ApiVersions (may be below min_version: Kafka 4
    # advertises Produce from v0; those versions are served by a legacy codec).
    advertised_min: int
    # version -> codec, for the versions kio does not serve (or not fast enough)
    codecs: Mapping[int, VersionCodec]
    # the API's name (metrics, logs), looked up once here rather than on every request
    name: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", messages.api_name(self.api_key))

    @property
    def kio_versions(self) -> range:
        """The served versions kio has schemas for (none for an API only hand-written codecs serve)."""
        have = messages.schema_versions(self.api_key)
        if have is None:
            return range(0)
        return range(max(self.min_version, have[0]), min(self.max_version, have[1]) + 1)

    def request_decoder(self, version: int) -> RequestDecoder | None:
        """The hand-written decoder of this version, or None for kio's."""
        codec = self.codecs.get(version)
        return codec.decode if codec is not None else None

    def encode_response(self, version: int, response: Any) -> tuple[list[Any], int]:
        codec = self.codecs.get(version)
        encode = codec.encode if codec is not None and codec.encode is not None else _kio_encode
        return encode(version, response)


class _NoResponse:
    def __repr__(self) -> str:
        return "NO_RESPONSE"


NO_RESPONSE: Any = _NoResponse()

REGISTRY: dict[int, Handler] = {}


def handles(
    api_key: int,
    min_version: int,
    max_version: int,
    *,
    advertised_min: int | None = None,
    codecs: Mapping[range | int, VersionCodec] | None = None,
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Decorator registering an API handler for versions [min_version, max_version] (and
    [advertised_min, min_version) when codecs serve those)."""
    lowest = min_version if advertised_min is None else advertised_min
    per_version: dict[int, VersionCodec] = {}
    for versions, codec in (codecs or {}).items():
        for v in versions if isinstance(versions, range) else (versions,):
            per_version[v] = codec

    def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        if api_key in REGISTRY:
            raise RuntimeError(
                f"API key {api_key} registered twice ({REGISTRY[api_key].fn.__module__} and {fn.__module__})"
            )
        kio_range = messages.schema_versions(api_key)
        for v in range(lowest, max_version + 1):
            codec = per_version.get(v)
            has_kio = kio_range is not None and kio_range[0] <= v <= kio_range[1]
            if not has_kio and (codec is None or codec.decode is None or codec.encode is None):
                raise RuntimeError(f"API key {api_key} v{v}: kio has no schema ({kio_range}) and no codec serves it")
        REGISTRY[api_key] = Handler(api_key, min_version, max_version, fn, lowest, per_version)
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
        for v in h.kio_versions:
            messages.request_class(h.api_key, v)
            messages.warm(h.api_key, v)


@dataclass(slots=True)
class RequestContext:
    """What a handler gets besides the request itself."""

    services: BrokerServices
    connection: ConnectionState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request_size: int = 0  # the request's header and body bytes, as received (the produce quota's charge)

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

    # -- authorization (broker/security/authorizer.py): the one way handlers ask -------------
    def authorized(self, op: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """May this connection's principal do `op` to the resource? Always, with no authorizer."""
        acls = self.services.acls
        if acls is None:
            return True
        c = self.connection
        return acls.authorizer.authorize(c.principal, host_of(c.peer), op, resource_type, name)

    def authorized_names(self, op: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
        """The names among `names` this principal may do `op` to."""
        return {n for n in names if self.authorized(op, resource_type, n)}

    def authorized_by_type(self, op: AclOperation, resource_type: ResourceType) -> bool:
        """May this principal do `op` to at least one resource of the type (KIP-679)?"""
        acls = self.services.acls
        if acls is None:
            return True
        c = self.connection
        return acls.authorizer.authorize_by_resource_type(c.principal, host_of(c.peer), op, resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """An authorized-operations field: the bits of what the principal may do to the resource
        among what its type supports (every supported one with no authorizer, as Kafka)."""
        acls = self.services.acls
        if acls is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
        c = self.connection
        return acls.authorizer.authorized_operations(c.principal, host_of(c.peer), resource_type, name)


def make(cls: type, /, **fields: Any) -> Any:
    """Build a kio entity from keyword arguments, dropping those this version lacks.

    Lets one handler body serve every version: pass the union of fields and each
    version takes what its schema has; a name no version has raises UnknownField. Plain
    ints are accepted for error codes, millisecond durations and millisecond timestamps.
    (messages.build_entity does the work.)
    """
    return messages.build_entity(cls, fields)


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
