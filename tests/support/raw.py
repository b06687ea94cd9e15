"""A bare protocol connection for tests: build any request version with kio entities,
read the response; no client library in between."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from odradek.broker.registry import make
from odradek.protocol import messages
from odradek.protocol.headers import encode_request_header


class RawConnection:
    def __init__(self, bootstrap: str, timeout: float = 15.0, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: over TLS with this client context."""
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
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


def fetch_from_start(topic: str, partitions: range, version: int = 12) -> dict[str, Any]:
    """The fields of a consumer's session-less Fetch (`version`) of `partitions` from offset 0,
    read_uncommitted, 1 MiB a partition: pass them to `call(1, version, **fields)`."""
    fps = tuple(
        nested(
            1,
            version,
            "FetchPartition",
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for p in partitions
    )
    return dict(
        replica_id=-1,
        max_wait=0,
        min_bytes=1,
        max_bytes=64 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(nested(1, version, "FetchTopic", topic=topic, partitions=fps),),
        forgotten_topics_data=(),
        rack_id="",
    )


def fetched_values(response: Any) -> dict[int, list[bytes | None]]:
    """Each partition's record values in a Fetch response of one topic (every partition must
    have answered without error)."""
    from odradek.protocol.records import decode_records, iter_batches

    out = {}
    for p in response.responses[0].partitions:
        assert int(p.error_code) == 0, p
        data = p.records or b""
        out[p.partition_index] = [rec.value for h in iter_batches(data) for rec in decode_records(data, h.position)]
    return out
