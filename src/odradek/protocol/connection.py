"""The server side of one Kafka connection, sans-IO: bytes in, events out, responses to bytes.

Shaped like h11's `Connection` (python-hyper/h11 `_connection.py`): no sockets, no event
loop, no files. The broker's transport (broker/connection.py) lends the receive memory
(`get_buffer()` / `buffer_updated(n)`, or `receive_data(bytes)`), asks `next_event()` for
the next request when it is ready to handle one, and writes what `send()` gives back.

`next_event()` returns one of

* `RequestReceived`: a request parsed with the header version and body layout of its
  API version (kio's reader, or the hand-written decoder the served table names for that
  version, e.g. the legacy layouts below kio's minimum);
* `ImmediateResponse`: a request answered here without a handler. That is ApiVersions at a
  version above ours (KIP-511): error 35 (UNSUPPORTED_VERSION) in the v0 layout, listing our
  ApiVersions range so the client can retry at one we know, with response header v0;
* `NEED_DATA`: no whole frame is waiting.

What can only be answered by hanging up raises `ProtocolError` with a message saying why:
a bad frame size (from `buffer_updated`/`receive_data`, as soon as the size is seen), and a
malformed header, an unknown API key, a version we do not serve, a malformed body or a
request not allowed before authentication (from `next_event`). After one, the connection
is unusable: every later call raises it again.

The authentication gate: until `authenticated` is true, only ApiVersions, SaslHandshake and
SaslAuthenticate may be dispatched (Kafka's SaslServerAuthenticator closes the connection on
anything else), and frames are limited to `pre_auth_max_frame_size` (Kafka's
sasl.server.max.receive.size). PLAINTEXT listeners create the connection authenticated.
After a SaslHandshake v0 the broker sets `raw_sasl_tokens`: the frames that follow are bare SASL
tokens, not requests (Kafka's legacy framing), returned as `SaslTokenReceived` and answered with
`send_token` until the broker clears it.

The broker passes in what it serves (`ServedApi` per API key, from its handler registry);
this module knows nothing of handlers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from odradek.protocol import messages
from odradek.protocol.framing import FrameReader, ProtocolError
from odradek.protocol.headers import API_VERSIONS_KEY, InvalidHeader, read_header_rest, response_header

__all__ = [
    "NEED_DATA",
    "PRE_AUTHENTICATION_KEYS",
    "ImmediateResponse",
    "ProtocolError",
    "RequestReceived",
    "SaslTokenReceived",
    "ServedApi",
    "ServerConnection",
]

_HEAD = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_UNSUPPORTED_VERSION = 35
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
PRE_AUTHENTICATION_KEYS = frozenset((API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY))

# Receive memory for a broker connection: small requests gather in a scratch buffer of this
# size; a larger one gets its own buffer, and one such buffer of up to SPARE_MAX_SIZE is kept
# for the next large request (see framing.FrameReader).
SCRATCH_SIZE = 64 * 1024
SPARE_MAX_SIZE = 1024 * 1024


RequestDecoder = Callable[[int, Any, int], Any]  # (version, frame, header size) -> request
_NO_DECODERS: Mapping[int, RequestDecoder] = {}


class ServedApi(NamedTuple):
    """One API as the broker serves it."""

    advertised_min: int  # lowest version served (and listed in ApiVersions)
    min_version: int  # lowest version in kio's (Kafka 4's) schemas; below it, legacy layouts
    max_version: int
    decoders: Mapping[int, RequestDecoder] = _NO_DECODERS  # version -> hand-written decoder, instead of kio's
    flexible: frozenset[int] = frozenset()  # flexible versions among `decoders` kio has no schema for


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Any = _NeedData()


@dataclass(slots=True)
class RequestReceived:
    """A whole, parsed request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int  # the body starts here in the frame
    flexible: bool  # request header v2 (tagged fields); responses then use header v1, except ApiVersions
    request: Any  # the decoded request entity
    size: int = 0  # the frame's bytes, header and body (Kafka's RequestChannel.Request.sizeInBytes)


@dataclass(slots=True)
class SaslTokenReceived:
    """A bare SASL token (the frame's whole payload), after a SaslHandshake v0."""

    token: bytes


@dataclass(slots=True)
class ImmediateResponse:
    """A request answered without a handler: `data` is the whole response frame, size prefix included."""

    api_key: int
    api_version: int
    correlation_id: int
    data: bytes


class ServerConnection:
    """One connection's protocol state: the frames received, the authentication gate, response framing."""

    __slots__ = (
        "authenticated",
        "raw_sasl_tokens",
        "_max_frame_size",
        "get_buffer",
        "buffer_updated",
        "_reader",
        "_frames",
        "_apis",
        "_api_versions_fallback",
        "_error",
    )

    def __init__(
        self,
        apis: Mapping[int, ServedApi],
        max_frame_size: int,
        *,
        authenticated: bool = True,
        pre_auth_max_frame_size: int | None = None,
        scratch_size: int = SCRATCH_SIZE,
        spare_max_size: int = SPARE_MAX_SIZE,
    ) -> None:
        self.authenticated = authenticated
        self.raw_sasl_tokens = False
        self._max_frame_size = max_frame_size
        self._apis = apis
        limit = max_frame_size if authenticated or pre_auth_max_frame_size is None else pre_auth_max_frame_size
        self._reader = reader = FrameReader(
            limit, scratch_size=scratch_size, spare_count=1, spare_max_size=spare_max_size
        )
        self._frames = reader.frames
        # Receiving: the reader's own methods (no call in between on the hot path).
        # buffer_updated raises ProtocolError (a FrameError) on a bad frame size.
        self.get_buffer: Callable[..., memoryview] = reader.get_buffer
        self.buffer_updated: Callable[[int], None] = reader.buffer_updated
        # (without ApiVersions in the table, its key is unknown and this is never sent)
        ours = apis.get(API_VERSIONS_KEY, ServedApi(0, 0, 0))
        self._api_versions_fallback = struct.pack(
            ">hihhh", _UNSUPPORTED_VERSION, 1, API_VERSIONS_KEY, ours.advertised_min, ours.max_version
        )
        self._error: ProtocolError | None = None

    # ------------------------------------------------------------------ receiving
    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer (a copy; `get_buffer`/`buffer_updated` avoid it)."""
        if self._error is not None:
            raise self._error
        self._reader.feed(data)

    @property
    def frames_waiting(self) -> int:
        """Whole requests received and not yet taken by `next_event`."""
        return len(self._frames)

    def peek_frame(self) -> bytes | memoryview | None:
        """The next whole request frame, left in place (the broker's fast path looks before it
        takes one, `drop_frame`), or None: none waiting, or none to dispatch (an error, the
        authentication gate, bare SASL tokens)."""
        if (
            self._frames
            and self._error is None
            and self._reader.error is None
            and self.authenticated
            and not self.raw_sasl_tokens
        ):
            return self._frames[0]
        return None

    def drop_frame(self) -> None:
        """Drop the next frame: the broker served it itself (after `peek_frame`)."""
        self._frames.popleft()

    def discard_waiting(self) -> None:
        """Drop the requests received and not yet taken (the connection is shutting down)."""
        self._frames.clear()

    def next_event(self) -> RequestReceived | ImmediateResponse | SaslTokenReceived | Any:
        """The next request, an immediate response, or NEED_DATA. Raises ProtocolError."""
        if self._error is not None:
            raise self._error
        if self._reader.error is not None:  # a bad frame size: what came before it is dropped too
            raise self._reader.error
        if not self._frames:
            return NEED_DATA
        try:
            return self._parse(self._frames.popleft())
        except ProtocolError as e:
            self._error = e
            raise

    def mark_authenticated(self) -> None:
        """Authentication succeeded: every served API may be dispatched from now on."""
        self.authenticated = True
        self.raw_sasl_tokens = False
        self._reader.max_frame_size = self._max_frame_size

    def _parse(self, frame: bytes | memoryview) -> RequestReceived | ImmediateResponse | SaslTokenReceived:
        if self.raw_sasl_tokens:
            return SaslTokenReceived(bytes(frame))
        if len(frame) < 8:
            raise ProtocolError("malformed request header: frame shorter than a request header")
        api_key, version, correlation_id = _HEAD.unpack_from(frame, 0)
        api = self._apis.get(api_key)
        if api is None:
            raise ProtocolError(f"unknown API key {api_key}")
        if not self.authenticated and api_key not in PRE_AUTHENTICATION_KEYS:
            raise ProtocolError(f"{messages.api_name(api_key)} before authentication")
        if api_key == API_VERSIONS_KEY and version > api.max_version:
            body = response_header(correlation_id, False) + self._api_versions_fallback
            return ImmediateResponse(api_key, version, correlation_id, _I32.pack(len(body)) + body)
        if not api.advertised_min <= version <= api.max_version:
            raise ProtocolError(f"unsupported version {version} of {messages.api_name(api_key)}")
        decode = api.decoders.get(version)
        # kio's schema says whether a version is flexible; for one it has none of, the codec does
        flexible = version in api.flexible or (version >= api.min_version and messages.is_flexible(api_key, version))
        try:
            client_id, header_size = read_header_rest(frame, flexible)
        except InvalidHeader as e:
            raise ProtocolError(f"malformed {messages.api_name(api_key)} v{version} header: {e}") from None
        try:
            if decode is not None:
                request = decode(version, frame, header_size)
            else:
                request = messages.decode_request(api_key, version, frame, header_size)
        except Exception as e:  # kio raises ValueError/IndexError/OverflowError... on malformed bodies
            raise ProtocolError(
                f"malformed {messages.api_name(api_key)} v{version} request: {type(e).__name__}: {e}"
            ) from None
        return RequestReceived(api_key, version, correlation_id, client_id, header_size, flexible, request, len(frame))

    # ------------------------------------------------------------------ sending
    def send_token(self, token: bytes) -> bytes:
        """A bare SASL token frame (the answer to a SaslTokenReceived)."""
        return _I32.pack(len(token)) + token

    def send(self, request: RequestReceived, response: Any) -> bytes:
        """The whole frame answering `request` with a kio response entity of its version."""
        head = response_header(request.correlation_id, request.flexible and request.api_key != API_VERSIONS_KEY)
        body = messages.encode(response)
        return _I32.pack(len(head) + len(body)) + head + body

    def send_chunks(self, request: RequestReceived, chunks: list[Any], size: int) -> list[Any]:
        """The frame answering `request` with a body already encoded as `chunks` (`size` bytes in all):
        the size prefix and response header as bytes, then the chunks as given (bytes, and file
        regions, objects with fd, position and length, for the transport to send from the file).
        A body of one bytes object comes back joined to the prefix: one chunk, one send."""
        head = response_header(request.correlation_id, request.flexible and request.api_key != API_VERSIONS_KEY)
        prefix = _I32.pack(len(head) + size) + head
        if len(chunks) == 1 and type(chunks[0]) is bytes:
            return [prefix + chunks[0]]
        return [prefix, *chunks]
