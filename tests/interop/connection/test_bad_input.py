"""Bad input over real sockets: a broker process must answer or hang up on the bad
connection only, stay alive, and keep serving a healthy connection opened before.

Each test starts its own broker (``socket.request.max.bytes`` 1 MiB, topic
auto-creation off), opens a healthy raw connection first (ApiVersions, Metadata),
does the bad thing on another connection, then checks the healthy one (and a
confluent-kafka producer where it matters) still works. Requests are built with
odradek.protocol (kio entities through ``registry.make``), record batches with
``records.build_batch``; Produce v2 has no kio schema, so it is encoded by hand.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from odradek.broker.registry import make
from odradek.protocol import messages, records
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import encode_frame
from odradek.protocol.headers import encode_request_header

pytestmark = pytest.mark.interop

MAX_REQUEST = 1024 * 1024
CLIENT_ID = "bad-input-test"
OVERRIDES = {"socket.request.max.bytes": MAX_REQUEST, "auto.create.topics.enable": "false"}


# --------------------------------------------------------------------------- raw protocol helpers


def request_frame(
    api_key: int, version: int, corr: int, body: bytes | object, client_id: str | None = CLIENT_ID
) -> bytes:
    """A complete frame (size prefix included). ``body`` is bytes or a kio request entity."""
    flexible = messages.is_flexible(api_key, version)
    if not isinstance(body, (bytes, bytearray)):
        body = messages.encode(body)
    return encode_frame(encode_request_header(api_key, version, corr, client_id, flexible) + bytes(body))


def entity(api_key: int, version: int, class_name: str | None = None, /, **fields):
    cls = messages.request_class(api_key, version)
    if class_name is not None:
        cls = getattr(messages.module_of(cls), class_name)
    return make(cls, **fields)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, timeout: float = 10) -> bytes | None:
    """One response frame (without the size), or None when the broker hung up."""
    sock.settimeout(timeout)
    try:
        head = recv_exact(sock, 4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return recv_exact(sock, size)
    except (ConnectionResetError, BrokenPipeError):
        return None


def assert_closed(sock: socket.socket, timeout: float = 10) -> None:
    """The broker hangs up: EOF (or a reset) with no response before it."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return
    except TimeoutError:
        pytest.fail("connection still open after bad input")
    assert data == b"", f"unexpected response bytes before close: {data[:64]!r}"


def call(sock: socket.socket, api_key: int, version: int, corr: int, body) -> object:
    """Send a request and decode its response (response header v1 for flexible versions)."""
    sock.sendall(request_frame(api_key, version, corr, body))
    resp = read_frame(sock)
    assert resp is not None, f"connection closed instead of answering api {api_key} v{version}"
    (got,) = struct.unpack_from(">i", resp, 0)
    assert got == corr
    flexible = messages.is_flexible(api_key, version) and api_key != 18
    return messages.decode_response(api_key, version, resp, 5 if flexible else 4)


def connect(broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def metadata(topics: list[str] | None = None):
    ts = None if topics is None else tuple(entity(3, 12, "MetadataRequestTopic", name=t, topic_id=None) for t in topics)
    return entity(3, 12, topics=ts, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def produce_v9(topic: str, batch: bytes, acks: int = -1, partition: int = 0):
    pd = entity(0, 9, "PartitionProduceData", index=partition, records=batch)
    td = entity(0, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    return entity(0, 9, transactional_id=None, acks=acks, timeout=5000, topic_data=(td,))


def list_offsets_latest(sock: socket.socket, topic: str, corr: int, partition: int = 0) -> int:
    p = entity(2, 7, "ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1, timestamp=-1)
    t = entity(2, 7, "ListOffsetsTopic", name=topic, partitions=(p,))
    resp = call(sock, 2, 7, corr, entity(2, 7, replica_id=-1, isolation_level=0, topics=(t,)))
    part = resp.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def a_batch(n: int = 3) -> bytes:
    return records.build_batch(
        [records.Record(-1, int(time.time() * 1000), f"k{i}".encode(), f"v{i}".encode()) for i in range(n)]
    )


class Healthy:
    """A connection opened before the bad input, checked during and after it."""

    def __init__(self, broker):
        self.broker = broker
        self.sock = connect(broker)
        self.corr = 1000
        self.check()

    def check(self) -> None:
        assert self.broker.running, f"broker died; log:\n{self.broker.log_tail()}"
        self.corr += 1
        av = call(
            self.sock, 18, 3, self.corr, entity(18, 3, client_software_name="healthy", client_software_version="1.0")
        )
        assert av.error_code == ErrorCode.none
        self.corr += 1
        md = call(self.sock, 3, 12, self.corr, metadata())
        assert [b.port for b in md.brokers] == [self.broker.port]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the module (start-up takes seconds); every test uses its own topics
    and its own connections, so none depends on another having run."""
    from support.broker import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("bad-input"), OVERRIDES).start()
    yield b
    b.stop()


@pytest.fixture
def env(shared_broker):
    assert shared_broker.running, f"broker died in an earlier test; log:\n{shared_broker.log_tail()}"
    h = Healthy(shared_broker)
    yield shared_broker, h
    h.check()
    h.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(broker, name: str, partitions: int = 1) -> None:
    pytest.importorskip("confluent_kafka")
    from support.clients import ConfluentClient

    ConfluentClient(broker.bootstrap).create_topic(name, partitions)


def confluent_roundtrip(broker) -> None:
    """A real client still produces and consumes."""
    pytest.importorskip("confluent_kafka")
    from support.clients import ConfluentClient, Rec

    c = ConfluentClient(broker.bootstrap)
    topic = f"after-{uuid.uuid4().hex[:6]}"
    c.create_topic(topic, 1)
    assert c.produce(topic, [Rec(b"k", b"v")]) == [(0, 0)]
    got = c.consume(topic, expected=1, timeout=15)
    assert [r.content() for r in got] == [(b"k", b"v", ())]


# --------------------------------------------------------------------------- frames that close the connection


def test_frame_over_socket_request_max_bytes_closes_only_that_connection(env):
    broker, healthy = env
    bad = connect(broker)
    size = 2 * MAX_REQUEST
    bad.sendall(struct.pack(">i", size) + request_frame(3, 12, 1, metadata())[4:])
    healthy.check()
    # The broker hangs up as soon as it sees the size; the rest is never read.
    try:
        bad.sendall(b"\0" * 65536)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert_closed(bad)
    healthy.check()
    confluent_roundtrip(broker)


def test_frame_of_exactly_the_limit_is_read(env):
    """A frame of exactly socket.request.max.bytes is read and answered (padding after the
    Metadata body is ignored, as the decoder reads only what the schema describes)."""
    broker, healthy = env
    s = connect(broker)
    head = request_frame(3, 12, 1, metadata())[4:]
    s.sendall(struct.pack(">i", MAX_REQUEST) + head + b"\0" * (MAX_REQUEST - len(head)))
    resp = read_frame(s)
    assert resp is not None and struct.unpack_from(">i", resp, 0)[0] == 1
    healthy.check()


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(struct.pack(">i", -1) + b"\0" * 16, id="negative-size"),
        pytest.param(encode_frame(struct.pack(">hh", 3, 12)), id="header-shorter-than-8-bytes"),
        pytest.param(encode_frame(struct.pack(">hhih", 3, 12, 1, 40) + b"abc"), id="client-id-truncated"),
        pytest.param(encode_frame(encode_request_header(3, 12, 1, CLIENT_ID, True)), id="body-missing"),
        pytest.param(encode_frame(request_frame(3, 12, 1, metadata(["a-topic"]))[4:-6]), id="body-truncated"),
        pytest.param(
            encode_frame(request_frame(0, 9, 1, produce_v9("t", a_batch()))[4:-20]), id="produce-body-truncated"
        ),
        pytest.param(
            encode_frame(encode_request_header(3, 12, 1, CLIENT_ID, True) + bytes.fromhex("ffffffff0f")),
            id="metadata-v12-absurd-array-length",
        ),
        pytest.param(
            encode_frame(encode_request_header(3, 4, 1, CLIENT_ID, False) + struct.pack(">i", 2**31 - 1)),
            id="metadata-v4-absurd-array-length",
        ),
        pytest.param(
            encode_frame(encode_request_header(0, 9, 1, CLIENT_ID, True) + b"\x03\xff" * 40), id="produce-garbage"
        ),
        pytest.param(
            encode_frame(encode_request_header(1, 12, 1, CLIENT_ID, True) + bytes(range(256)) * 4), id="fetch-garbage"
        ),
        pytest.param(encode_frame(encode_request_header(999, 0, 1, CLIENT_ID, False)), id="unknown-api-key-999"),
        pytest.param(encode_frame(encode_request_header(-5, 0, 1, CLIENT_ID, False)), id="negative-api-key"),
        pytest.param(
            request_frame(3, 12, 1, metadata()).replace(struct.pack(">hh", 3, 12), struct.pack(">hh", 3, 99), 1),
            id="metadata-v99",
        ),
        pytest.param(encode_frame(encode_request_header(0, -1, 1, CLIENT_ID, False)), id="produce-v-minus-1"),
    ],
)
def test_malformed_frame_closes_connection(env, case):
    broker, healthy = env
    bad = connect(broker)
    bad.sendall(case)
    assert_closed(bad)
    healthy.check()


def test_valid_request_after_a_bad_one_is_not_answered(env):
    """Requests pipelined behind a malformed one are dropped with the connection."""
    broker, healthy = env
    bad = connect(broker)
    bad.sendall(encode_frame(encode_request_header(999, 0, 1, CLIENT_ID, False)) + request_frame(3, 12, 2, metadata()))
    assert_closed(bad)
    healthy.check()


# --------------------------------------------------------------------------- ApiVersions


def test_api_versions_v99_gets_unsupported_version_in_v0_layout(env):
    broker, healthy = env
    s = connect(broker)
    s.sendall(encode_frame(encode_request_header(18, 99, 42, CLIENT_ID, True) + b"\x00\x00\x00"))
    resp = read_frame(s)
    assert resp is not None
    # Response header v0 (correlation id only), then the v0 body: error, [api_key, min, max].
    corr, error, n = struct.unpack_from(">ihi", resp, 0)
    assert (corr, error) == (42, ErrorCode.unsupported_version)
    assert n == 1 and len(resp) == 4 + 2 + 4 + 6
    assert struct.unpack_from(">hhh", resp, 10) == (18, 0, 4)
    # The connection stays usable: the client retries at a version we know.
    av = call(s, 18, 3, 43, entity(18, 3, client_software_name="retry", client_software_version="1"))
    assert av.error_code == ErrorCode.none
    healthy.check()


@pytest.mark.parametrize("name,version", [("bad name!", "1.0"), ("ok", "1 0"), ("", "1.0"), ("-lead", "1.0")])
def test_api_versions_invalid_client_software_gets_invalid_request(env, name, version):
    broker, healthy = env
    s = connect(broker)
    av = call(s, 18, 3, 7, entity(18, 3, client_software_name=name, client_software_version=version))
    assert av.error_code == ErrorCode.invalid_request
    healthy.check()


# --------------------------------------------------------------------------- Produce errors


def _produce_v2_body(topic: str, batch: bytes, acks: int = -1) -> bytes:
    name = topic.encode()
    return (
        struct.pack(">hi", acks, 5000)
        + struct.pack(">i", 1)
        + struct.pack(">h", len(name))
        + name
        + struct.pack(">i", 1)
        + struct.pack(">ii", 0, len(batch))
        + batch
    )


def test_produce_v2_gets_unsupported_version_per_partition(env):
    broker, healthy = env
    topic = unique("legacy")
    create_topic(broker, topic)
    s = connect(broker)
    s.sendall(encode_frame(encode_request_header(0, 2, 11, CLIENT_ID, False) + _produce_v2_body(topic, a_batch())))
    resp = read_frame(s)
    assert resp is not None
    # v2 layout: [topic [partition, error, base_offset, log_append_time]], throttle_time
    pos = 0
    corr, ntopics = struct.unpack_from(">ii", resp, pos)
    pos += 8
    assert (corr, ntopics) == (11, 1)
    (nlen,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    assert resp[pos : pos + nlen] == topic.encode()
    pos += nlen
    (nparts,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    assert nparts == 1
    part, error, base, lat = struct.unpack_from(">ihqq", resp, pos)
    pos += 22
    assert (part, error, base, lat) == (0, ErrorCode.unsupported_version, -1, -1)
    (throttle,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    assert throttle == 0 and pos == len(resp)
    assert list_offsets_latest(s, topic, 12) == 0
    healthy.check()


def test_produce_corrupt_crc_is_refused_and_log_unchanged(env):
    broker, healthy = env
    topic = unique("crc")
    create_topic(broker, topic)
    s = connect(broker)
    ok = call(s, 0, 9, 1, produce_v9(topic, a_batch(2)))
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
    before = list_offsets_latest(s, topic, 2)
    assert before == 2
    bad = bytearray(a_batch(3))
    bad[-1] ^= 0xFF  # a record byte: covered by the CRC32C
    resp = call(s, 0, 9, 3, produce_v9(topic, bytes(bad)))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.corrupt_message
    assert list_offsets_latest(s, topic, 4) == before
    # ... and a good batch on the same connection still goes in.
    again = call(s, 0, 9, 5, produce_v9(topic, a_batch(1)))
    assert again.responses[0].partition_responses[0].base_offset == before
    healthy.check()


@pytest.mark.parametrize(
    "topic,code",
    [
        ("no-such-topic", ErrorCode.unknown_topic_or_partition),
        # Kafka answers an invalid name as any other unknown topic (tests/reference/test_diff_records.py)
        ("bad name!", ErrorCode.unknown_topic_or_partition),
        ("a" * 250, ErrorCode.unknown_topic_or_partition),
        ("..", ErrorCode.unknown_topic_or_partition),
        ("__consumer_offsets", ErrorCode.invalid_topic_exception),
    ],
)
def test_produce_to_missing_invalid_or_internal_topic(env, topic, code):
    broker, healthy = env
    s = connect(broker)
    if topic == "__consumer_offsets":
        # make sure the internal topic exists (a group coordinator lookup creates it)
        fc = call(s, 10, 3, 1, entity(10, 3, key="g", key_type=0))
        assert fc.error_code in (ErrorCode.none, ErrorCode.coordinator_not_available)
    resp = call(s, 0, 9, 2, produce_v9(topic, a_batch()))
    assert resp.responses[0].partition_responses[0].error_code == code
    md = call(s, 3, 12, 3, metadata())
    assert topic not in {t.name for t in md.topics} or topic == "__consumer_offsets"
    healthy.check()


def test_produce_acks_2_gets_invalid_required_acks(env):
    broker, healthy = env
    topic = unique("acks")
    create_topic(broker, topic)
    s = connect(broker)
    resp = call(s, 0, 9, 1, produce_v9(topic, a_batch(), acks=2))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks
    assert list_offsets_latest(s, topic, 2) == 0
    healthy.check()


# --------------------------------------------------------------------------- pipelining and connection churn


def test_200_pipelined_metadata_requests_answered_in_order(env):
    broker, healthy = env
    s = connect(broker)
    s.sendall(b"".join(request_frame(3, 12, corr, metadata()) for corr in range(1, 201)))
    healthy.check()
    corrs = []
    for _ in range(200):
        resp = read_frame(s)
        assert resp is not None, f"closed after {len(corrs)} responses"
        corrs.append(struct.unpack_from(">i", resp, 0)[0])
        messages.decode_response(3, 12, resp, 5)
    assert corrs == list(range(1, 201))
    healthy.check()


def test_pipelined_mixed_versions_answered_in_order(env):
    """Fixed-layout and flexible versions interleaved on one connection."""
    broker, healthy = env
    s = connect(broker)
    reqs = []
    for corr in range(1, 61):
        v = (0, 4, 9, 12)[corr % 4]
        body = entity(
            3,
            v,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        if v == 0:
            body = entity(3, 0, topics=())
        reqs.append((corr, v, body))
    s.sendall(b"".join(request_frame(3, v, corr, body) for corr, v, body in reqs))
    for corr, v, _ in reqs:
        resp = read_frame(s)
        assert resp is not None
        assert struct.unpack_from(">i", resp, 0)[0] == corr
        messages.decode_response(3, v, resp, 5 if messages.is_flexible(3, v) else 4)
    healthy.check()


def test_half_a_frame_then_disconnect(env):
    broker, healthy = env
    for cut in (2, 6, 20):
        s = connect(broker)
        s.sendall(request_frame(3, 12, 1, metadata(["x" * 30]))[:cut])
        s.close()
    healthy.check()
    # ... and a connection that announces a frame, sends half and waits is no problem either.
    waiting = connect(broker)
    waiting.sendall(request_frame(3, 12, 1, metadata(["x" * 30]))[:20])
    healthy.check()
    waiting.close()
    healthy.check()


def test_200_connections_opened_and_closed_quickly(env):
    broker, healthy = env
    for i in range(200):
        s = socket.create_connection((broker.host, broker.port), timeout=10)
        if i % 3 == 0:
            s.sendall(request_frame(18, 0, 1, entity(18, 0)))
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        s.close()
    healthy.check()
    confluent_roundtrip(broker)
    assert broker.running
