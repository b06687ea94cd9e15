"""A bare protocol connection for tests: build any request version with kio entities,
read the response; no client library in between."""

from __future__ import annotations

import socket
import struct
from typing import Any

from odradek.broker.registry import make
from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header


class RawConnection:
    def __init__(self, bootstrap: str, timeout: float = 15.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, api_key: int, version: int, request: Any) -> int:
        self.correlation += 1
        flexible = messages.is_flexible(api_key, version)
        body = encode_request_header(api_key, version, self.correlation, "raw-test", flexible) + messages.encode(
            request
        )
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        return self.correlation

    def recv(self, api_key: int, version: int) -> tuple[int, Any]:
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        correlation = struct.unpack_from(">i", frame)[0]
        offset = 4 + (1 if messages.is_flexible(api_key, version) and api_key != 18 else 0)
        return correlation, messages.decode_response(api_key, version, frame, offset)

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        self.send(api_key, version, request(api_key, version, **fields))
        return self.recv(api_key, version)[1]

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)


def request(api_key: int, version: int, /, **fields: Any) -> Any:
    return make(messages.request_class(api_key, version), **fields)


def nested(api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
    """A nested request entity (e.g. "FetchTopic") of that API version."""
    mod = messages.module_of(messages.request_class(api_key, version))
    return make(getattr(mod, class_name), **fields)
