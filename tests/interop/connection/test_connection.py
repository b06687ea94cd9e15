"""Connection behaviour against a real broker process, over raw sockets.

* pipelined requests beyond `queued.max.requests` are all answered, in order (reading
  pauses and resumes);
* a connection idle for longer than `connections.max.idle.ms` is closed;
* a frame over `socket.request.max.bytes` closes that connection only;
* Fetch responses carry the same record bytes whether they go inline (small) or with
  sendfile (large).
"""

from __future__ import annotations

import socket
import struct
import time

from odradek.broker.registry import make
from odradek.broker.transport import INLINE_REGION_BYTES
from odradek.protocol import messages, records
from odradek.protocol.headers import encode_request_header

_SIZE = struct.Struct(">i")


def request(api_key: int, version: int, corr: int, /, **fields) -> bytes:
    body = encode_request_header(api_key, version, corr, "test", messages.is_flexible(api_key, version))
    body += messages.encode(make(messages.request_class(api_key, version), **fields))
    return _SIZE.pack(len(body)) + body


def nested(api_key: int, version: int, name: str, /, **fields):
    return make(getattr(messages.module_of(messages.request_class(api_key, version)), name), **fields)


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    (n,) = _SIZE.unpack(exactly(4))
    return exactly(n)


def connect(broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=15)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def test_pipelined_requests_beyond_the_queue_limit_answered_in_order(broker_factory):
    b = broker_factory({"queued.max.requests": 2})
    with connect(b) as s:
        n = 50
        s.sendall(
            b"".join(request(18, 3, corr, client_software_name="t", client_software_version="1") for corr in range(n))
        )
        for corr in range(n):
            frame = read_frame(s)
            assert struct.unpack_from(">i", frame)[0] == corr


def test_idle_connection_is_closed(broker_factory):
    b = broker_factory({"connections.max.idle.ms": 300})
    with connect(b) as s:
        s.settimeout(10)
        t0 = time.monotonic()
        assert s.recv(1) == b""  # EOF from the broker
        assert time.monotonic() - t0 < 8
    with connect(b) as s:  # the broker still serves new connections
        s.sendall(request(18, 3, 1, client_software_name="t", client_software_version="1"))
        assert struct.unpack_from(">i", read_frame(s))[0] == 1


def test_oversized_frame_closes_only_that_connection(broker_factory):
    b = broker_factory({"socket.request.max.bytes": 1000})
    with connect(b) as other, connect(b) as s:
        s.sendall(_SIZE.pack(5000) + b"\x00" * 100)
        s.settimeout(10)
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass
        other.sendall(request(18, 3, 7, client_software_name="t", client_software_version="1"))
        assert struct.unpack_from(">i", read_frame(other))[0] == 7


def test_fetch_bytes_same_inline_and_sendfile(broker):
    """One small batch (sent inline with the response fields) and a large one (sendfile)."""
    topic = "conn-fetch"
    with connect(broker) as s:
        s.sendall(
            request(
                19,
                7,
                1,
                topics=(
                    nested(
                        19,
                        7,
                        "CreatableTopic",
                        name=topic,
                        num_partitions=1,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=10000,
                validate_only=False,
            )
        )
        read_frame(s)
        small = records.build_batch([records.Record(timestamp=1, value=b"s" * 100)])
        large = records.build_batch(
            [records.Record(timestamp=2, value=bytes(range(256)) * (INLINE_REGION_BYTES // 128))]
        )
        for corr, batch in ((2, small), (3, large)):
            pd = nested(0, 9, "PartitionProduceData", index=0, records=batch)
            s.sendall(
                request(
                    0,
                    9,
                    corr,
                    transactional_id=None,
                    acks=1,
                    timeout=10000,
                    topic_data=(nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,)),),
                )
            )
            resp = messages.decode_response(0, 9, read_frame(s), 5)
            assert resp.responses[0].partition_responses[0].error_code == 0
        for corr, (offset, batch) in ((4, (0, small)), (5, (1, large))):
            fp = nested(
                1,
                12,
                "FetchPartition",
                partition=0,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=len(batch),
            )
            s.sendall(
                request(
                    1,
                    12,
                    corr,
                    replica_id=-1,
                    max_wait=0,
                    min_bytes=0,
                    max_bytes=len(batch),
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    topics=(nested(1, 12, "FetchTopic", topic=topic, partitions=(fp,)),),
                    forgotten_topics_data=(),
                    rack_id="",
                )
            )
            resp = messages.decode_response(1, 12, read_frame(s), 5)
            got = resp.responses[0].partitions[0].records
            # the broker patched the base offset (and the CRC is over the rest): compare from the CRC on
            assert records.parse_header(got).base_offset == offset
            assert got[12:] != b"" and got[17:] == batch[17:]
